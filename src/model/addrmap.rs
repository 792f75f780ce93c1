//! A hash map for keys that are addresses and small integers: SipHash costs more than the rest of a cached
//! lookup on the hot paths (a CFI row per unwound frame, a code object per Python frame). The keys come from the
//! target, but nothing is gained by making them collide (a target that wanted to slow syscatch down has cheaper
//! ways), so no keyed hash is needed.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Multiplies each word in (a Fibonacci hash), rotating between words.
#[derive(Default)]
pub struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    fn write_i64(&mut self, v: i64) {
        self.write_u64(v as u64);
    }
    fn write_i32(&mut self, v: i32) {
        self.write_u64(v as u32 as u64);
    }
}

pub type AddrMap<K, V> = HashMap<K, V, BuildHasherDefault<AddrHasher>>;
