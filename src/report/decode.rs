//! Decodes the arguments of the memory syscalls into names and flags, for the text output.

const PROT: &[(u64, &str)] = &[(1, "PROT_READ"), (2, "PROT_WRITE"), (4, "PROT_EXEC")];
const MAP: &[(u64, &str)] = &[
    (0x01, "MAP_SHARED"),
    (0x02, "MAP_PRIVATE"),
    (0x03, "MAP_SHARED_VALIDATE"),
    (0x10, "MAP_FIXED"),
    (0x20, "MAP_ANONYMOUS"),
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
    (0x100000, "MAP_FIXED_NOREPLACE"),
];
const MREMAP: &[(u64, &str)] = &[(1, "MREMAP_MAYMOVE"), (2, "MREMAP_FIXED"), (4, "MREMAP_DONTUNMAP")];

fn flags(v: u64, table: &[(u64, &str)], none: &str) -> String {
    let mut names = Vec::new();
    let mut left = v;
    for &(bit, name) in table {
        if bit != 0x03 && v & bit == bit && left & bit != 0 {
            names.push(name.to_string());
            left &= !bit;
        }
    }
    if table == MAP {
        // The sharing type is a 2-bit field, not independent bits.
        names.retain(|n| n != "MAP_SHARED" && n != "MAP_PRIVATE");
        let kind = match v & 0x03 {
            1 => "MAP_SHARED",
            2 => "MAP_PRIVATE",
            3 => "MAP_SHARED_VALIDATE",
            _ => "",
        };
        if !kind.is_empty() {
            names.insert(0, kind.to_string());
        }
        left &= !0x03;
    }
    if left != 0 {
        names.push(format!("{left:#x}"));
    }
    if names.is_empty() { none.to_string() } else { names.join("|") }
}

/// `addr=0x0, len=4096, prot=PROT_READ|PROT_WRITE, ...` for known syscalls, hex arguments otherwise.
pub fn args(nr: u64, a: &[u64; 6]) -> String {
    match nr {
        9 => format!(
            "addr={:#x}, len={}, prot={}, flags={}, fd={}, off={:#x}",
            a[0],
            a[1],
            flags(a[2], PROT, "PROT_NONE"),
            flags(a[3], MAP, "0"),
            a[4] as i32,
            a[5]
        ),
        11 => format!("addr={:#x}, len={}", a[0], a[1]),
        25 => format!(
            "old_addr={:#x}, old_len={}, new_len={}, flags={}, new_addr={:#x}",
            a[0],
            a[1],
            a[2],
            flags(a[3], MREMAP, "0"),
            a[4]
        ),
        10 => format!("addr={:#x}, len={}, prot={}", a[0], a[1], flags(a[2], PROT, "PROT_NONE")),
        12 => format!("addr={:#x}", a[0]),
        28 => format!("addr={:#x}, len={}, advice={}", a[0], a[1], a[2]),
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
