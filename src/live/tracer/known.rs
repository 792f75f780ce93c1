//! Known stacks, the tracer's side (see `crate::x86::known`): the unwinding proposes a stack it unwound to its
//! outermost frame; the tracer writes it into the table in the ring's shared pages, where the matcher of the
//! trampoline finds it, and keeps the capture its later calls are reported with. A new thread that takes the fs
//! base of one gone has that one's entries withdrawn at its first stop, before it runs.

use super::Tracer;
use super::kernel::Mem;
use crate::live::python::Walked;
use crate::model::Tid;
use crate::model::event::StackCapture;
use crate::model::known::{Hint, Proposal};
use crate::x86::known::{self as table, Entry};
use std::collections::HashSet;

/// The table as the tracer wrote it.
pub(super) struct Known {
    rx: crossbeam_channel::Receiver<Proposal>,
    /// Each entry's state, as written.
    states: Vec<u64>,
    /// The next free check.
    next_op: u64,
    /// The capture of each entry, by its number (given by the unwinding).
    pub(super) stacks: std::collections::HashMap<u32, StackCapture>,
    /// Each entry's place, thread (fs base) and thread id, and what it was installed as.
    entries: Vec<((u64, u64, Tid), Key)>,
    /// What is installed (key and checks): the unwinding may propose a stack again before its calls stop
    /// stopping. A withdrawn entry's is taken out (a new thread at the same fs base may meet the same stack).
    installed: HashSet<Key>,
}

type Key = (u64, u64, u64, Vec<crate::model::known::Op>);

impl Known {
    pub(super) fn new(rx: crossbeam_channel::Receiver<Proposal>) -> Known {
        Known {
            rx,
            states: vec![table::NEVER; table::ENTRIES as usize],
            next_op: 0,
            stacks: Default::default(),
            entries: Vec::new(),
            installed: HashSet::new(),
        }
    }
}

impl Tracer<'_> {
    /// Whether a stop at trampoline int3 `int3` is one whose stack can be made known.
    pub(super) fn known_hint(&mut self, tid: Tid, regs: &crate::model::regs::Regs, stack: &[u8]) -> Option<Hint> {
        let f = self.fast.as_ref()?;
        f.known.as_ref()?;
        let int3 = regs.ip().wrapping_sub(1);
        if !f.known_int3s.contains(&int3) || stack.is_empty() || regs.0.fs_base == 0 {
            return None;
        }
        let (python, interp) = match self.cfg.python.as_ref() {
            None if self.python_seen.is_some() => (Vec::new(), None),
            // The checks of the frames the walk found (3.11+), or, where it found none, the interpreter's
            // addresses (the stack must have no frame there); a thread whose walk failed keeps stopping.
            Some(p) => match p.last_walk() {
                Walked::Frames => (p.known_ops(regs.0.fs_base, regs.sp(), stack.len())?, None),
                Walked::NoFrames => (Vec::new(), Some(p.interp_range())),
                Walked::Failed => return None,
            },
            None => return None,
        };
        Some(Hint { tid, thread: regs.0.fs_base, int3, python, interp })
    }

    /// Installs what the unwinding proposed since the last turn.
    pub(super) fn take_known(&mut self) {
        let Some(f) = self.fast.as_mut() else { return };
        let (Some(k), Some(mem)) = (f.known.as_mut(), f.shared.as_deref()) else { return };
        let page = f.page;
        while let Ok(p) = k.rx.try_recv() {
            // The thread still has that fs base, and is still traced.
            let current = f.ring.as_ref().and_then(|r| r.threads.get(&p.thread)).and_then(|h| h.last());
            if current.is_none_or(|&(_, t)| t != p.tid) || !self.threads.contains_key(&p.tid) {
                continue;
            }
            // Made from a stop read before a CPython was found (late, with dlopen): without its frames.
            if !p.python && self.cfg.python.is_some() {
                continue;
            }
            install(k, mem, page, p);
        }
    }

    /// Withdraws the entries of fs base `thread` that belong to another thread than `tid` (which now has it).
    pub(super) fn withdraw_known(&mut self, thread: u64, tid: Tid) {
        let Some(f) = self.fast.as_mut() else { return };
        let (Some(k), Some(mem)) = (f.known.as_mut(), f.shared.as_deref()) else { return };
        withdraw(k, mem, f.page, |&(_, t, owner)| t == thread && owner != tid);
    }

    /// Withdraws every entry (a CPython found late: stacks known before it have no Python frames).
    pub(super) fn withdraw_all_known(&mut self) {
        let Some(f) = self.fast.as_mut() else { return };
        let (Some(k), Some(mem)) = (f.known.as_mut(), f.shared.as_deref()) else { return };
        withdraw(k, mem, f.page, |_| true);
    }
}

fn withdraw(k: &mut Known, mem: &dyn Mem, page: u64, which: impl Fn(&(u64, u64, Tid)) -> bool) {
    for (e, key) in k.entries.iter().filter(|(e, _)| which(e)) {
        let i = e.0;
        if k.states[i as usize] == table::VALID
            && mem.write_all(page + table::entry_at(i), &table::WITHDRAWN.to_le_bytes()).is_ok()
        {
            k.states[i as usize] = table::WITHDRAWN;
            k.installed.remove(key);
        }
    }
}

/// Writes proposal `p` into the table: its checks, then its entry, then (on its own) the entry's state.
fn install(k: &mut Known, mem: &dyn Mem, page: u64, p: Proposal) {
    let key = (p.thread, p.rsp, p.int3, p.ops.clone());
    if k.installed.contains(&key)
        || p.ops.is_empty()
        || p.ops.len() > crate::python::known::MAX_OPS
        || !p.ops.iter().all(|o| o.well_formed(p.depth))
        || k.stacks.len() >= table::ENTRIES as usize
        || k.stacks.contains_key(&p.id)
        || k.next_op + p.ops.len() as u64 > table::OPS
    {
        return;
    }
    let Some(i) = table::place(&k.states, p.thread, p.rsp, p.int3) else { return };
    let bytes: Vec<u8> = p.ops.iter().flat_map(|o| o.bytes()).collect();
    let id = p.id;
    let entry = Entry {
        thread: p.thread,
        rsp: p.rsp,
        int3: p.int3,
        first: k.next_op as u32,
        count: p.ops.len() as u32,
        depth: p.depth,
        id,
    };
    if mem.write_all(page + table::op_at(k.next_op), &bytes).is_err()
        || mem.write_all(page + table::entry_at(i), &entry.bytes(table::NEVER)).is_err()
    {
        return;
    }
    // The checks and the entry are in place before a reader can see it valid (x86 keeps stores in order).
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    if mem.write_all(page + table::entry_at(i), &table::VALID.to_le_bytes()).is_err() {
        return;
    }
    k.states[i as usize] = table::VALID;
    k.next_op += p.ops.len() as u64;
    k.stacks.insert(id, p.capture);
    k.entries.push(((i, p.thread, p.tid), key.clone()));
    k.installed.insert(key);
}
