//! What `--leaks` watches: libc's own mapping functions (besides `syscall()`), the syscall each makes, and
//! the record of what a trace watched and skipped, for the report.

use crate::model::syscalls;

/// libc's memory-mapping functions watched in `--leaks`, with the syscall each one makes.
pub const FUNCTIONS: [(&str, &str); 4] =
    [("mmap", "mmap"), ("mmap64", "mmap"), ("munmap", "munmap"), ("mremap", "mremap")];

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
        assert_eq!(parse_label_syscall("libhook.so:munmap"), None);
        assert_eq!(parse_label_syscall("libc.so.6:malloc"), None);
        assert_eq!(parse_label_syscall("munmap"), None);
    }
}
