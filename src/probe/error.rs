//! Why a checked script does not fit a live process: the process cannot be read, a location matches nothing
//! (or too much), or a probe's original bytes cannot be taken from its file. Errors in the script's text are
//! [`super::ParseError`] and [`super::check::CheckError`], each with its position.

use super::ast::Span;
use crate::os::Tid;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("no process with pid {0}")]
    NoProcess(Tid),
    /// The process's maps or a module file could not be read.
    #[error(transparent)]
    Live(#[from] crate::live::Error),
    /// Where a location is wrong: at the probe's position in the script.
    #[error("probe `{probe}`: {problem}")]
    Location { probe: String, span: Span, problem: LocationError },
    #[error("probe `{probe}`: no libc syscall() wrapper in the process")]
    NoWrapper { probe: String },
    #[error("probe `{probe}`: {addr:#x} is not in a file-backed module; its original bytes cannot be checked")]
    NotFileBacked { probe: String, addr: u64 },
    #[error("probe `{probe}`: {addr:#x} is outside {path}'s file")]
    OutsideFile { probe: String, addr: u64, path: String },
}

/// A location that matches nothing, or more than one thing, in the process. `searched` lists the file names
/// looked at ("no file-backed modules" when there were none).
#[derive(Debug, thiserror::Error)]
pub enum LocationError {
    #[error("no libc mapped (a static binary?), so no syscall() wrapper; searched: {searched}")]
    NoLibc { searched: String },
    #[error("address {addr:#x} is not in executable memory of process {pid}")]
    NotExecutable { addr: u64, pid: Tid },
    #[error("module name `{name}` is ambiguous: it matches {}", .paths.join(", "))]
    AmbiguousModule { name: String, paths: Vec<String> },
    #[error("no module named `{name}`; searched: {searched}")]
    NoModule { name: String, searched: String },
    #[error("symbol `{symbol}` is defined in several modules: {}; name one as MODULE:{symbol}", .files.join(", "))]
    SeveralModules { symbol: String, files: Vec<String> },
    /// Not found; `unreadable` are the candidate modules whose file could not be read.
    #[error("no symbol `{symbol}`; searched: {searched}{}", could_not_read(.unreadable))]
    NoSymbol { symbol: String, searched: String, unreadable: Vec<crate::live::Error> },
    #[error("offset {offset:#x} is past the end of `{symbol}` ({size} bytes)")]
    PastEnd { symbol: String, offset: u64, size: u64 },
    #[error("`{symbol}`+{offset:#x} overflows the address space")]
    Overflow { symbol: String, offset: u64 },
    #[error("`{symbol}` at {addr:#x} is not in executable memory (a data symbol?)")]
    DataSymbol { symbol: String, addr: u64 },
}

fn could_not_read(errors: &[crate::live::Error]) -> String {
    if errors.is_empty() {
        return String::new();
    }
    let all: Vec<String> = errors.iter().map(ToString::to_string).collect();
    format!(" (could not read: {})", all.join("; "))
}
