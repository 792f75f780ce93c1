//! What `--leaks` watches: libc's own mapping functions (besides `syscall()`), the syscall each makes, and
//! the record of what a trace watched and skipped, for the report.

use crate::model::syscalls;

/// libc's memory functions watched in `--leaks`, with the syscall each one makes. `mprotect` is how glibc grows
/// a thread heap (by committing the next part of its reservation, through the hidden `__mprotect`); `madvise`
/// (MADV_DONTNEED) how it gives an arena's pages back, and jemalloc its purged ones. `sbrk` is how malloc grows and
/// trims `[heap]` (through the hidden `__sbrk` at the same address, which calls `__brk` directly: no PLT and no
/// `syscall()` on the way); unlike the syscall it takes an increment and returns the old break ([`is_sbrk`]).
pub const FUNCTIONS: [(&str, &str); 7] = [
    ("mmap", "mmap"),
    ("mmap64", "mmap"),
    ("munmap", "munmap"),
    ("mremap", "mremap"),
    ("sbrk", "brk"),
    ("mprotect", "mprotect"),
    ("madvise", "madvise"),
];

/// The label of a sampled page fault's event (`--faults`): its address is the first argument.
pub const PAGE_FAULT: &str = "page fault";

/// Whether an event's location label is libc's `sbrk` (`libc.so.6:sbrk`).
pub fn is_sbrk(label: &str) -> bool {
    label.rsplit_once(':').is_some_and(|(module, func)| func == "sbrk" && crate::model::modules::is_libc(module))
}

/// The paths a trace watched, and those it could not, with why; for the report.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Watched {
    pub paths: Vec<String>,
    pub skipped: Vec<String>,
}

/// The syscall a watched libc function makes, from an event's location label (`libc.so.6:munmap`).
pub fn parse_label_syscall(label: &str) -> Option<u64> {
    let (module, func) = label.rsplit_once(':')?;
    if !crate::model::modules::is_libc(module) {
        return None;
    }
    let (_, nr) = FUNCTIONS.iter().find(|(f, _)| *f == func)?;
    syscalls::parse(nr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_name_their_syscall() {
        assert_eq!(parse_label_syscall("libc.so.6:mmap64"), Some(9));
        assert_eq!(parse_label_syscall("libc.so.6:munmap"), Some(11));
        assert_eq!(parse_label_syscall("libc.so.6:mremap"), Some(25));
        assert_eq!(parse_label_syscall("libc.so.6:sbrk"), Some(12));
        assert!(is_sbrk("libc.so.6:sbrk") && !is_sbrk("libhook.so:sbrk") && !is_sbrk("libc.so.6:brk"));
        assert_eq!(parse_label_syscall("libhook.so:munmap"), None);
        assert_eq!(parse_label_syscall("libc.so.6:malloc"), None);
        assert_eq!(parse_label_syscall("munmap"), None);
    }
}
