//! Where each thread of a live CPython 3.13+ keeps its bound thread state (see [`crate::python::bound`]), so that
//! the known-stack matcher can reach the thread's frames from its thread pointer (see [`crate::python::known`]).
//! A pthread key's value is in glibc's thread descriptor, in the first block of `specific` for keys below 32, at
//! offsets glibc publishes for libthread_db (`_thread_db_*`, in libc's dynamic symbols); a static thread-local
//! variable is at a fixed offset from the thread pointer. musl, keys of the second level and a shared
//! libpython's thread-local variables (reached through `__tls_get_addr`) are not read: their calls keep stopping.

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
}

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
    let (at, _) = py.find_symbol(FUNCTION).ok_or(format!("no {FUNCTION}"))?;
    let code = py.file_bytes(at, 64).ok_or(format!("{FUNCTION}'s code is not in the file"))?;
    let end = runtime.checked_add(runtime_size.max(1)).ok_or("_PyRuntime's size")?;
    let found = bound::decode(code, at, (runtime, end), read_u64).ok_or(format!("{FUNCTION}: code not understood"))?;
    let finalizing = runtime.wrapping_add(finalizing);
    let place = match found {
        Bound::Tls { tpoff } => Place::Tls { tpoff },
        Bound::TlsIndex { .. } => return Err("a shared libpython's thread-local variable is not read".into()),
        Bound::Key { tss } => {
            // Py_tss_t: int _is_initialized; pthread_key_t _key.
            let word = read_u64(tss).ok_or("Py_tss_t unreadable")?;
            let (init, key) = (word & 0xffff_ffff, word >> 32);
            if init != 1 || key >= FIRST_BLOCK_KEYS {
                return Err(format!("thread-state key not usable (initialized {init}, key {key})"));
            }
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
    };
    Ok(BoundSlot { place, finalizing })
}

impl BoundSlot {
    /// The offset from thread pointer `tp` of its bound thread state; `None` where it is not inside the thread's
    /// descriptor or static TLS as expected.
    pub fn slot(&self, tp: u64, read_u64: &dyn Fn(u64) -> Option<u64>) -> Option<i32> {
        match self.place {
            Place::Tls { tpoff } => i32::try_from(tpoff).ok().filter(|&o| o < 0),
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
    }
}
