//! Line numbers from a code object's line table, as CPython computes `f_lineno`: pure functions over the table's
//! bytes. `None` when the instruction has no line or the table is malformed (never a guess).

use super::layout::LineFormat;

/// The line of the instruction at byte offset `offset` into the bytecode (3.9/3.10: `f_lasti` scaled to bytes;
/// 3.11+: the instruction pointer minus the bytecode start).
pub fn parse_line(format: LineFormat, table: &[u8], firstlineno: i32, offset: i64) -> Option<u32> {
    let line = match format {
        LineFormat::Lnotab => lnotab(table, firstlineno, offset),
        LineFormat::Linetable310 => linetable_310(table, firstlineno, offset),
        LineFormat::Locations => locations(table, firstlineno, offset / 2),
    }?;
    u32::try_from(line).ok().filter(|&l| l > 0)
}

/// 3.9 `PyCode_Addr2Line`: (address delta, signed line delta) pairs.
fn lnotab(table: &[u8], first: i32, offset: i64) -> Option<i64> {
    let mut line = first as i64;
    let mut addr = 0i64;
    for pair in table.chunks_exact(2) {
        addr += pair[0] as i64;
        if addr > offset {
            break;
        }
        line += pair[1] as i8 as i64;
    }
    Some(line)
}

/// 3.10 `PyCode_Addr2Line`: each pair is a range of `pair[0]` bytes and its line delta (-128: no line).
fn linetable_310(table: &[u8], first: i32, offset: i64) -> Option<i64> {
    if offset < 0 {
        return Some(first as i64);
    }
    let mut line = first as i64;
    let mut addr = 0i64;
    for pair in table.chunks_exact(2) {
        let end = addr + pair[0] as i64;
        let delta = pair[1] as i8;
        let this = if delta == -128 {
            None
        } else {
            line += delta as i64;
            Some(line)
        };
        if addr <= offset && offset < end {
            return this;
        }
        addr = end;
    }
    None
}

/// 3.11+ location table (Objects/locations.md): entries of `(b & 7) + 1` code units whose code `(b >> 3) & 15`
/// says how the line changes: 15 no location, 14 long form, 13 no column, 10-12 one-line forms, 0-9 short form.
fn locations(table: &[u8], first: i32, unit: i64) -> Option<i64> {
    let mut line = first as i64;
    let mut addr = 0i64;
    let mut i = 0usize;
    while i < table.len() {
        let b = table[i];
        i += 1;
        if b & 0x80 == 0 {
            return None;
        }
        let code = (b >> 3) & 15;
        let len = (b & 7) as i64 + 1;
        let has_line = match code {
            15 => false,
            14 => {
                line += svarint(table, &mut i)?;
                for _ in 0..3 {
                    varint(table, &mut i)?;
                }
                true
            }
            13 => {
                line += svarint(table, &mut i)?;
                true
            }
            10..=12 => {
                line += (code - 10) as i64;
                i += 2;
                true
            }
            _ => {
                i += 1;
                true
            }
        };
        let end = addr + len;
        if addr <= unit && unit < end {
            return has_line.then_some(line);
        }
        addr = end;
    }
    None
}

fn varint(t: &[u8], i: &mut usize) -> Option<i64> {
    let mut b = *t.get(*i)?;
    *i += 1;
    let mut v = (b & 63) as i64;
    let mut shift = 0;
    while b & 64 != 0 {
        b = *t.get(*i)?;
        *i += 1;
        shift += 6;
        if shift > 48 {
            return None;
        }
        v |= ((b & 63) as i64) << shift;
    }
    Some(v)
}

fn svarint(t: &[u8], i: &mut usize) -> Option<i64> {
    let v = varint(t, i)?;
    Some(if v & 1 != 0 { -(v >> 1) } else { v >> 1 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lnotab_lines() {
        // Line 10 at bytes 0..6, 11 at 6..10, 13 from 10.
        let t = [6, 1, 4, 2];
        assert_eq!(parse_line(LineFormat::Lnotab, &t, 10, 0), Some(10));
        assert_eq!(parse_line(LineFormat::Lnotab, &t, 10, 6), Some(11));
        assert_eq!(parse_line(LineFormat::Lnotab, &t, 10, 12), Some(13));
    }

    #[test]
    fn linetable_310_lines() {
        let t = [4, 0, 6, 1, 2, 0x80, 4, 3];
        assert_eq!(parse_line(LineFormat::Linetable310, &t, 5, 0), Some(5));
        assert_eq!(parse_line(LineFormat::Linetable310, &t, 5, 8), Some(6));
        assert_eq!(parse_line(LineFormat::Linetable310, &t, 5, 10), None);
        assert_eq!(parse_line(LineFormat::Linetable310, &t, 5, 12), Some(9));
        assert_eq!(parse_line(LineFormat::Linetable310, &t, 5, 100), None);
        assert_eq!(parse_line(LineFormat::Linetable310, &t, 5, -2), Some(5));
    }

    #[test]
    fn location_table_lines() {
        // One unit at the first line (short form), two units one line down (one-line form 11), one long-form unit
        // three lines further, one unit without location.
        let t = [0x80, 0, 0x80 | (11 << 3) | 1, 4, 8, 0x80 | (14 << 3), 6, 0, 1, 1, 0x80 | (15 << 3)];
        let l = |u: i64| parse_line(LineFormat::Locations, &t, 20, u * 2);
        assert_eq!(l(0), Some(20));
        assert_eq!(l(1), Some(21));
        assert_eq!(l(2), Some(21));
        assert_eq!(l(3), Some(24));
        assert_eq!(l(4), None);
        assert_eq!(l(5), None);
        // Malformed: no start bit, a truncated varint.
        assert_eq!(parse_line(LineFormat::Locations, &[0x00], 1, 0), None);
        assert_eq!(parse_line(LineFormat::Locations, &[0x80 | (13 << 3), 0x40], 1, 0), None);
    }
}
