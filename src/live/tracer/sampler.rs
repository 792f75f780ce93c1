//! `--malloc`'s sampler in the trampoline's pages (see `crate::x86::alloc`): its tables written at install, its
//! counts read at detach; and `--fast`'s patches taken back at detach.

use super::Tracer;

impl Tracer<'_> {
    /// `--malloc`'s draws (for a mean of `every` bytes) and its seed, into the sampler's pages at `page`.
    pub(super) fn sampler_tables(&self, page: u64, every: u64) -> std::io::Result<()> {
        use crate::x86::alloc;
        self.mem.write_all(page + alloc::DRAWS, &alloc::draws(every))?;
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0x9e37_79b9, |d| d.as_nanos() as u64)
            ^ u64::from(self.cfg.pid as u32) << 32;
        self.mem.write_all(page + alloc::ALLOC + alloc::C_SEED * 8, &seed.to_le_bytes())?;
        self.mem.write_all(page + alloc::ALLOC + alloc::C_SHARED_LEFT * 8, &every.to_le_bytes())?;
        self.mem.write_all(page + alloc::ALLOC + alloc::C_SHARED_RNG * 8, &(seed | 1).to_le_bytes())
    }

    /// What `--malloc`'s sampler counted, into the summary (read at detach, its flag off).
    pub(super) fn sampler_counts(&mut self, page: u64) {
        use crate::x86::alloc;
        let word = |t: &Self, w: u64| t.mem.read_u64(page + alloc::ALLOC + w * 8).unwrap_or(0);
        let (sampled, table_full, shared) =
            (word(self, alloc::C_SAMPLED), word(self, alloc::C_TABLE_FULL), word(self, alloc::C_THREADS_FULL));
        self.summary.malloc_sampled = sampled;
        if table_full > 0 {
            self.summary.warnings.push(format!(
                "--malloc: {table_full} sampled block(s) had no room in the table of sampled blocks: their frees \
                 were not seen, so in-use bytes may be overestimated (raise --malloc-every)"
            ));
        }
        if shared > 0 {
            self.summary.notes.push(format!(
                "--malloc: {shared} call(s) counted on the shared count (more than 1024 threads allocated)"
            ));
        }
    }

    /// Puts the wrapper's bytes back (only if our jump is still there) and turns the page's int3s into nops, so a
    /// thread still inside the page, or returning into it from a signal handler, runs on and jumps back.
    pub(super) fn unpatch(&mut self) {
        let Some(fast) = self.fast.take() else { return };
        for p in &fast.patches {
            let mut now = vec![0u8; p.jump.len()];
            match self.mem.read_exact(p.plan.at, &mut now) {
                Ok(()) if now == p.jump => {
                    if let Err(e) = self.mem.write_all(p.plan.at, &p.plan.orig) {
                        self.summary.warnings.push(format!("could not restore the code at {:#x}: {e}", p.plan.at));
                    }
                }
                Ok(()) => self.summary.warnings.push(format!(
                    "the patched bytes at {:#x} were changed by someone else; left as they are",
                    p.plan.at
                )),
                Err(_) => {}
            }
        }
        for &a in fast.int3s.keys().chain(&fast.flags) {
            let _ = self.mem.write_all(a, &[0x90]);
        }
        if !fast.flags.is_empty() {
            self.sampler_counts(fast.page);
        }
        // Said only while the process lives (a process that exited has no page left to speak of).
        if self.mem.read_exact(fast.page, &mut [0u8; 1]).is_err() {
            return;
        }
        self.summary.notes.push(format!(
            "--fast left its trampoline page mapped at {:#x} ({} KiB with its counter's page{}, by design: a thread \
             may still return into it)",
            fast.page,
            fast.len / 1024,
            if fast.ring.is_some() { " and its ring" } else { "" }
        ));
    }
}
