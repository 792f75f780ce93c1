//! Replays the fuzz corpus (fuzz/corpus/TARGET) and every crash found so far (fuzz/regressions/TARGET) through
//! the fuzz targets' own bodies, as a regular test that needs no fuzzer; and feeds the module target real ELF
//! files from this machine, whole, truncated and with corrupted headers (too big to commit as seeds).

#[path = "../../fuzz/src/targets.rs"]
mod targets;

use crate::common::*;

#[test]
fn fuzz_corpus_and_regressions_replay_without_panic() {
    let mut replayed = 0;
    for (name, body) in targets::TARGETS {
        let mut here = 0;
        for dir in ["corpus", "regressions"] {
            let Ok(entries) = std::fs::read_dir(repo().join("fuzz").join(dir).join(name)) else {
                continue;
            };
            for e in entries.flatten() {
                let data = std::fs::read(e.path()).unwrap();
                body(&data);
                here += 1;
            }
        }
        assert!(here > 0, "the {name} target has a committed corpus");
        replayed += here;
    }
    eprintln!("{replayed} inputs replayed");
}

/// Offsets of ELF64 header fields worth corrupting: e_phoff, e_shoff, e_phentsize, e_phnum, e_shentsize, e_shnum,
/// e_shstrndx.
const HEADER_FIELDS: &[(usize, usize)] = &[(32, 8), (40, 8), (54, 2), (56, 2), (58, 2), (60, 2), (62, 2)];

#[test]
fn real_elf_files_whole_truncated_and_corrupted_never_panic() {
    let files = ["/lib/x86_64-linux-gnu/libc.so.6".into(), "/lib64/ld-linux-x86-64.so.2".into(), testprog("target")];
    for path in files {
        let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for offset in [0, 0x1000, 0x26000, !0xfff] {
            targets::module_mapped(&data, 0x7f00_0000_0000, offset);
        }
        let n = data.len();
        for cut in [0, 4, 16, 63, 64, 65, 200, 1000, 4096, n / 3, n / 2, n - 1] {
            targets::module_mapped(&data[..cut.min(n)], 0x7f00_0000_0000, 0);
        }
        for &(at, len) in HEADER_FIELDS {
            for fill in [0x00u8, 0x7f, 0xff] {
                let mut bad = data.clone();
                bad[at..at + len].fill(fill);
                targets::module_mapped(&bad, 0x7f00_0000_0000, 0);
            }
        }
        // Program headers with huge offsets and sizes (p_offset, p_vaddr, p_filesz, p_memsz of each).
        let phoff = u64::from_le_bytes(data[32..40].try_into().unwrap()) as usize;
        let phnum = u16::from_le_bytes(data[56..58].try_into().unwrap()) as usize;
        for i in 0..phnum {
            for field in [8, 16, 32, 40] {
                let at = phoff + i * 56 + field;
                let mut bad = data.clone();
                bad[at..at + 8].fill(0xff);
                for offset in [0, 0x1000, 0x26000] {
                    targets::module_mapped(&bad, 0x7f00_0000_0000, offset);
                }
            }
        }
    }
}
