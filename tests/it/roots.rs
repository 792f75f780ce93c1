//! Targets in the root file systems of other Debian releases (scripts/roots.sh builds them under target/roots;
//! scripts/test.sh runs it), started with chroot and traced from the host, as from a debug container: their libc,
//! interpreter and debug files are the root's, not the host's. The pid is the host's (no pid namespace here;
//! container.rs has one).

use crate::common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Debian sid's root: glibc 2.43 (with libc6-dbg), CPython 3.14 and 3.15. Missing is a failure.
pub fn sid() -> PathBuf {
    root("sid")
}

/// Debian 13 "trixie"'s root: glibc 2.41 (with libc6-dbg), CPython 3.13 (Debian's). Missing is a failure.
pub fn trixie() -> PathBuf {
    root("trixie")
}

fn root(name: &str) -> PathBuf {
    let root = repo().join("target/roots").join(name);
    assert!(
        root.join(".syscatch-packages").exists(),
        "{} is missing: scripts/roots.sh {name} builds it (scripts/test.sh does)",
        root.display()
    );
    root
}

/// Copies `file` into `root`'s /syscatch-tests (atomically: tests run in parallel) and returns its path there.
pub fn copy_in(root: &Path, file: &Path) -> String {
    let dir = root.join("syscatch-tests");
    std::fs::create_dir_all(&dir).unwrap();
    let name = file.file_name().unwrap().to_str().unwrap();
    let tmp = dir.join(format!(".{name}.{}.{:?}", std::process::id(), std::thread::current().id()));
    std::fs::copy(file, &tmp).unwrap();
    std::fs::rename(&tmp, dir.join(name)).unwrap();
    format!("/syscatch-tests/{name}")
}

/// A testprog built on the host (its glibc symbols are older than the root's: it runs there), started in `root`.
pub fn start_in(root: &Path, prog: &Path, args: &[&str]) -> Target {
    let inside = copy_in(root, prog);
    Target::start_cmd(Command::new("chroot").arg(root).arg(inside).args(args))
}
