//! DWARF expressions in CFI, evaluated over the captured registers and stack copy (unwind.rs).

use super::*;

/// Runs a CFI expression (`DW_CFA_def_cfa_expression`, `DW_CFA_[val_]expression`): registers from `regs`,
/// memory from the captured stack, bounded in steps so a looping expression ends.
pub(super) fn evaluate(
    expr: gimli::Expression<EndianSlice<'_, LittleEndian>>,
    initial: Option<u64>,
    regs: &UnwindRegs,
    stack: &StackWindow,
) -> Result<u64, String> {
    let enc = gimli::Encoding { format: gimli::Format::Dwarf32, version: 4, address_size: 8 };
    let mut ev = expr.evaluation(enc);
    ev.set_max_iterations(1000);
    if let Some(v) = initial {
        ev.set_initial_value(v);
    }
    let bad = |e: gimli::Error| format!("CFI expression failed: {e}");
    let mut res = ev.evaluate().map_err(bad)?;
    loop {
        res = match res {
            gimli::EvaluationResult::Complete => break,
            gimli::EvaluationResult::RequiresMemory { address, size, .. } => {
                let v = stack.read_u64(address)?;
                let v = match size {
                    8 => v,
                    1..=7 => v & ((1u64 << (8 * size as u32)) - 1),
                    _ => return Err(format!("CFI expression reads {size} bytes")),
                };
                ev.resume_with_memory(gimli::Value::Generic(v)).map_err(bad)?
            }
            gimli::EvaluationResult::RequiresRegister { register, .. } => {
                let r = register.0 as usize;
                let v = regs
                    .get(r)
                    .ok_or_else(|| format!("CFI expression needs {} which is unknown", UnwindRegs::name(r)))?;
                ev.resume_with_register(gimli::Value::Generic(v)).map_err(bad)?
            }
            other => {
                return Err(format!("CFI expression needs what a stack copy cannot give ({other:?})"));
            }
        };
    }
    match ev.as_result() {
        [gimli::Piece { location: gimli::Location::Address { address }, .. }] => Ok(*address),
        [gimli::Piece { location: gimli::Location::Value { value }, .. }] => value.to_u64(u64::MAX).map_err(bad),
        _ => Err("CFI expression gave no single address".into()),
    }
}
