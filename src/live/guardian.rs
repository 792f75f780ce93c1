//! The guardian: what puts the target's code back when syscatch dies without detaching (SIGKILL, the OOM
//! killer, an abort). A tracer cannot clean up after its own SIGKILL, so a second process, started before
//! anything is planted and not a tracer, is told over a pipe of every byte planted in the target and every one
//! taken back. When the pipe reaches end of file without a "done" (the kernel closes a dead process's files),
//! it writes the original bytes back through `/proc/PID/mem`, only where memory still holds what we planted,
//! and turns `--fast`'s trampoline int3s into nops (the patched jump itself stays: rewriting a multi-byte
//! instruction under running threads could tear it). It is the syscatch binary itself (`syscatch __guardian`),
//! in its own session with the stop signals ignored, so what kills syscatch, or a Ctrl-C to its process group,
//! does not kill it; it exits when told that syscatch detached, or when the target exits.
//!
//! A message is written before the byte is planted and after it is taken back, so at every moment the list
//! covers memory; a message about a byte that never got planted is harmless, because the guardian checks.

use crate::model::maps::{Mapping, parse_maps};
use crate::model::modules::hex;
use crate::os::Tid;
use crate::os::guard::{self, Wake};
use crate::os::mem::ProcMem;
use crate::os::procfs;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};

/// The hidden first argument that makes the syscatch binary a guardian.
pub const SUBCOMMAND: &str = "__guardian";

/// One message from syscatch to its guardian.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Msg {
    /// `planted` is about to be written at `addr`, over `orig`.
    Plant { addr: u64, orig: Vec<u8>, planted: Vec<u8> },
    /// The original bytes at `addr` are back.
    Retire(u64),
    /// An int3 in `--fast`'s trampoline page: made a nop on our death.
    Nop(u64),
    /// The target exec'd: its old address space, and everything planted there, is gone.
    Exec,
    /// syscatch detached cleanly: nothing to do.
    Done,
}

/// Planted bytes: one to 32 of them.
fn parse_hex(s: &str) -> Option<Vec<u8>> {
    crate::model::modules::unhex(s).filter(|b| (1..=32).contains(&b.len()))
}

fn parse_addr(s: &str) -> Option<u64> {
    u64::from_str_radix(s, 16).ok()
}

/// The line a message travels as.
pub fn format_msg(m: &Msg) -> String {
    match m {
        Msg::Plant { addr, orig, planted } => format!("P {addr:x} {} {}\n", hex(orig), hex(planted)),
        Msg::Retire(addr) => format!("R {addr:x}\n"),
        Msg::Nop(addr) => format!("N {addr:x}\n"),
        Msg::Exec => "X\n".into(),
        Msg::Done => "D\n".into(),
    }
}

pub fn parse_msg(line: &str) -> Option<Msg> {
    let mut f = line.split_ascii_whitespace();
    let m = match f.next()? {
        "P" => {
            let addr = parse_addr(f.next()?)?;
            let orig = parse_hex(f.next()?)?;
            let planted = parse_hex(f.next()?)?;
            if orig.len() != planted.len() {
                return None;
            }
            Msg::Plant { addr, orig, planted }
        }
        "R" => Msg::Retire(parse_addr(f.next()?)?),
        "N" => Msg::Nop(parse_addr(f.next()?)?),
        "X" => Msg::Exec,
        "D" => Msg::Done,
        _ => return None,
    };
    f.next().is_none().then_some(m)
}

/// What the guardian knows is in the target now.
#[derive(Debug, Default)]
pub struct Ledger {
    plants: BTreeMap<u64, (Vec<u8>, Vec<u8>)>,
    nops: BTreeSet<u64>,
    pub done: bool,
}

/// What a restore did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Restored {
    pub put_back: usize,
    /// Trampoline int3s made nops.
    pub nopped: usize,
    /// Sites whose bytes were neither ours nor the original (someone else wrote there): left alone.
    pub changed: usize,
    pub failed: usize,
}

impl Ledger {
    pub fn apply(&mut self, m: Msg) {
        match m {
            Msg::Plant { addr, orig, planted } => {
                self.plants.insert(addr, (orig, planted));
            }
            Msg::Retire(addr) => {
                self.plants.remove(&addr);
            }
            Msg::Nop(addr) => {
                self.nops.insert(addr);
            }
            Msg::Exec => {
                self.plants.clear();
                self.nops.clear();
            }
            Msg::Done => self.done = true,
        }
    }

    /// Puts back the original bytes in a forked copy of the target's memory (`child_maps` are the copy's maps,
    /// `maps` the target's): only where the copy maps the same file at the same place, so a child that has exec'd
    /// another program is never written, and only where it holds what we planted. The trampoline's int3s are
    /// left: the copy's trap pad steps over them, and its anonymous page cannot be told from another program's.
    pub fn restore_copy(
        &self,
        maps: &[Mapping],
        child_maps: &[Mapping],
        read: &mut dyn FnMut(u64, &mut [u8]) -> bool,
        write: &mut dyn FnMut(u64, &[u8]) -> bool,
    ) -> Restored {
        let same_file = |addr: u64| {
            let (Some(a), Some(b)) =
                (maps.iter().find(|m| m.contains(addr)), child_maps.iter().find(|m| m.contains(addr)))
            else {
                return false;
            };
            a.is_file()
                && a.inode != 0
                && (&a.path, &a.dev, a.inode, a.start, a.end, a.offset)
                    == (&b.path, &b.dev, b.inode, b.start, b.end, b.offset)
        };
        let copy = Ledger {
            plants: self.plants.iter().filter(|(a, _)| same_file(**a)).map(|(&a, p)| (a, p.clone())).collect(),
            nops: BTreeSet::new(),
            done: false,
        };
        copy.restore(read, write)
    }

    pub fn is_empty(&self) -> bool {
        self.plants.is_empty() && self.nops.is_empty()
    }

    /// Puts back every original byte where memory holds what we planted, and makes the trampoline's int3s nops.
    pub fn restore(
        &self,
        read: &mut dyn FnMut(u64, &mut [u8]) -> bool,
        write: &mut dyn FnMut(u64, &[u8]) -> bool,
    ) -> Restored {
        let mut r = Restored::default();
        let plants = self.plants.iter().map(|(&a, (o, p))| (a, o.clone(), p.clone(), false));
        let nops = self.nops.iter().map(|&a| (a, vec![0x90], vec![crate::x86::breakpoints::INT3], true));
        for (addr, orig, planted, nop) in plants.chain(nops) {
            let mut now = vec![0u8; planted.len()];
            if !read(addr, &mut now) {
                // Unmapped since (a library unloaded): nothing of ours is left there.
                continue;
            }
            if now == orig {
                continue;
            }
            if now != planted {
                r.changed += 1;
                continue;
            }
            if !write(addr, &orig) {
                r.failed += 1;
            } else if nop {
                r.nopped += 1;
            } else {
                r.put_back += 1;
            }
        }
        r
    }
}

/// Why there is no guardian (said as a warning: syscatch's own death would then harm the target).
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot start the guardian: {0}")]
    Spawn(std::io::Error),
    /// It exited before saying anything.
    #[error("the guardian did not start")]
    Silent,
    /// Its own one line: it cannot hold or write the target's memory.
    #[error("{0}")]
    Refused(String),
}

/// syscatch's end of the pipe.
pub struct Guard {
    input: std::fs::File,
    lost: bool,
    pid: Tid,
}

impl Guard {
    /// Starts the guardian for `pid` and waits for its word that it can write the target's code at `check`
    /// (`proc_mem.force_override` can forbid writes to read-only mappings by any process but the tracer).
    pub fn start(pid: Tid, mem: &ProcMem, check: u64) -> Result<Guard, StartError> {
        let args = [SUBCOMMAND.to_string(), pid.to_string(), format!("{check:x}")];
        let started = guard::spawn(&args, mem).map_err(StartError::Spawn)?;
        let mut line = String::new();
        let _ = BufReader::new(started.output).read_line(&mut line);
        match line.trim_end() {
            "ok" => Ok(Guard { input: started.input, lost: false, pid }),
            "" => Err(StartError::Silent),
            why => Err(StartError::Refused(why.to_string())),
        }
    }

    pub fn send(&mut self, m: &Msg) {
        if self.lost {
            return;
        }
        // One write of a short line: atomic on a pipe, and in the pipe (so seen by the guardian) even if we are
        // killed right after.
        if let Err(e) = self.input.write_all(format_msg(m).as_bytes()) {
            self.lost = true;
            // The guardian leaves when the target exits (an exit during attach is the caller's to report); the
            // same test as its own (the whole process, not only its main thread).
            if guard::exited(self.pid) {
                return;
            }
            eprintln!("syscatch: warning: the guardian is gone ({e}); if syscatch is killed now, its breakpoints stay");
        }
    }
}

/// A fork child gets a copy of the target's memory with our bytes in it; syscatch takes them out and lets the
/// child go at its first stop, but a child forked just before syscatch died still has them, and its trap pad
/// would wait for a restore that never comes. Walks the target's descendants (twice: a fork under way during the
/// first walk shows in the second) and restores each copy. Returns (children written, bytes put back).
fn restore_children(pid: Tid, ledger: &Ledger) -> (usize, usize) {
    let Ok(maps) = procfs::read_maps(pid).map(|t| parse_maps(&t)) else { return (0, 0) };
    let mut seen = BTreeSet::new();
    let (mut copies, mut bytes) = (0, 0);
    for pass in 0..2 {
        if pass > 0 {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let mut todo = procfs::list_children(pid);
        while let Some(child) = todo.pop() {
            if seen.len() >= 4096 || !seen.insert(child) {
                continue;
            }
            todo.extend(procfs::list_children(child));
            let (Ok(child_maps), Ok(mem)) = (procfs::read_maps(child).map(|t| parse_maps(&t)), ProcMem::open(child))
            else {
                continue;
            };
            let r =
                ledger.restore_copy(&maps, &child_maps, &mut read_mem(&mem), &mut |a, b| mem.write_all(a, b).is_ok());
            if r.put_back > 0 {
                copies += 1;
                bytes += r.put_back;
            }
        }
    }
    (copies, bytes)
}

/// Reads `/proc/PID/mem` the guardian's way.
/// Waits (at most `bound`) until every thread of `pid` that was ready to run when syscatch died has run. The kernel
/// lets a thread whose breakpoint stop syscatch had taken but not handled run on just past the int3, onto the
/// guard int3 of the instruction's second byte, which sends it into the trap pad; once that byte is back it would
/// run the rest of the instruction instead. A thread sleeping or stopped by a signal is not waited for.
fn let_threads_run(pid: Tid, bound: std::time::Duration) {
    let before = crate::os::procfs::read_run_states(pid);
    let end = std::time::Instant::now() + bound;
    while std::time::Instant::now() < end {
        let now = crate::os::procfs::read_run_states(pid);
        // (Still in a tracing stop: syscatch's pipe closes before the kernel lets its tracees go.)
        let waiting = now.iter().any(|(tid, &(run, state))| {
            state == 't' || (state == 'R' && before.get(tid).is_some_and(|&(ran, _)| run == ran))
        });
        if !waiting {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

fn read_mem(mem: &ProcMem) -> impl FnMut(u64, &mut [u8]) -> bool + '_ {
    move |a, b| mem.read_exact(a, b).is_ok()
}

/// One line to syscatch on stdout. syscatch may be dead already (killed while starting us): a broken pipe is
/// then no reason to panic, and what follows sees its end anyway.
fn answer(line: &str) {
    let mut out = std::io::stdout();
    let _ = writeln!(out, "{line}").and_then(|_| out.flush());
}

/// The guardian process: `syscatch __guardian PID CHECK_ADDR MEM_FD`. Returns its exit status.
pub fn main(args: &[String]) -> i32 {
    let (Some(pid), Some(check), Some(fd)) = (
        args.first().and_then(|p| p.parse::<Tid>().ok()),
        args.get(1).and_then(|a| parse_addr(a)),
        args.get(2).and_then(|f| f.parse::<i32>().ok()),
    ) else {
        eprintln!("syscatch: {SUBCOMMAND} is internal (started by syscatch itself)");
        return 2;
    };
    if let Err(e) = guard::leave_parent() {
        answer(&format!("the guardian could not detach from syscatch ({e})"));
        return 1;
    }
    let mem = match guard::inherited_mem(pid, fd) {
        Ok(m) => m,
        Err(e) => {
            answer(&format!("the guardian has no handle on the target's memory ({e})"));
            return 1;
        }
    };
    if check != 0 {
        // Write back the byte that is there: a no-op for the target, the same permission check as a restore.
        let mut b = [0u8; 1];
        let checked = mem.read_exact(check, &mut b).and_then(|_| mem.write_all(check, &b));
        if let Err(e) = checked {
            answer(&format!(
                "the guardian cannot write process {pid}'s code ({e}; is the kernel's proc_mem.force_override set?)"
            ));
            return 1;
        }
    }
    answer("ok");
    // Started at syscatch's real-time priority, if it had one: not while it waits.
    crate::os::sched::normal();
    let mut waiter = guard::Waiter::new(pid);
    let mut ledger = Ledger::default();
    let mut pending = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match waiter.wait(&mut buf) {
            Ok(Wake::Input(0)) | Err(_) => break,
            Ok(Wake::Input(n)) => {
                pending.extend_from_slice(&buf[..n]);
                while let Some(nl) = pending.iter().position(|&b| b == b'\n') {
                    let line: Vec<u8> = pending.drain(..=nl).collect();
                    if let Some(m) = std::str::from_utf8(&line).ok().and_then(parse_msg) {
                        ledger.apply(m);
                    }
                }
                if ledger.done {
                    return 0;
                }
            }
            Ok(Wake::TargetGone) => return 0,
        }
    }
    if ledger.is_empty() {
        return 0;
    }
    if ledger.plants.values().any(|(orig, _)| orig.len() > 1) {
        let_threads_run(pid, std::time::Duration::from_millis(500));
    }
    // Quickly, even behind busy threads of the target: a thread waiting in the trap pad for its byte yields
    // meanwhile, and gives up after a bounded wait.
    let (r, (copies, in_copies)) = crate::os::sched::realtime(|| {
        let r = ledger.restore(&mut read_mem(&mem), &mut |a, b| mem.write_all(a, b).is_ok());
        (r, restore_children(pid, &ledger))
    });
    let mut line = format!(
        "syscatch: guardian: syscatch ended without detaching; put back {} original byte(s) in process {pid}",
        r.put_back
    );
    if copies > 0 {
        line += &format!(" and {in_copies} in {copies} forked child(ren)");
    }
    if r.nopped > 0 {
        line += &format!(", made {} trampoline int3(s) nops", r.nopped);
    }
    if r.changed > 0 {
        line += &format!(", left {} changed by someone else", r.changed);
    }
    if r.failed > 0 {
        line += &format!(", FAILED to write {}", r.failed);
    }
    // On syscatch's stderr, which may be gone too: never a panic over it.
    let _ = writeln!(std::io::stderr(), "{line}");
    if r.failed > 0 { 1 } else { 0 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn messages_round_trip_and_garbage_is_refused() {
        let all = [
            Msg::Plant { addr: 0x7f00_1234, orig: vec![0x48], planted: vec![0xcc] },
            Msg::Retire(0x10),
            Msg::Nop(0xabc),
            Msg::Exec,
            Msg::Done,
        ];
        for m in all {
            assert_eq!(parse_msg(&format_msg(&m)), Some(m));
        }
        for bad in ["", "P 10 48", "P 10 48 cccc", "P zz 48 cc", "R", "R 10 11", "Q 1", "P 10 4 cc", "D D"] {
            assert_eq!(parse_msg(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn restores_only_what_is_still_ours() {
        let mut l = Ledger::default();
        l.apply(Msg::Plant { addr: 0x100, orig: vec![0x48], planted: vec![0xcc] });
        l.apply(Msg::Plant { addr: 0x200, orig: vec![0x55], planted: vec![0xcc] });
        l.apply(Msg::Plant { addr: 0x300, orig: vec![0x41], planted: vec![0xcc] });
        l.apply(Msg::Plant { addr: 0x400, orig: vec![0x90], planted: vec![0xcc] });
        l.apply(Msg::Retire(0x400));
        l.apply(Msg::Nop(0x500));
        // 0x100 planted; 0x200 never planted (killed between message and write); 0x300 overwritten by someone
        // else; 0x400 retired but still 0xcc (not ours any more); 0x500 the trampoline's int3.
        let mut mem: HashMap<u64, u8> =
            [(0x100, 0xcc), (0x200, 0x55), (0x300, 0xe9), (0x400, 0xcc), (0x500, 0xcc)].into();
        let snapshot = mem.clone();
        let r = l.restore(&mut |a, b| snapshot.get(&a).map(|&v| b[0] = v).is_some(), &mut |a, b| {
            mem.insert(a, b[0]).is_some()
        });
        assert_eq!(r, Restored { put_back: 1, nopped: 1, changed: 1, failed: 0 });
        assert_eq!(mem[&0x100], 0x48);
        assert_eq!(mem[&0x200], 0x55);
        assert_eq!(mem[&0x300], 0xe9);
        assert_eq!(mem[&0x400], 0xcc);
        assert_eq!(mem[&0x500], 0x90);
        l.apply(Msg::Exec);
        assert!(l.is_empty());
    }

    #[test]
    fn a_forked_copy_is_restored_only_where_it_maps_the_same_file() {
        let mut l = Ledger::default();
        l.apply(Msg::Plant { addr: 0x7000_0100, orig: vec![0x48], planted: vec![0xcc] });
        l.apply(Msg::Nop(0x5000_0000));
        let line = |s: &str| crate::model::maps::parse_maps_line(s).unwrap();
        let libc = "70000000-70100000 r-xp 00028000 08:01 4242 /usr/lib/libc.so.6".to_string();
        let maps = vec![line(&libc), line("50000000-50001000 r-xp 00000000 00:00 0")];
        let cases: [(&str, usize); 4] = [
            // The fork child: the same file at the same place.
            (&libc, 1),
            // After exec: another file there, or the same file elsewhere in it, or anonymous memory.
            ("70000000-70100000 r-xp 00028000 08:01 4343 /usr/bin/other", 0),
            ("70000000-70100000 r-xp 00029000 08:01 4242 /usr/lib/libc.so.6", 0),
            ("70000000-70100000 rw-p 00000000 00:00 0", 0),
        ];
        for (child, want) in cases {
            let mut mem: HashMap<u64, u8> = [(0x7000_0100, 0xcc), (0x5000_0000, 0xcc)].into();
            let snapshot = mem.clone();
            let r = l.restore_copy(
                &maps,
                &[line(child), line("50000000-50001000 r-xp 00000000 00:00 0")],
                &mut |a, b| snapshot.get(&a).map(|&v| b[0] = v).is_some(),
                &mut |a, b| mem.insert(a, b[0]).is_some(),
            );
            assert_eq!(r.put_back, want, "{child}");
            assert_eq!(mem[&0x7000_0100], if want == 1 { 0x48 } else { 0xcc }, "{child}");
            // The trampoline's int3 stays: the copy's pad steps over it.
            assert_eq!((r.nopped, mem[&0x5000_0000]), (0, 0xcc));
        }
    }
}
