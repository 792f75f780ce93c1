//! A thread at one of our breakpoints: whose it is (a planted site, a return site, a trampoline), whether the
//! call matches, and stepping it over: the displaced instruction emulated or stepped, a matching `syscall()`
//! emulated up to its `syscall` instruction and only that stepped, a function probe waiting for its return.

use super::fast::FastStop;
use super::*;
use crate::live::sigstack;

impl Tracer<'_> {
    /// `guess`: the stack pointer of the thread's last trampoline event and the stack read there, if nothing has
    /// stopped the thread since.
    pub(super) fn on_trap(&mut self, tid: Tid, seen: Instant, guess: Option<(u64, usize)>) {
        crate::os::faults::stop_here("reported-trap");
        if self.on_fault_sample(tid, seen) {
            return;
        }
        // (The trampoline's int3s unblock SIGTRAP first: the pad's action is checked at the others only.)
        let masked = self.reblock_sigtrap(tid);
        // Not with the known-stack matcher: its own frame, below a match path's record, can leave words there
        // that pass for a record at a guessed stack pointer (found: a stop read with the matcher's registers).
        let guess = guess.filter(|_| self.fast.as_ref().is_none_or(|f| f.known.is_none()));
        let read = match guess.map(|g| (g.0, self.fast_guessed(tid, g, seen))) {
            Some((_, Ok(()))) => return,
            Some((sp, Err(window))) => Some((sp, window)),
            None => None,
        };
        let Ok(mut regs) = self.k.get_regs(tid) else { return };
        self.back_onto_site(tid, &regs);
        if masked && !self.fast_int3(regs.ip().wrapping_sub(1)) {
            self.restore_pad(tid);
        }
        if let Some(Thread { state: State::Stepping { after, entry, .. }, .. }) = self.threads.get(&tid) {
            let (after, start) = (*after, entry.ip());
            if regs.ip() == after {
                let sig = own_sigtrap(&*self.k, tid);
                let Some(t) = self.threads.get_mut(&tid) else { return };
                if let State::Stepping { mut ev, .. } = std::mem::replace(&mut t.state, State::Running) {
                    set_syscall_result(&mut ev, regs.0.rax);
                    self.summary.stopped += seen.elapsed();
                    self.resume(tid, sig);
                    self.emit(*ev);
                }
            } else if regs.ip() < after && regs.ip() >= start {
                // Slow path: stepping the wrapper's prefix one instruction at a time.
                self.resume(tid, 0);
            } else {
                self.on_signal(tid, libc::SIGTRAP);
            }
            return;
        }
        match self.fast_event(tid, &regs, read) {
            Some(FastStop::Event(ev, seq)) => {
                let sig = self.sent_sigtrap(tid);
                self.resume_after_event(tid, regs.sp(), &ev, seen, sig);
                self.emit_fast(seq, *ev);
                return;
            }
            Some(FastStop::Reported) => {
                let sig = self.repeated_sigtrap(tid);
                self.resume(tid, sig);
                return;
            }
            None => {}
        }
        let addr = regs.ip().wrapping_sub(1);
        let guarded = |a: u64| {
            self.sites.get(&a).is_some_and(|s| s.guard.is_some()) || self.retired.get(&a).is_some_and(|r| r.1.is_some())
        };
        if !self.planted(addr) && guarded(addr.wrapping_sub(1)) {
            // A breakpoint's guard int3: the thread ran on from just past the breakpoint's int3 without us (never
            // while we hold it): back onto the breakpoint, which takes it as a hit (or runs the original bytes).
            regs.set_ip(addr - 1);
            if self.k.set_regs(tid, &regs).is_ok() {
                self.resume(tid, 0);
            }
            return;
        }
        if !self.planted(addr) {
            if self.retired.contains_key(&addr) && self.read_byte(addr) != Some(INT3) {
                // It executed a return breakpoint's int3 just before the byte was put back: run the original.
                regs.set_ip(addr);
                if self.k.set_regs(tid, &regs).is_ok() {
                    self.resume(tid, 0);
                }
                return;
            }
            // Not ours: the target's own SIGTRAP.
            self.resume(tid, libc::SIGTRAP);
            return;
        }
        regs.set_ip(addr);
        self.summary.hits += 1;
        if self.complete_return(tid, &regs) {
            self.step_over(tid, regs, seen);
            return;
        }
        self.on_hit(tid, regs, seen);
    }

    /// A thread stopped just past one of our breakpoints' int3s is put back on the int3 at once, before anything
    /// else is done with it, where the site has no guard int3 (see `Site::guard_of`). Were syscatch to die while
    /// the thread is held there, the kernel would drop the stop's SIGTRAP and let the thread run on where it
    /// stopped: in the middle of the displaced instruction (`48 83 ec 58`, sub $0x58,%rsp, run from its second
    /// byte is sub $0x58,%esp: a stack pointer cut to 32 bits). On the int3 it traps again instead, into the trap
    /// pad, which waits for the guardian's original byte. (A guard does the same with no system call here.) Not
    /// for a site whose rest of instruction does what the whole one would (the thread is resumed there), nor for a
    /// thread being stepped through a wrapper.
    fn back_onto_site(&mut self, tid: Tid, regs: &Regs) {
        let addr = regs.ip().wrapping_sub(1);
        let Some(site) = self.sites.get(&addr).filter(|_| self.armed) else { return };
        let stepping = matches!(self.threads.get(&tid), Some(Thread { state: State::Stepping { .. }, .. }));
        if stepping || site.guard.is_some() || (site.cont_past && regs.0.rdi >> 32 == 0) {
            crate::os::faults::stop_here("held-at-breakpoint");
            return;
        }
        let mut on = *regs;
        on.set_ip(addr);
        let _ = self.k.set_regs(tid, &on);
        crate::os::faults::stop_here("held-at-breakpoint");
    }

    /// Tells the guardian (if any) what is planted: before a byte is planted, after it is taken back.
    pub(super) fn tell(&mut self, m: Msg) {
        if let Some(g) = self.guard.as_mut() {
            g.send(&m);
        }
    }

    pub(super) fn read_byte(&self, addr: u64) -> Option<u8> {
        let mut b = [0u8; 1];
        self.mem.read_exact(addr, &mut b).ok().map(|_| b[0])
    }

    /// A return breakpoint reached by the thread a call is waiting for, at the stack depth of that call.
    pub(super) fn complete_return(&mut self, tid: Tid, regs: &Regs) -> bool {
        let addr = regs.ip();
        let Some(site) = self.sites.get_mut(&addr) else {
            return false;
        };
        let Some(i) = site.waiting.iter().position(|(t, sp, _)| *t == tid && *sp == regs.sp()) else {
            return false;
        };
        let (_, _, mut ev) = site.waiting.swap_remove(i);
        ev.ret = Some(regs.0.rax);
        let retire = site.waiting.is_empty() && site.probes.is_empty();
        self.emit(*ev);
        if retire {
            // Nobody waits here any more: put the byte back. A thread that already executed the int3 is
            // recognised by `retired` and rewound.
            let site = self.sites.remove(&addr).expect("site exists");
            let _ = site.unplant(&*self.mem);
            self.tell(Msg::Retire(addr));
            self.retired.insert(addr, (site.orig, site.guard));
        }
        true
    }

    /// Emulates the displaced instruction (or steps it alone) and lets the thread go.
    pub(super) fn step_over(&mut self, tid: Tid, mut regs: Regs, seen: Instant) {
        let addr = regs.ip();
        let Some(site) = self.sites.get(&addr) else {
            // The site was just retired: the original byte is back.
            if self.k.set_regs(tid, &regs).is_ok() {
                self.resume(tid, 0);
            }
            return;
        };
        if site.cont_past && regs.0.rdi >> 32 == 0 {
            // rip is still just past the int3: the rest of the instruction does what the whole one would.
            self.summary.emulated += 1;
            self.summary.stopped += seen.elapsed();
            self.resume(tid, 0);
            return;
        }
        let (first, then) = (site.first, site.then);
        let m = CapturedMem { sp: regs.sp(), stack: &[], mem: &*self.mem };
        let mut emulated = regs;
        // (A one-byte first instruction with its next one, unless it went elsewhere: never let go between the two.)
        let both = breakpoints::emulate(&first, &mut emulated, &m).is_some()
            && then.is_none_or(|t| emulated.ip() != t.addr || breakpoints::emulate(&t, &mut emulated, &m).is_some());
        if both {
            self.summary.emulated += 1;
            if self.k.set_regs(tid, &emulated).is_ok() {
                self.summary.stopped += seen.elapsed();
                self.resume(tid, 0);
            }
            return;
        }
        regs.set_ip(addr);
        self.step_alone(tid, regs);
        self.summary.stopped += seen.elapsed();
    }

    pub(super) fn on_hit(&mut self, tid: Tid, regs: Regs, seen: Instant) {
        let addr = regs.ip();
        let Some(site) = self.sites.get_mut(&addr) else { return };
        let is_wrapper = site.wrapper.is_some();
        let arg = |i: usize| -> u64 {
            let g = &regs.0;
            match (is_wrapper, i) {
                (true, 0) => g.rsi,
                (true, 1) => g.rdx,
                (true, 2) => g.rcx,
                (true, 3) => g.r8,
                (true, 4) => g.r9,
                (true, _) => self.mem.read_u64(regs.sp().wrapping_add(8)).unwrap_or(0),
                (false, 0) => g.rdi,
                (false, 1) => g.rsi,
                (false, 2) => g.rdx,
                (false, 3) => g.rcx,
                (false, 4) => g.r8,
                (false, _) => g.r9,
            }
        };
        let mut matched = Vec::new();
        for (i, p) in site.probes.iter_mut().enumerate() {
            if !p.exhausted() && p.cond.matches(&regs, &arg) && p.sample() {
                p.emitted += 1;
                matched.push(i);
            }
        }
        if matched.is_empty() {
            self.step_over(tid, regs, seen);
            return;
        }
        if crate::os::faults::injected_once("tracer-panic") {
            panic!("injected fault: tracer-panic");
        }
        self.summary.matching += 1;
        let want_stack = matched.iter().any(|&i| site.probes[i].want_stack);
        let want_ret = matched.iter().any(|&i| site.probes[i].want_ret);
        let (len, sp) = (self.cfg.stack_bytes, regs.sp());
        let stack = if want_stack && len > 0 {
            // Fields, not a method of `self`: `site` still borrows the sites.
            Window::filled_from(&self.windows, |b| self.k.read_into(tid, sp, len, b))
        } else {
            Window::default()
        };
        let m = CapturedMem { sp: regs.sp(), stack: &stack, mem: &*self.mem };
        let g = &regs.0;
        let args = if is_wrapper {
            [g.rsi, g.rdx, g.rcx, g.r8, g.r9, m.read_u64(regs.sp().wrapping_add(8)).unwrap_or(0)]
        } else {
            [g.rdi, g.rsi, g.rdx, g.rcx, g.r8, g.r9]
        };
        let ret_addr = m.read_u64(regs.sp());
        let asked = self.cfg.stack_bytes;
        let capture = if stack.is_empty() {
            None
        } else {
            let k = &*self.k;
            let more =
                sigstack::read_interrupted(|a, n, b| k.read_into(tid, a, n, b), &self.cfg.restorers, sp, &stack, len);
            let python = self.cfg.python.as_mut().map(|p| p.read_frames(tid, &regs, &stack)).unwrap_or_default();
            Some(StackCapture { regs, stack, asked, python, more, known: None, known_id: None })
        };
        let first = matched[0];
        let p = &site.probes[first];
        let ev = Event {
            time: self.start.elapsed().as_secs_f64(),
            tid,
            probe: p.name.clone(),
            func: p.label.clone(),
            nr: if is_wrapper { g.rdi } else { 0 },
            args,
            regs: matched.iter().flat_map(|&i| site.probes[i].regs.iter().map(|&r| (r, regs.get(r)))).collect(),
            ret: None,
            ret_missing: None,
            capture,
            also: matched[1..].iter().filter_map(|&i| site.probes[i].name.clone()).collect(),
        };
        if is_wrapper {
            self.enter_wrapper(tid, regs, ev, seen, matched);
        } else if want_ret {
            match ret_addr {
                Some(ra) => self.wait_return(tid, ra, regs.sp().wrapping_add(8), ev),
                None => {
                    let mut ev = ev;
                    ev.ret_missing = Some("the return address could not be read".into());
                    self.emit(ev);
                }
            }
            self.step_over(tid, regs, seen);
        } else {
            self.emit(ev);
            self.step_over(tid, regs, seen);
        }
    }

    /// Emulates a wrapper up to its `syscall` instruction and single-steps that instruction.
    pub(super) fn enter_wrapper(
        &mut self,
        tid: Tid,
        mut regs: Regs,
        mut ev: Event,
        seen: Instant,
        matched: Vec<usize>,
    ) {
        let addr = regs.ip();
        let Some(site) = self.sites.get(&addr) else { return };
        let Some(w) = site.wrapper.clone() else { return };
        let first = site.first;
        let entry = regs;
        let stack: &[u8] = ev.capture.as_ref().map(|c| &c.stack[..]).unwrap_or(&[]);
        let m = CapturedMem { sp: regs.sp(), stack, mem: &*self.mem };
        let mut ok = breakpoints::emulate(&first, &mut regs, &m).is_some();
        match &w.rest {
            Some(rest) => {
                for d in rest {
                    ok = ok && breakpoints::emulate(d, &mut regs, &m).is_some();
                }
            }
            None => self.summary.slow_path += 1,
        }
        if !ok || self.k.set_regs(tid, &regs).is_err() {
            ev.ret_missing = Some("could not step the wrapper".into());
            self.emit(ev);
            self.step_over(tid, entry, seen);
            return;
        }
        self.summary.stopped += seen.elapsed();
        if let Some(t) = self.threads.get_mut(&tid) {
            t.state = State::Stepping { ev: Box::new(ev), after: w.syscall_at + 2, entry: Box::new(entry), matched };
        }
        self.resume(tid, 0);
    }

    /// Plants (or reuses) a breakpoint at a call's return address; only this thread at `sp_after` completes it.
    pub(super) fn wait_return(&mut self, tid: Tid, ret_addr: u64, sp_after: u64, ev: Event) {
        if let Some(site) = self.sites.get_mut(&ret_addr) {
            site.waiting.push((tid, sp_after, Box::new(ev)));
            return;
        }
        let mut code = [0u8; 16];
        let decoded = self.mem.read_exact(ret_addr, &mut code).ok().and_then(|_| {
            let cs = self.cs.as_ref()?;
            breakpoints::decode(cs, &code, ret_addr, 1).first().copied()
        });
        let mut ev = ev;
        let Some(first) = decoded.filter(|_| code[0] != INT3) else {
            ev.ret_missing = Some(format!("cannot place a return breakpoint at {ret_addr:#x}"));
            self.emit(ev);
            return;
        };
        let then = self.cs.as_ref().and_then(|cs| Site::then_of(cs, &code, ret_addr, &first, false));
        let guard = Site::guard_of(&first, false, Some(code[1]), then.as_ref());
        let site = Site {
            addr: ret_addr,
            orig: code[0],
            guard,
            then,
            first,
            cont_past: false,
            wrapper: None,
            probes: Vec::new(),
            waiting: vec![(tid, sp_after, Box::new(ev))],
        };
        self.pad_list(crate::x86::trappad::entry(ret_addr, false));
        if guard.is_some() {
            self.pad_list(crate::x86::trappad::guard_entry(ret_addr + 1));
        }
        let (orig, planted) = site.bytes();
        self.tell(Msg::Plant { addr: ret_addr, orig, planted });
        if site.plant(&*self.mem).is_err() {
            let _ = site.unplant(&*self.mem);
            self.tell(Msg::Retire(ret_addr));
            let mut site = site;
            let (_, _, mut ev) = site.waiting.pop().expect("the waiting call");
            ev.ret_missing = Some(format!("cannot write a return breakpoint at {ret_addr:#x}"));
            self.emit(*ev);
            return;
        }
        self.retired.remove(&ret_addr);
        self.sites.insert(ret_addr, site);
    }
}
