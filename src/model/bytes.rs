//! Immutable bytes shared between threads: a module file, its debug file, a vDSO image. Either owned memory or a
//! read-only mapping of the file (made by `os::filemap`), so a large library costs resident memory only for the
//! pages actually read (symbols, unwind tables, the DWARF units that are looked up), not its whole size.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

/// What holds the bytes of a [`Bytes`]. `bytes` must return the same slice for the object's whole life, and
/// the slice must not change: readers (gimli) keep pointers into it while the value moves.
pub trait Backing: Send + Sync {
    fn bytes(&self) -> &[u8];
    /// The bytes at `range` will not be read for a while (a compressed section, once inflated): a mapping may drop
    /// those pages from resident memory; they are read again from the file if needed, unchanged.
    fn release(&self, _range: std::ops::Range<usize>) {}
}

impl Backing for Box<[u8]> {
    fn bytes(&self) -> &[u8] {
        self
    }
}

impl Backing for Arc<[u8]> {
    fn bytes(&self) -> &[u8] {
        self
    }
}

/// Cheaply cloned, immutable bytes.
#[derive(Clone)]
pub struct Bytes(Arc<dyn Backing>);

impl Bytes {
    pub fn new(backing: impl Backing + 'static) -> Bytes {
        Bytes(Arc::new(backing))
    }

    /// See [`Backing::release`]; ranges out of bounds are ignored.
    pub fn release(&self, range: std::ops::Range<usize>) {
        if range.start < range.end && range.end <= self.len() {
            self.0.release(range);
        }
    }
}

impl Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.0.bytes()
    }
}

impl AsRef<[u8]> for Bytes {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl fmt::Debug for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Bytes({} bytes)", self.len())
    }
}

impl From<Vec<u8>> for Bytes {
    fn from(v: Vec<u8>) -> Bytes {
        Bytes::new(v.into_boxed_slice())
    }
}

impl From<&[u8]> for Bytes {
    fn from(v: &[u8]) -> Bytes {
        Bytes::new(Box::<[u8]>::from(v))
    }
}

impl From<Arc<[u8]>> for Bytes {
    fn from(v: Arc<[u8]>) -> Bytes {
        Bytes::new(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_bytes_deref_and_clone_share() {
        let b = Bytes::from(vec![1u8, 2, 3]);
        let c = b.clone();
        assert_eq!(&*c, &[1, 2, 3]);
        assert_eq!(b.as_ptr(), c.as_ptr());
        assert_eq!(format!("{b:?}"), "Bytes(3 bytes)");
    }
}
