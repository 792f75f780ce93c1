//! The processes of a machine as `/proc/PID/stat` lists them, and the choice of processes a command works on:
//! the pids named (`--pid 1,2 --pid 3`) and, with `--tree`, every descendant of them. Pure: the caller reads
//! /proc and checks each pid; this decides which are in, which are left out and why.

use crate::model::Tid;
use std::collections::{BTreeMap, BTreeSet};

/// `PF_KTHREAD` in the `flags` field of /proc/PID/stat.
const PF_KTHREAD: u64 = 0x0020_0000;
/// `PF_FORKNOEXEC`: forked and not exec'd since.
const PF_FORKNOEXEC: u64 = 0x0000_0040;

/// One process as its `stat` line tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proc {
    pub pid: Tid,
    /// The thread-group id of the parent (the kernel writes `real_parent`'s tgid).
    pub ppid: Tid,
    /// `R`, `S`, `D`, `Z`, `T`, `t`, `X`, ...
    pub state: char,
    pub kernel: bool,
    /// Forked and not exec'd since: a child of a fork server (a pre-forked worker), or one about to exec.
    pub forked: bool,
    pub name: String,
}

/// Parses `/proc/PID/stat`: `pid (comm) state ppid pgrp session tty tpgid flags ...`. The name may hold spaces
/// and parentheses, so it runs to the *last* `)`. `None` for anything that does not have that shape.
pub fn parse_stat(text: &str) -> Option<Proc> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    if close < open {
        return None;
    }
    let pid = text[..open].trim().parse().ok()?;
    let name = text[open + 1..close].to_string();
    let mut rest = text[close + 1..].split_ascii_whitespace();
    let state = rest.next()?.chars().next()?;
    let ppid = rest.next()?.parse().ok()?;
    let flags: u64 = rest.nth(4)?.parse().ok()?;
    Some(Proc { pid, ppid, state, kernel: flags & PF_KTHREAD != 0, forked: flags & PF_FORKNOEXEC != 0, name })
}

/// Every descendant of `roots` in `table` (children, their children, ...), roots excluded, in pid order. A cycle
/// in a table read at two moments (a pid reused meanwhile) cannot loop: each pid is taken once.
pub fn descendants(table: &[Proc], roots: &[Tid]) -> Vec<Tid> {
    let mut children: BTreeMap<Tid, Vec<Tid>> = BTreeMap::new();
    for p in table {
        if p.pid != p.ppid {
            children.entry(p.ppid).or_default().push(p.pid);
        }
    }
    let mut seen: BTreeSet<Tid> = roots.iter().copied().collect();
    let mut todo: Vec<Tid> = roots.to_vec();
    let mut out = BTreeSet::new();
    while let Some(pid) = todo.pop() {
        for &kid in children.get(&pid).into_iter().flatten() {
            if seen.insert(kid) {
                out.insert(kid);
                todo.push(kid);
            }
        }
    }
    out.into_iter().collect()
}

/// Why a process of the tree is left out, or `None` to take it: a zombie has no memory left, a kernel thread
/// none at all. (The caller also leaves out syscatch's own processes.)
pub fn skip_reason(p: &Proc) -> Option<&'static str> {
    if p.kernel {
        Some("a kernel thread (no user memory)")
    } else if p.state == 'Z' || p.state == 'X' {
        Some("a zombie (it has exited)")
    } else {
        None
    }
}

/// The pids named, in the order given, each once.
pub fn dedup(pids: &[Tid]) -> Vec<Tid> {
    let mut seen = BTreeSet::new();
    pids.iter().copied().filter(|p| seen.insert(*p)).collect()
}

/// What a process is, short: its name and its command line with the program's directory left out, cut to `max`
/// characters (`python3 -m vllm.entrypoints...`). A program that renamed itself (setproctitle writes one string
/// with spaces) reads the same way. A kernel thread or an exited process has no command line: its name alone. The
/// boilerplate that Python's multiprocessing starts its processes with is said in a word: `python3 -B
/// [multiprocessing spawn]` for `python3 -B -c 'from multiprocessing.spawn import spawn_main; ...'
/// --multiprocessing-fork`, and so for its resource tracker and fork server.
pub fn short_command(name: &str, cmdline: &[u8], max: usize) -> String {
    let mut args: Vec<String> =
        cmdline.split(|&b| b == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
    if let Some(i) = args.iter().position(|a| a == "-c")
        && let Some(module) = args.get(i + 1).and_then(|code| multiprocessing_module(code))
    {
        let word = format!("[multiprocessing {}]", module.replace('_', " "));
        args.splice(i..i + 2, [word]);
        args.retain(|a| a != "--multiprocessing-fork");
    }
    let Some(first) = args.first() else { return name.to_string() };
    let prog = first.rsplit('/').next().unwrap_or(first);
    let mut line = std::iter::once(prog).chain(args[1..].iter().map(String::as_str)).collect::<Vec<_>>().join(" ");
    line = line.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    if !prog.starts_with(name) && !name.starts_with(prog) {
        line = format!("{name}: {line}");
    }
    if line.chars().count() > max {
        line = line.chars().take(max.saturating_sub(3)).collect::<String>() + "...";
    }
    line
}

/// `spawn` of `from multiprocessing.spawn import spawn_main; ...`: the module of multiprocessing that a `-c` runs.
fn multiprocessing_module(code: &str) -> Option<&str> {
    let module = code.strip_prefix("from multiprocessing.")?.split_once(" import")?.0;
    module.chars().all(|c| c.is_ascii_alphanumeric() || c == '_').then_some(module)
}

/// User and system CPU time of a `/proc/PID/stat` line, in clock ticks (USER_HZ, 100 a second on Linux).
pub fn parse_cpu_ticks(stat: &str) -> Option<(u64, u64)> {
    let mut rest = stat[stat.rfind(')')? + 1..].split_ascii_whitespace();
    let utime = rest.nth(11)?.parse().ok()?;
    let stime = rest.next()?.parse().ok()?;
    Some((utime, stime))
}

/// A `KEY:  N kB` line of /proc/PID/status (`VmHWM`, `VmRSS`), in KiB.
pub fn parse_status_kb(status: &str, key: &str) -> Option<u64> {
    let line = status.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))?;
    line.split_ascii_whitespace().next()?.parse().ok()
}

/// The `NSpid:` line of /proc/PID/status: the pid in each pid namespace, outermost first (one entry outside any
/// container). Empty when missing or malformed.
pub fn parse_nspid(status: &str) -> Vec<Tid> {
    let Some(line) = status.lines().find_map(|l| l.strip_prefix("NSpid:")) else { return Vec::new() };
    line.split_ascii_whitespace().map(|p| p.parse().ok()).collect::<Option<Vec<Tid>>>().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(pid: Tid, ppid: Tid, state: char) -> Proc {
        Proc { pid, ppid, state, kernel: false, forked: false, name: format!("p{pid}") }
    }

    #[test]
    fn stat_lines() {
        let s = "4321 (my (odd) name) S 100 4321 4321 0 -1 4194560 120 0 0 0 1 2 0 0 20 0 3 0 555";
        let got = parse_stat(s).unwrap();
        assert_eq!((got.pid, got.ppid, got.state, got.kernel, got.forked), (4321, 100, 'S', false, false));
        let forked = parse_stat("77 (w) S 76 76 76 0 -1 4194368 0 0").unwrap();
        assert!(forked.forked && !forked.kernel);
        assert_eq!(got.name, "my (odd) name");
        let k = parse_stat("2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 0").unwrap();
        assert!(k.kernel);
        for bad in ["", "12 (x", "x (y) S 1 2 3 4 5 6", "12 (y) S", "12 (y) S 1 2 3 4 5 flags", ") 12 ("] {
            assert_eq!(parse_stat(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn descendants_of_roots() {
        let t = [p(1, 0, 'S'), p(10, 1, 'S'), p(11, 10, 'S'), p(12, 11, 'S'), p(13, 10, 'Z'), p(20, 1, 'S')];
        assert_eq!(descendants(&t, &[10]), [11, 12, 13]);
        assert_eq!(descendants(&t, &[11, 20]), [12]);
        assert_eq!(descendants(&t, &[12]), Vec::<Tid>::new());
        // A root below another root is not listed again; a pid that is its own parent does not loop.
        assert_eq!(descendants(&t, &[10, 11]), [12, 13]);
        let cycle = [p(5, 6, 'S'), p(6, 5, 'S'), p(7, 7, 'S')];
        assert_eq!(descendants(&cycle, &[5]), [6]);
        assert_eq!(descendants(&cycle, &[7]), Vec::<Tid>::new());
    }

    #[test]
    fn skipped_and_deduplicated() {
        assert_eq!(skip_reason(&p(3, 1, 'Z')), Some("a zombie (it has exited)"));
        assert_eq!(skip_reason(&Proc { kernel: true, ..p(3, 2, 'S') }), Some("a kernel thread (no user memory)"));
        assert_eq!(skip_reason(&p(3, 1, 't')), None);
        assert_eq!(dedup(&[5, 3, 5, 9, 3]), [5, 3, 9]);
    }

    #[test]
    fn short_commands() {
        let c = b"/usr/bin/python3\0-m\0vllm.entrypoints.openai.api_server\0--tp\x008\0";
        assert_eq!(short_command("python3", c, 80), "python3 -m vllm.entrypoints.openai.api_server --tp 8");
        assert_eq!(short_command("python3", c, 20), "python3 -m vllm.e...");
        assert_eq!(short_command("VllmWorker TP3", b"VLLM::Worker_TP3\0", 40), "VllmWorker TP3: VLLM::Worker_TP3");
        assert_eq!(short_command("ucx_like", b"./ucx_like\0", 40), "ucx_like");
        assert_eq!(short_command("kworker/0:1", b"", 40), "kworker/0:1");
        assert_eq!(short_command("x", b"x\0a\nb\0", 40), "x a b");
        let spawn =
            b"/usr/bin/python3\0-B\0-c\0from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5, \
                      pipe_handle=7)\0--multiprocessing-fork\0";
        assert_eq!(short_command("python3", spawn, 40), "python3 -B [multiprocessing spawn]");
        let tracker = b"python3\0-c\0from multiprocessing.resource_tracker import main;main(4)\0";
        assert_eq!(short_command("python3", tracker, 60), "python3 [multiprocessing resource tracker]");
        // Other code run with -c is left as it is.
        assert_eq!(short_command("python3", b"python3\0-c\0import os\0", 40), "python3 -c import os");
    }

    #[test]
    fn usage() {
        let stat = "9 (a b) S 1 9 9 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 4 0 5 100 10";
        assert_eq!(parse_cpu_ticks(stat), Some((250, 75)));
        assert_eq!(parse_cpu_ticks("9 (x) S 1 2"), None);
        assert_eq!(parse_status_kb("VmRSS:\t  10 kB\nVmHWM:\t  2048 kB\n", "VmHWM"), Some(2048));
        assert_eq!(parse_status_kb("VmHWM:\tx kB\n", "VmHWM"), None);
        assert_eq!(parse_status_kb("VmHWMx:\t1 kB\n", "VmHWM"), None);
    }

    #[test]
    fn nspid() {
        assert_eq!(parse_nspid("Name:\tx\nNSpid:\t4242\t7\n"), [4242, 7]);
        assert_eq!(parse_nspid("NSpid:\t4242\n"), [4242]);
        assert_eq!(parse_nspid("NSpid:\t42 x\n"), Vec::<Tid>::new());
        assert_eq!(parse_nspid("Name:\tx\n"), Vec::<Tid>::new());
    }
}
