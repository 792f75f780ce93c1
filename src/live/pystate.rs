//! Where each thread of a live CPython (3.9+) keeps its bound thread state (see [`crate::python::bound`]), so that
//! the known-stack matcher can reach the thread's frames from its thread pointer (see [`crate::python::known`]).
//! A pthread key's value is in glibc's thread descriptor, in the first block of `specific` for keys below 32, at
//! offsets glibc publishes for libthread_db (`_thread_db_*`, in libc's dynamic symbols); a thread-local variable
//! is at a fixed offset from the thread pointer, given by the code (an executable), by a GOT slot (initial-exec),
//! or, for a shared libpython's (general-dynamic, through `__tls_get_addr`), by its module's block in the thread's
//! DTV when that block is static TLS (glibc gives a module loaded at start its block below the thread pointer,
//! and no memory to free). musl and keys of the second level are not read: their calls keep stopping.

use crate::model::modules::Module;
use crate::python::bound::{self, Bound};

/// Where the bound thread state is, from a thread pointer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoundSlot {
    place: Place,
    /// The address of `_PyRuntime._finalizing`.
    pub finalizing: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Place {
    /// The key's value in glibc's descriptor: `specific[0]` (the first block) read at `specific` from the thread
    /// pointer, the key's entry `key * stride` into it, its value at `data` in the entry; the descriptor is
    /// `size` bytes.
    Key {
        key: u64,
        specific: u64,
        stride: u64,
        data: u64,
        size: u64,
    },
    Tls {
        tpoff: i64,
    },
    /// Module `modid`'s block, at `off` in it.
    Dtv {
        modid: u64,
        off: u64,
    },
}

/// glibc's DTV: its pointer in the thread control block (`tcbhead_t.dtv`), and each entry (`dtv_t`: the block,
/// then what to free, null for a static block).
const TCB_DTV: u64 = 8;
const DTV_ENTRY: u64 = 16;
/// How far below the thread pointer a static TLS block may be (glibc's static TLS is a few KiB to a few MiB).
const STATIC_TLS_MAX: u64 = 64 << 20;

/// Keys of glibc's first block (PTHREAD_KEY_2NDLEVEL_SIZE).
const FIRST_BLOCK_KEYS: u64 = 32;

/// Where the threads of the interpreter in `py` (whose `_PyRuntime` is `runtime`, `runtime_size` bytes, with
/// `_finalizing` at `finalizing`) keep their bound thread states; `libc` is the process's C library. Err says why
/// it cannot be known.
pub fn find(
    py: &Module,
    libc: Option<&Module>,
    (runtime, runtime_size, finalizing): (u64, u64, u64),
    read_u64: &dyn Fn(u64) -> Option<u64>,
) -> Result<BoundSlot, String> {
    const FUNCTION: &str = "PyGILState_GetThisThreadState";
    let (at, code) = function_code(py, FUNCTION)?;
    let end = runtime.checked_add(runtime_size.max(1)).ok_or("_PyRuntime's size")?;
    let found = bound::decode(code, at, (runtime, end), read_u64).ok_or(format!("{FUNCTION}: code not understood"))?;
    let finalizing = runtime.wrapping_add(finalizing);
    let place = match found {
        Bound::Key { tss } => {
            // The first candidate that is a Py_tss_t (int _is_initialized; pthread_key_t _key) of a created key
            // of glibc's first block.
            let key = tss
                .iter()
                .filter_map(|&a| read_u64(a))
                .map(|w| (w & 0xffff_ffff, w >> 32))
                .find(|&(init, key)| init == 1 && key < FIRST_BLOCK_KEYS)
                .map(|(_, key)| key)
                .ok_or("no usable thread-state key (not created, or past glibc's first block)")?;
            let libc = libc.ok_or("no libc mapped")?;
            // A `_thread_db_*` descriptor: three 32-bit words (bits, count, offset), or one (a size).
            let word_of = |name: &str, i: u64| -> Result<u64, String> {
                let (a, _) = libc.find_symbol(name).ok_or(format!("libc has no {name} (not glibc?)"))?;
                let w = read_u64(a.wrapping_add(i * 4)).ok_or(format!("{name} unreadable"))?;
                Ok(w & 0xffff_ffff)
            };
            Place::Key {
                key,
                specific: word_of("_thread_db_pthread_specific", 2)?,
                stride: word_of("_thread_db_sizeof_pthread_key_data", 0)?,
                data: word_of("_thread_db_pthread_key_data_data", 2)?,
                size: word_of("_thread_db_sizeof_pthread", 0)?,
            }
        }
        tls => tls_place(tls, read_u64)?,
    };
    Ok(BoundSlot { place, finalizing })
}

/// The address and the first bytes (at most 64, no more than its symbol's size) of `function`'s code.
fn function_code<'m>(module: &'m Module, function: &str) -> Result<(u64, &'m [u8]), String> {
    let (at, size) = module.find_symbol(function).ok_or(format!("no {function}"))?;
    let len = if size == 0 { 64 } else { size.min(64) };
    Ok((at, module.file_bytes(at, len).ok_or(format!("{function}'s code is not in the file"))?))
}

fn tls_place(found: Bound, read_u64: &dyn Fn(u64) -> Option<u64>) -> Result<Place, String> {
    match found {
        Bound::Tls { tpoff } => Ok(Place::Tls { tpoff }),
        Bound::TlsIndex { index } => {
            // tls_index: the module's id (filled by ld.so), the variable's offset in its block.
            let (modid, off) = read_u64(index).zip(read_u64(index.wrapping_add(8))).ok_or("tls_index unreadable")?;
            if modid == 0 || modid > 1 << 16 {
                return Err(format!("tls_index names module {modid}"));
            }
            Ok(Place::Dtv { modid, off })
        }
        Bound::Key { .. } => Err("not a thread-local variable".into()),
    }
}

/// The offset from thread pointer `tp` of the thread-local variable that `function` of `module` reads (or whose
/// address it returns), if it lies in static TLS (tests: the general-dynamic path on a library of their own).
pub fn tls_slot_of(
    module: &Module,
    function: &str,
    tp: u64,
    read_u64: &dyn Fn(u64) -> Option<u64>,
) -> Result<i32, String> {
    let (at, code) = function_code(module, function)?;
    let found = bound::decode(code, at, (0, 0), read_u64).ok_or(format!("{function}: code not understood"))?;
    let place = tls_place(found, read_u64)?;
    BoundSlot { place, finalizing: 0 }.slot(tp, read_u64).ok_or("not in static TLS".into())
}

impl BoundSlot {
    /// The offset from thread pointer `tp` of its bound thread state; `None` where it is not inside the thread's
    /// descriptor or static TLS as expected.
    pub fn slot(&self, tp: u64, read_u64: &dyn Fn(u64) -> Option<u64>) -> Option<i32> {
        match self.place {
            Place::Tls { tpoff } => i32::try_from(tpoff).ok().filter(|&o| o < 0),
            Place::Dtv { modid, off } => {
                let dtv = read_u64(tp.wrapping_add(TCB_DTV))?;
                let entry = dtv.checked_add(modid.checked_mul(DTV_ENTRY)?)?;
                let (block, to_free) = (read_u64(entry)?, read_u64(entry.checked_add(8)?)?);
                // A dynamic block (allocated at first use, freed at dlclose) has memory to free; an unallocated
                // one is all ones.
                if to_free != 0 || block == 0 || block >= tp || tp - block > STATIC_TLS_MAX {
                    return None;
                }
                let at = block.checked_add(off)?;
                (at < tp).then(|| i32::try_from(at.wrapping_sub(tp) as i64).ok())?
            }
            Place::Key { key, specific, stride, data, size } => {
                // The first block is inside the descriptor, which starts at the thread pointer.
                let first = read_u64(tp.wrapping_add(specific))?.checked_sub(tp)?;
                let off = first.checked_add(key.checked_mul(stride)?)?.checked_add(data)?;
                (off + 8 <= size).then(|| i32::try_from(off).ok())?
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_keys_slot_is_inside_the_descriptor() {
        let b = BoundSlot {
            place: Place::Key { key: 2, specific: 0x500, stride: 16, data: 8, size: 0x900 },
            finalizing: 1,
        };
        let tp = 0x7f00_0000_0000u64;
        let at = |v: u64| move |a: u64| (a == tp + 0x500).then_some(v);
        assert_eq!(b.slot(tp, &at(tp + 0x310)), Some(0x310 + 32 + 8));
        assert_eq!(b.slot(tp, &at(tp + 0x8f8)), None, "past the descriptor");
        assert_eq!(b.slot(tp, &at(tp - 8)), None, "below the thread pointer");
        let tls = BoundSlot { place: Place::Tls { tpoff: -40 }, finalizing: 1 };
        assert_eq!(tls.slot(tp, &|_| None), Some(-40));
        // Module 2's block at tp - 0x200 (static: nothing to free), the variable 0x18 into it.
        let dtv = BoundSlot { place: Place::Dtv { modid: 2, off: 0x18 }, finalizing: 1 };
        let mem = |to_free: u64| {
            move |a: u64| match a.wrapping_sub(tp) {
                8 => Some(0x5000),
                _ if a == 0x5000 + 32 => Some(tp - 0x200),
                _ if a == 0x5000 + 40 => Some(to_free),
                _ => None,
            }
        };
        assert_eq!(dtv.slot(tp, &mem(0)), Some(-0x200 + 0x18));
        assert_eq!(dtv.slot(tp, &mem(0x6000)), None, "a dynamic block");
    }
}
