//! The x86_64 Linux constants of the memory calls, defined once: syscall numbers and flag names, used by the
//! leak model, the argument decoder, probe scripts and the trampoline's own mmap.

pub const SYS_MMAP: u64 = 9;
pub const SYS_MPROTECT: u64 = 10;
pub const SYS_MUNMAP: u64 = 11;
pub const SYS_BRK: u64 = 12;
pub const SYS_MREMAP: u64 = 25;
pub const SYS_MADVISE: u64 = 28;

/// The calls that create, remove or move mappings: what `--leaks` traces.
pub const MAPPING_SYSCALLS: [u64; 6] = [SYS_MMAP, SYS_MUNMAP, SYS_MREMAP, SYS_BRK, SYS_MPROTECT, SYS_MADVISE];

pub const PROT_NONE: u64 = 0;
pub const MAP_SHARED: u64 = 0x01;
pub const MAP_PRIVATE: u64 = 0x02;
/// The sharing type is a 2-bit field (`MAP_SHARED_VALIDATE` is both bits), not independent flags.
pub const MAP_TYPE: u64 = 0x03;
pub const MAP_FIXED: u64 = 0x10;
pub const MAP_ANONYMOUS: u64 = 0x20;
pub const MAP_FIXED_NOREPLACE: u64 = 0x10_0000;

pub const PROT: &[(u64, &str)] = &[(0x1, "PROT_READ"), (0x2, "PROT_WRITE"), (0x4, "PROT_EXEC")];
pub const MAP: &[(u64, &str)] = &[
    (MAP_SHARED, "MAP_SHARED"),
    (MAP_PRIVATE, "MAP_PRIVATE"),
    (MAP_TYPE, "MAP_SHARED_VALIDATE"),
    (MAP_FIXED, "MAP_FIXED"),
    (MAP_ANONYMOUS, "MAP_ANONYMOUS"),
    (0x100, "MAP_GROWSDOWN"),
    (0x800, "MAP_DENYWRITE"),
    (0x1000, "MAP_EXECUTABLE"),
    (0x2000, "MAP_LOCKED"),
    (0x4000, "MAP_NORESERVE"),
    (0x8000, "MAP_POPULATE"),
    (0x10000, "MAP_NONBLOCK"),
    (0x20000, "MAP_STACK"),
    (0x40000, "MAP_HUGETLB"),
    (0x80000, "MAP_SYNC"),
    (MAP_FIXED_NOREPLACE, "MAP_FIXED_NOREPLACE"),
];
pub const MREMAP: &[(u64, &str)] = &[(0x1, "MREMAP_MAYMOVE"), (0x2, "MREMAP_FIXED"), (0x4, "MREMAP_DONTUNMAP")];

/// The value of a flag named in a probe script (`MAP_ANONYMOUS`, `PROT_NONE`, ...).
pub fn flag_value(name: &str) -> Option<u64> {
    if name == "PROT_NONE" {
        return Some(PROT_NONE);
    }
    PROT.iter().chain(MAP).chain(MREMAP).find(|(_, n)| *n == name).map(|(v, _)| *v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_by_name() {
        assert_eq!(flag_value("MAP_ANONYMOUS"), Some(0x20));
        assert_eq!(flag_value("PROT_NONE"), Some(0));
        assert_eq!(flag_value("MREMAP_DONTUNMAP"), Some(4));
        assert_eq!(flag_value("MAP_NOPE"), None);
    }
}
