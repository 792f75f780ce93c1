//! Decodes the arguments of the memory syscalls into names and flags, for the text output.

use crate::model::consts::{
    MAP, MAP_TYPE, MREMAP, PROT, SYS_BRK, SYS_MADVISE, SYS_MMAP, SYS_MPROTECT, SYS_MREMAP, SYS_MUNMAP,
};

fn flags(v: u64, table: &[(u64, &str)], none: &str) -> String {
    let mut names = Vec::new();
    let mut left = v;
    for &(bit, name) in table {
        if bit != MAP_TYPE && v & bit == bit && left & bit != 0 {
            names.push(name.to_string());
            left &= !bit;
        }
    }
    if table == MAP {
        // The sharing type is a 2-bit field, not independent bits.
        names.retain(|n| n != "MAP_SHARED" && n != "MAP_PRIVATE");
        let kind = match v & MAP_TYPE {
            1 => "MAP_SHARED",
            2 => "MAP_PRIVATE",
            3 => "MAP_SHARED_VALIDATE",
            _ => "",
        };
        if !kind.is_empty() {
            names.insert(0, kind.to_string());
        }
        left &= !MAP_TYPE;
    }
    if left != 0 {
        names.push(format!("{left:#x}"));
    }
    if names.is_empty() { none.to_string() } else { names.join("|") }
}

/// `addr=0x0, len=4096, prot=PROT_READ|PROT_WRITE, ...` for known syscalls, hex arguments otherwise.
pub fn args(nr: u64, a: &[u64; 6]) -> String {
    match nr {
        SYS_MMAP => format!(
            "addr={:#x}, len={}, prot={}, flags={}, fd={}, off={:#x}",
            a[0],
            a[1],
            flags(a[2], PROT, "PROT_NONE"),
            flags(a[3], MAP, "0"),
            a[4] as i32,
            a[5]
        ),
        SYS_MUNMAP => format!("addr={:#x}, len={}", a[0], a[1]),
        SYS_MREMAP => format!(
            "old_addr={:#x}, old_len={}, new_len={}, flags={}, new_addr={:#x}",
            a[0],
            a[1],
            a[2],
            flags(a[3], MREMAP, "0"),
            a[4]
        ),
        SYS_MPROTECT => format!("addr={:#x}, len={}, prot={}", a[0], a[1], flags(a[2], PROT, "PROT_NONE")),
        SYS_BRK => format!("addr={:#x}", a[0]),
        SYS_MADVISE => format!("addr={:#x}, len={}, advice={}", a[0], a[1], a[2]),
        _ => a.iter().map(|v| format!("{v:#x}")).collect::<Vec<_>>().join(", "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mmap_args() {
        assert_eq!(
            args(9, &[0, 4096, 3, 0x22, u64::MAX, 0]),
            "addr=0x0, len=4096, prot=PROT_READ|PROT_WRITE, flags=MAP_PRIVATE|MAP_ANONYMOUS, fd=-1, off=0x0"
        );
        assert_eq!(
            args(9, &[0, 1, 0, 0x40_0000_0001, 3, 0]).split(", ").nth(3).unwrap(),
            "flags=MAP_SHARED|0x4000000000"
        );
        assert_eq!(args(39, &[1, 2, 0, 0, 0, 0]), "0x1, 0x2, 0x0, 0x0, 0x0, 0x0");
    }
}
