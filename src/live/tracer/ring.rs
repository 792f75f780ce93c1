//! `--fast`'s ring: the calls the trampoline wrote down without a stop, read in order with the stop events (see
//! `trampoline::Slot`). Every pass through the trampoline, ring or stop, takes its number from one counter; a stop
//! event waits (in [`Ring::stops`]) until every call numbered before it was read, and a breakpoint's event waits
//! behind the numbers taken before it completed. Slots name their thread by fs base, learned over time.

use super::Tracer;
use super::fast::FastStop;
use super::kernel::Mem;
use crate::model::event::{Event, StackCapture};
use crate::model::regs::Regs;
use crate::model::window::Window;
use crate::os::Tid;
use crate::x86::trampoline::{self, Slot};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

/// The reader of the trampoline's ring.
pub(super) struct Ring {
    /// The oldest sequence number not reported yet. Its slot and those after it may still be written; the
    /// trampoline reads this (as the tail) to know how far it may write.
    pub(super) next: u64,
    /// The tail as last written to the target.
    pub(super) written: u64,
    /// Stop events waiting for the calls numbered before them: a trampoline stop at (its number, 0), a
    /// breakpoint's event at (the last number taken when it completed, 1 + a count), after that number's call.
    pub(super) stops: BTreeMap<(u64, u64), Event>,
    /// Breakpoint events queued so far (their keys' second part).
    pub(super) queued: u64,
    /// Each fs base, from the registers of the threads that had it, with the counter when each was learned: a slot
    /// names its thread by its fs base, and glibc gives a new thread the fs base of a joined one (a cached stack):
    /// a slot numbered after a thread was learned at its first stop is that thread's.
    pub(super) threads: HashMap<u64, Vec<(u64, Tid)>>,
    /// See `trampoline::Assembled::ring_writes`.
    pub(super) writes: Vec<(u64, u64)>,
    /// When the ring was last read (for the `ring-slow` test fault).
    pub(super) read_at: Instant,
    /// The missing number the reading waits at, and since when.
    pub(super) waiting: Option<(u64, Instant)>,
    /// Numbers given up on after [`RING_STALL`] each (a thread stays between taking one and writing its call: a
    /// signal handler that never returns, a frozen cgroup): the calls after them go out without them, and the tail
    /// stays at the oldest, so its slot is never given to another call while its writer may still come back.
    pub(super) holes: std::collections::BTreeSet<u64>,
    /// A thread's registers, cleared for the ring's events' one-frame captures.
    pub(super) template: Option<Regs>,
}

/// At most this many numbers are given up on at once; past it the reading waits (the stop events wait with it).
const MAX_HOLES: usize = 64;

/// Single steps at most to bring a thread held inside the trampoline out of a stretch where it has a number (the
/// matcher runs the checks of each entry on its probe sequence, up to 512 each, about 20 instructions a check: a
/// few entries of one key are the usual worst; past this bound the summary says a call was lost).
const STEPS: usize = 65536;

/// How long the reading of the ring waits for a missing number before it reports the calls after it.
const RING_STALL: std::time::Duration = std::time::Duration::from_secs(1);

impl Ring {
    pub(super) fn new(writes: Vec<(u64, u64)>) -> Ring {
        Ring {
            next: 1,
            written: 1,
            stops: BTreeMap::new(),
            queued: 0,
            threads: HashMap::new(),
            writes,
            read_at: Instant::now(),
            waiting: None,
            holes: Default::default(),
            template: None,
        }
    }
}

/// The ring's side of the tracer: reading it in order with the stop events.
impl Tracer<'_> {
    /// Sends a trampoline event on, in sequence order with the calls read from the ring (at once without a ring).
    pub(super) fn emit_fast(&mut self, seq: u64, ev: Event) {
        match self.fast.as_mut().and_then(|f| f.ring.as_mut()) {
            Some(r) if seq >= r.next => {
                r.stops.insert((seq, 0), ev);
                self.drain_ring(false);
            }
            Some(r) if r.holes.contains(&seq) => {
                r.holes.remove(&seq);
                self.emit_now(ev);
            }
            // Numbered before what was reported already: only a pass the end gave up on (see `drain_ring`).
            _ => self.emit_now(ev),
        }
    }

    /// A breakpoint's event while a ring is read: queued after the calls numbered so far (their slots may not be
    /// whole yet), unless all of them were reported. Returns the event when it can go at once.
    pub(super) fn emit_after_ring(&mut self, ev: Event) -> Option<Event> {
        let Some(f) = self.fast.as_mut() else { return Some(ev) };
        let mem: &dyn Mem = f.shared.as_deref().unwrap_or(&*self.mem);
        let Some(r) = f.ring.as_mut() else { return Some(ev) };
        let Ok(now) = mem.read_u64(f.page + trampoline::COUNTER) else { return Some(ev) };
        if now < r.next {
            return Some(ev);
        }
        r.queued += 1;
        r.stops.insert((now, r.queued), ev);
        None
    }

    /// Remembers the fs base of a stopped thread: the ring's slots name their thread by it. Not a vfork child's
    /// (it runs with its parent's fs base; the parent sleeps until it execs or exits).
    pub(super) fn learn_thread(&mut self, tid: Tid, regs: &Regs) {
        if self.threads.get(&tid).is_some_and(|t| t.shared_child) {
            return;
        }
        let Some(f) = self.fast.as_mut() else { return };
        let mem: &dyn Mem = f.shared.as_deref().unwrap_or(&*self.mem);
        let Some(r) = f.ring.as_mut() else { return };
        let had = r.threads.entry(regs.0.fs_base).or_default();
        if had.last().is_some_and(|&(_, t)| t == tid) {
            return;
        }
        // Every call this thread numbers from now on is numbered after this.
        let now = mem.read_u64(f.page + trampoline::COUNTER).unwrap_or(0);
        let reused = !had.is_empty();
        had.push((now, tid));
        if reused {
            // The stacks known of the thread that had this fs base are not this one's.
            self.withdraw_known(regs.0.fs_base, tid);
        }
    }

    /// A new thread's first stop, or any interrupt: its fs base, if the ring does not know it under it yet.
    pub(super) fn learn_new_thread(&mut self, tid: Tid) {
        if self.fast.as_ref().and_then(|f| f.ring.as_ref()).is_none() {
            return;
        }
        if let Ok(regs) = self.k.get_regs(tid) {
            self.learn_thread(tid, &regs);
        }
    }

    /// Reports, in sequence order, every call written to the ring and every stop event waiting for them, as far
    /// as no number is missing; then tells the trampoline how far it may write. A number is missing while its
    /// thread is between taking it and completing its slot, or has yet to report its stop. `last`: every thread
    /// is held for detach and nothing more will come: what is missing is skipped (and said).
    pub(super) fn drain_ring(&mut self, last: bool) {
        let behind = !last && self.sink.behind();
        let Some(fast) = self.fast.as_mut() else { return };
        let labels: Vec<(Option<Arc<str>>, u64)> = fast.patches.iter().map(|p| (p.label.clone(), p.entry)).collect();
        let label = |x: &Slot| labels.get(x.site as usize).map_or((None, 0), |l| l.clone());
        let mem: &dyn Mem = fast.shared.as_deref().unwrap_or(&*self.mem);
        let known = fast.known.as_ref();
        let Some(ring) = fast.ring.as_mut() else { return };
        if !last && crate::os::faults::injected("ring-slow") {
            if ring.read_at.elapsed() < std::time::Duration::from_millis(200) {
                return;
            }
            ring.read_at = Instant::now();
        }
        let page = fast.page;
        let Ok(head) = mem.read_u64(page + trampoline::COUNTER) else {
            if last && !ring.stops.is_empty() {
                // The target is gone (and the ring with it): the stop events go out in order all the same.
                let n = ring.stops.len();
                for ev in std::mem::take(&mut ring.stops).into_values().collect::<Vec<_>>() {
                    self.emit_now(ev);
                }
                self.summary.warnings.push(format!(
                    "--fast's ring could not be read at the end: {n} stop event(s) were reported without the \
                     ring's calls between them"
                ));
            }
            return;
        };
        let mut out = Vec::new();
        let mut skipped = 0u64;
        let mut unknown = 0u64;
        let mut gave_up = false;
        // The numbers given up on whose calls were written since: they go out now, late (seen whole in one read,
        // then read again, as below).
        for h in ring.holes.clone() {
            let whole = |mem: &dyn Mem| {
                let mut got = None;
                read_slots(mem, page, h, 1, |s, slot| {
                    got = slot.filter(|x| x.seq == s);
                    false
                });
                got
            };
            if whole(mem).is_some()
                && let Some(x) = whole(mem)
            {
                let tid = thread_of(&ring.threads, &x).unwrap_or(self.cfg.pid);
                out.push(ring_event(self.start, tid, &x, label(&x), ring.template, known, &mut self.summary));
                self.summary.from_ring += 1;
                self.summary.hits += 1;
                self.summary.matching += 1;
                ring.holes.remove(&h);
            }
        }
        // The analysis is far behind: nothing more is read this turn (see `Sink::behind`).
        while ring.next <= head && !behind {
            // The slots of the numbers from `next` that may have been written (those the tail allowed).
            let n = (head + 1 - ring.next).min(trampoline::RING_SLOTS);
            let first = read_slots(mem, page, ring.next, n, |s, slot| {
                ring.stops.contains_key(&(s, 0)) || slot.is_some_and(|x| x.seq == s)
            });
            // A slot seen whole was read again: the copy is not ordered word by word, and the second one finds
            // every word the writer stored before the sequence number the first one saw.
            let mut slots = HashMap::new();
            if first > 0 {
                read_slots(mem, page, ring.next, first, |s, slot| {
                    if let Some(x) = slot.filter(|x| x.seq == s) {
                        slots.insert(s, x);
                    }
                    true
                });
            }
            let done = ring.next + first;
            for s in ring.next..done {
                if let Some(ev) = ring.stops.remove(&(s, 0)) {
                    out.push(ev);
                } else if let Some(x) = slots.remove(&s) {
                    let tid = thread_of(&ring.threads, &x).unwrap_or_else(|| {
                        unknown += 1;
                        self.cfg.pid
                    });
                    out.push(ring_event(self.start, tid, &x, label(&x), ring.template, known, &mut self.summary));
                    self.summary.from_ring += 1;
                    self.summary.hits += 1;
                    self.summary.matching += 1;
                }
                after(&mut ring.stops, s, &mut out);
            }
            ring.next = done;
            if first < n {
                if !last {
                    let now = Instant::now();
                    let since = match ring.waiting {
                        Some((s, t)) if s == ring.next => t,
                        _ => {
                            ring.waiting = Some((ring.next, now));
                            now
                        }
                    };
                    if ring.holes.len() >= MAX_HOLES || now.duration_since(since) < RING_STALL {
                        break;
                    }
                    ring.holes.insert(ring.next);
                    after(&mut ring.stops, ring.next, &mut out);
                    ring.next += 1;
                    gave_up = true;
                    continue;
                }
                // Every thread held for detach, and still missing: a thread held between taking the number and
                // its int3 (or, if it could not be stepped, its slot).
                skipped += 1;
                after(&mut ring.stops, ring.next, &mut out);
                ring.next += 1;
            }
        }
        if last {
            // Stops numbered past what the counter said (none can be) go out in order all the same.
            out.extend(std::mem::take(&mut ring.stops).into_values());
        }
        let tail = ring.holes.first().map_or(ring.next, |&h| h.min(ring.next));
        if tail != ring.written && mem.write_all(page + trampoline::TAIL, &tail.to_le_bytes()).is_ok() {
            ring.written = tail;
        }
        for ev in out {
            self.emit_now(ev);
        }
        if skipped > 0 {
            self.summary.warnings.push(format!(
                "{skipped} call(s) through --fast's trampoline were still in flight at detach (made, not yet \
                 written down) and are not reported"
            ));
        }
        if gave_up {
            self.summary.warnings.push(format!(
                "a thread took a number in --fast's trampoline and did not write its call down within {} s: the \
                 calls after it were reported without waiting (it goes out late if it comes)",
                RING_STALL.as_secs()
            ));
        }
        if unknown > 0 {
            self.summary.warnings.push(format!(
                "{unknown} call(s) from --fast's ring came from a thread whose fs base had changed since its last \
                 stop; they are reported under the process id"
            ));
        }
    }

    /// Before the last read of the ring, with every thread held: a thread stopped between its `syscall` and the
    /// store that completes its slot is stepped until the slot is whole (a few instructions of our own code).
    /// Returns the threads left running (a step that did not end in time: detach waits for their stop).
    pub(super) fn finish_ring_writes(&mut self) -> Vec<Tid> {
        let mut running = Vec::new();
        let Some(writes) = self.fast.as_ref().and_then(|f| f.ring.as_ref()).map(|r| r.writes.clone()) else {
            return running;
        };
        let inside = |ip: u64| writes.iter().any(|&(a, b)| ip >= a && ip < b);
        let tids: Vec<Tid> = self
            .threads
            .iter()
            .filter(|(_, t)| matches!(t.state, super::State::Held { group: false, .. }))
            .map(|(&tid, _)| tid)
            .collect();
        for tid in tids {
            let mut stepped = false;
            // The known-stack matcher's loop over a stack's checks takes more steps than the ring's few stores.
            for _ in 0..STEPS {
                match self.k.get_regs(tid) {
                    Ok(r) if inside(r.ip()) => {}
                    _ => break,
                }
                if !matches!(self.threads.get(&tid).map(|t| &t.state), Some(super::State::Held { group: false, .. }))
                    || self.k.step(tid, 0).is_err()
                {
                    break;
                }
                stepped = true;
                match self.wait_bounded(tid, super::hold::HOLD_LIMIT) {
                    // The step's own trap: a kernel trap (si_code > 0: TRAP_TRACE, or TRAP_BRKPT for a step over
                    // `syscall` on 6.18); a SIGTRAP another process sent (SI_USER, SI_TKILL: <= 0) is held as any.
                    Ok(crate::os::ptrace::Stop::Signal(libc::SIGTRAP)) if self.k.sig_code(tid).is_ok_and(|c| c > 0) => {
                    }
                    // Anything else is held as while holding: a signal is delivered at once (the step goes on
                    // where the handler returns), an interrupt is taken, an exit forgets the thread.
                    Ok(stop) => self.hold(tid, stop),
                    Err(_) => {
                        // Still in the system call (a slow munmap): its trap is ours when it comes, and it runs
                        // on; its slot is written after the last read (the summary says a call was in flight).
                        self.late.insert(tid, super::Late::Trap);
                        running.push(tid);
                        if let Some(t) = self.threads.get_mut(&tid)
                            && let super::State::Held { prev, .. } =
                                std::mem::replace(&mut t.state, super::State::Running)
                        {
                            t.state = *prev;
                        }
                        break;
                    }
                }
            }
            if !running.contains(&tid) && self.k.get_regs(tid).is_ok_and(|r| inside(r.ip())) {
                self.summary.warnings.push(format!(
                    "thread {tid} was still inside --fast's trampoline after {STEPS} single steps at detach: its \
                     call (made) is not reported"
                ));
            }
            // Stepped through a full ring's int3 (or a known-stack path's): its event is read as at any stop there.
            if stepped
                && !running.contains(&tid)
                && let Ok(r) = self.k.get_regs(tid)
                && self.fast.as_ref().is_some_and(|f| {
                    let int3 = r.ip().wrapping_sub(1);
                    f.full_int3s.contains(&int3) || f.known_int3s.contains(&int3)
                })
                && let Some(FastStop::Event(ev, seq)) = self.fast_event(tid, &r, None)
            {
                self.emit_fast(seq, *ev);
            }
        }
        running
    }
}

/// Moves the breakpoint events queued after number `s` to `out`, in the order they came.
fn after(stops: &mut BTreeMap<(u64, u64), Event>, s: u64, out: &mut Vec<Event>) {
    let keys: Vec<(u64, u64)> = stops.range((s, 1)..=(s, u64::MAX)).map(|(&k, _)| k).collect();
    out.extend(keys.into_iter().filter_map(|k| stops.remove(&k)));
}

/// The thread that wrote slot `x`: of those that had its fs base, the last one learned before its number was
/// taken (or the first one, for a call numbered before any was learned).
fn thread_of(threads: &HashMap<u64, Vec<(u64, Tid)>>, x: &Slot) -> Option<Tid> {
    let had = threads.get(&x.thread)?;
    had.iter().rev().find(|&&(from, _)| from < x.seq).or(had.first()).map(|&(_, t)| t)
}

/// The event of a call read from the ring, at the time it was read: a libc function's (`label`) as its int3 probe
/// reports it. Its capture is one word of stack, the return address the slot holds, at the patched function's
/// `entry`, asked for nothing more (`asked` 0): the unwinder gives the function and its caller, and says why it
/// ends there. A call the known-stack matcher wrote has the capture of its known stack (counted in `summary`).
fn ring_event(
    start: Instant,
    tid: Tid,
    x: &Slot,
    (label, entry): (Option<Arc<str>>, u64),
    template: Option<Regs>,
    known: Option<&super::known::Known>,
    summary: &mut crate::model::event::Summary,
) -> Event {
    let known = x.known.and_then(|k| known?.stacks.get(&k)).cloned();
    if known.is_some() {
        summary.from_known += 1;
    }
    let capture = known.or_else(|| {
        template.map(|mut regs| {
            for r in crate::model::regs::Reg::ALL {
                regs.set(r, 0);
            }
            regs.0.rip = entry;
            regs.0.rsp = x.sp;
            StackCapture {
                regs,
                stack: Window::from(x.ra.to_le_bytes().to_vec()),
                asked: 0,
                python: Default::default(),
                more: Vec::new(),
                known: None,
                known_id: None,
            }
        })
    });
    Event {
        time: start.elapsed().as_secs_f64(),
        tid,
        probe: None,
        nr: if label.is_some() { 0 } else { x.nr },
        func: label,
        args: x.args,
        regs: Vec::new(),
        ret: Some(x.ret),
        ret_missing: None,
        capture,
        also: Vec::new(),
    }
}

/// Reads the slots of the `n` sequence numbers from `from` (in at most two copies: the ring wraps) and calls
/// `f` on each in order, with its slot if it could be read, until `f` says no. Returns how many `f` accepted.
fn read_slots(mem: &dyn Mem, page: u64, from: u64, n: u64, mut f: impl FnMut(u64, Option<Slot>) -> bool) -> u64 {
    let mut done = 0;
    while done < n {
        let s = from + done;
        let index = s % trampoline::RING_SLOTS;
        let count = (n - done).min(trampoline::RING_SLOTS - index);
        let mut buf = vec![0u8; (count * trampoline::SLOT) as usize];
        let ok = mem.read_exact(page + trampoline::RING + index * trampoline::SLOT, &mut buf).is_ok();
        for (i, chunk) in buf.chunks_exact(trampoline::SLOT as usize).enumerate() {
            let slot = if ok { Slot::parse(chunk) } else { None };
            if !f(s + i as u64, slot) {
                return done + i as u64;
            }
        }
        done += count;
    }
    done
}
