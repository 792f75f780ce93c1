//! Which processes a command works on: the pids named and, with `--tree`, their descendants, read from /proc
//! without stopping anyone. Each named pid is checked as a single `--pid` always was (a thread's id names its
//! process, a zombie or kernel thread is refused); one that fails is said in a line and the others go on.

use super::Error;
use super::process::{Ids, check_process};
use crate::model::proctree::{self, Proc};
use crate::os::{Tid, procfs};

/// How many processes a selection may hold unless `--max-processes` says otherwise.
pub const MAX_PROCESSES: usize = 64;

/// The longest short command line shown for a process.
const COMMAND_CHARS: usize = 48;

/// One process chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chosen {
    pub pid: Tid,
    /// Its name (`comm`).
    pub name: String,
    /// What it is, short: name and command line (see [`proctree::short_command`]).
    pub command: String,
    /// Its pid in each pid namespace, outermost first; more than one inside a container.
    pub nspid: Vec<Tid>,
}

impl Chosen {
    /// `1234`, or `1234 (7 in its namespace)` for a process in a container.
    pub fn pids(&self) -> String {
        match self.nspid.last() {
            Some(inner) if self.nspid.len() > 1 => format!("{} ({inner} in its namespace)", self.pid),
            _ => self.pid.to_string(),
        }
    }
}

/// The processes chosen, and what was left out.
#[derive(Debug, Default)]
pub struct Selection {
    pub processes: Vec<Chosen>,
    /// One line for each pid named that could not be taken, and each process of a tree that was skipped.
    pub notes: Vec<String>,
    /// How many of the pids named were not taken (no such process, exited, a zombie...).
    pub missing: usize,
}

impl Selection {
    /// The exit status of a command that did its work on the processes it has: [`PARTIAL`] when some named
    /// were missing.
    pub fn status(&self) -> i32 {
        if self.missing > 0 { PARTIAL } else { 0 }
    }
}

/// Exit status: some of the processes named were not there (each said in one line); the others were done.
pub const PARTIAL: i32 = 4;

#[derive(Debug, thiserror::Error)]
pub enum SelectError {
    #[error("no process to look at: give --pid N (a list: --pid 10,11 or --pid 10 --pid 11)")]
    Empty,
    /// The only pid named cannot be taken: the same line as ever.
    #[error(transparent)]
    One(Error),
    #[error("none of the processes named can be looked at: {}", .0.join("; "))]
    None(Vec<String>),
    #[error(
        "{count} processes selected, above the limit of {max}: name fewer, or raise --max-processes (each traced \
         process has a tracer thread of its own)"
    )]
    TooMany { count: usize, max: usize },
}

/// Chooses the processes of `pids` (each once) and, with `tree`, every descendant of them alive now.
pub fn select(pids: &[Tid], tree: bool, max: usize) -> Result<Selection, SelectError> {
    let named = proctree::dedup(pids);
    let mut sel = Selection::default();
    let mut chosen: Vec<Tid> = Vec::new();
    let mut first_error = None;
    for &pid in &named {
        match check_process(pid, Ids::Process) {
            Ok(_) => chosen.push(pid),
            Err(e) => {
                sel.notes.push(e.to_string());
                sel.missing += 1;
                first_error.get_or_insert(e);
            }
        }
    }
    if chosen.is_empty() {
        return Err(match (named.len(), first_error) {
            (0, _) => SelectError::Empty,
            (1, Some(e)) => SelectError::One(e),
            _ => SelectError::None(sel.notes),
        });
    }
    if tree {
        let table = read_table();
        for pid in proctree::descendants(&table, &chosen) {
            let Some(p) = table.iter().find(|p| p.pid == pid) else { continue };
            match proctree::skip_reason(p) {
                Some(why) => sel.notes.push(format!("process {pid} ({}) in the tree is skipped: {why}", p.name)),
                None if ours(pid) => {}
                None => chosen.push(pid),
            }
        }
    }
    if chosen.len() > max {
        return Err(SelectError::TooMany { count: chosen.len(), max });
    }
    sel.processes = chosen.into_iter().map(describe).collect();
    Ok(sel)
}

/// Whether `pid` is syscatch's own (itself, a guardian it started, another syscatch): never one to trace, and
/// left out of a tree silently.
pub fn ours(pid: Tid) -> bool {
    pid == std::process::id() as Tid || procfs::runs_our_binary(pid)
}

/// Every process of the machine (of our pid namespace) now; one that exits while read is left out.
pub fn read_table() -> Vec<Proc> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<Tid>().ok())
        .filter_map(|pid| proctree::parse_stat(&procfs::read_stat(pid).ok()?))
        .collect()
}

/// A process's name, short command line and namespace pids, read now (an exited one keeps its pid alone).
pub fn describe(pid: Tid) -> Chosen {
    let status = procfs::read_status(pid).unwrap_or_default();
    let name = crate::model::status::parse_status(&status).name;
    let cmdline = procfs::read_cmdline(pid).unwrap_or_default();
    Chosen {
        pid,
        command: proctree::short_command(&name, &cmdline, COMMAND_CHARS),
        name,
        nspid: proctree::parse_nspid(&status),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ourselves_and_bad_pids() {
        let me = std::process::id() as Tid;
        let sel = select(&[me, me], false, 8).unwrap();
        assert_eq!(sel.processes.len(), 1, "a pid named twice is taken once");
        assert_eq!((sel.processes[0].pid, sel.missing, sel.status()), (me, 0, 0));
        assert!(!sel.processes[0].command.is_empty());
        // A pid that cannot exist (above pid_max) beside a real one: said, counted, the other kept.
        let sel = select(&[me, i32::MAX], false, 8).unwrap();
        assert_eq!((sel.processes.len(), sel.missing, sel.status()), (1, 1, PARTIAL));
        assert_eq!(sel.notes, [format!("no process with pid {}", i32::MAX)]);
        // Alone, its line is the one a single --pid always gave.
        let e = select(&[i32::MAX], false, 8).unwrap_err();
        assert_eq!(e.to_string(), format!("no process with pid {}", i32::MAX));
        assert!(matches!(select(&[], false, 8), Err(SelectError::Empty)));
        let e = select(&[i32::MAX, i32::MAX - 1], false, 8).unwrap_err().to_string();
        assert!(e.starts_with("none of the processes named can be looked at: no process with pid"), "{e}");
    }

    #[test]
    fn our_own_processes_are_ours() {
        assert!(ours(std::process::id() as Tid));
        // pid 1 runs another program than this test binary.
        assert!(!ours(1));
    }

    #[test]
    fn a_tree_above_the_limit_is_refused() {
        // pid 1's tree is every process of the namespace but the kernel's: more than one here.
        let e = select(&[1], true, 1).unwrap_err().to_string();
        assert!(e.contains("above the limit of 1") && e.contains("--max-processes"), "{e}");
    }
}
