//! The x86_64 general-purpose register set, as PTRACE_GETREGS returns it.

pub use libc::user_regs_struct as RawRegs;

/// Registers of a stopped thread. A plain copy: changing it changes nothing until `ptrace::set_regs`.
#[derive(Clone, Copy)]
pub struct Regs(pub RawRegs);

/// A register the emulator and the probe conditions can name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Reg {
    Rax,
    Rbx,
    Rcx,
    Rdx,
    Rsi,
    Rdi,
    Rbp,
    Rsp,
    R8,
    R9,
    R10,
    R11,
    R12,
    R13,
    R14,
    R15,
    Rip,
}

impl Reg {
    pub const ALL: [Reg; 17] = [
        Reg::Rax,
        Reg::Rbx,
        Reg::Rcx,
        Reg::Rdx,
        Reg::Rsi,
        Reg::Rdi,
        Reg::Rbp,
        Reg::Rsp,
        Reg::R8,
        Reg::R9,
        Reg::R10,
        Reg::R11,
        Reg::R12,
        Reg::R13,
        Reg::R14,
        Reg::R15,
        Reg::Rip,
    ];

    pub fn from_name(name: &str) -> Option<Reg> {
        Some(match name {
            "rax" => Reg::Rax,
            "rbx" => Reg::Rbx,
            "rcx" => Reg::Rcx,
            "rdx" => Reg::Rdx,
            "rsi" => Reg::Rsi,
            "rdi" => Reg::Rdi,
            "rbp" => Reg::Rbp,
            "rsp" => Reg::Rsp,
            "r8" => Reg::R8,
            "r9" => Reg::R9,
            "r10" => Reg::R10,
            "r11" => Reg::R11,
            "r12" => Reg::R12,
            "r13" => Reg::R13,
            "r14" => Reg::R14,
            "r15" => Reg::R15,
            "rip" => Reg::Rip,
            _ => return None,
        })
    }
}

impl Regs {
    pub fn zeroed() -> Regs {
        #[rustfmt::skip]
        let r = RawRegs {
            r15: 0, r14: 0, r13: 0, r12: 0, rbp: 0, rbx: 0, r11: 0, r10: 0, r9: 0, r8: 0, rax: 0, rcx: 0, rdx: 0,
            rsi: 0, rdi: 0, orig_rax: 0, rip: 0, cs: 0, eflags: 0, rsp: 0, ss: 0, fs_base: 0, gs_base: 0, ds: 0,
            es: 0, fs: 0, gs: 0,
        };
        Regs(r)
    }

    pub fn get(&self, r: Reg) -> u64 {
        let g = &self.0;
        match r {
            Reg::Rax => g.rax,
            Reg::Rbx => g.rbx,
            Reg::Rcx => g.rcx,
            Reg::Rdx => g.rdx,
            Reg::Rsi => g.rsi,
            Reg::Rdi => g.rdi,
            Reg::Rbp => g.rbp,
            Reg::Rsp => g.rsp,
            Reg::R8 => g.r8,
            Reg::R9 => g.r9,
            Reg::R10 => g.r10,
            Reg::R11 => g.r11,
            Reg::R12 => g.r12,
            Reg::R13 => g.r13,
            Reg::R14 => g.r14,
            Reg::R15 => g.r15,
            Reg::Rip => g.rip,
        }
    }

    pub fn set(&mut self, r: Reg, v: u64) {
        let g = &mut self.0;
        let slot = match r {
            Reg::Rax => &mut g.rax,
            Reg::Rbx => &mut g.rbx,
            Reg::Rcx => &mut g.rcx,
            Reg::Rdx => &mut g.rdx,
            Reg::Rsi => &mut g.rsi,
            Reg::Rdi => &mut g.rdi,
            Reg::Rbp => &mut g.rbp,
            Reg::Rsp => &mut g.rsp,
            Reg::R8 => &mut g.r8,
            Reg::R9 => &mut g.r9,
            Reg::R10 => &mut g.r10,
            Reg::R11 => &mut g.r11,
            Reg::R12 => &mut g.r12,
            Reg::R13 => &mut g.r13,
            Reg::R14 => &mut g.r14,
            Reg::R15 => &mut g.r15,
            Reg::Rip => &mut g.rip,
        };
        *slot = v;
    }

    pub fn ip(&self) -> u64 {
        self.0.rip
    }
    pub fn sp(&self) -> u64 {
        self.0.rsp
    }

    /// Moves the thread's program counter. `orig_rax = -1` keeps the kernel's syscall-restart logic from moving
    /// rip back by two bytes when the thread was stopped inside a system call (gdb's amd64_linux_write_pc).
    pub fn set_ip(&mut self, ip: u64) {
        self.0.rip = ip;
        self.0.orig_rax = u64::MAX;
    }

    /// These registers as the kernel resumes them when the thread goes on without running a signal handler:
    /// a system call it was stopped in the middle of (rax -ERESTARTSYS, -ERESTARTNOINTR, -ERESTARTNOHAND, or
    /// -ERESTART_RESTARTBLOCK, with orig_rax its number) is set to run again (rip back on its `syscall`, rax its
    /// number, or restart_syscall's); `orig_rax = -1` in every case, so no later resume moves them again. Registers
    /// that still mean the same wherever the thread goes next (the call gate returns through them).
    pub fn restarted(&self) -> Regs {
        let mut r = *self;
        if (r.0.orig_rax as i64) >= 0 {
            match r.0.rax as i64 {
                -514..=-512 => (r.0.rax, r.0.rip) = (r.0.orig_rax, r.0.rip.wrapping_sub(2)),
                -516 => (r.0.rax, r.0.rip) = (libc::SYS_restart_syscall as u64, r.0.rip.wrapping_sub(2)),
                _ => {}
            }
        }
        r.0.orig_rax = u64::MAX;
        r
    }
}

impl std::fmt::Debug for Regs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "rip={:#x} rsp={:#x} rax={:#x} rdi={:#x}", self.0.rip, self.0.rsp, self.0.rax, self.0.rdi)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restarted_as_the_kernel_would() {
        let mut r = Regs::zeroed();
        (r.0.rip, r.0.orig_rax) = (0x1002, 7);
        for (rax, want) in [(-512i64, 7u64), (-513, 7), (-514, 7), (-516, libc::SYS_restart_syscall as u64)] {
            r.0.rax = rax as u64;
            let x = r.restarted();
            assert_eq!((x.0.rax, x.0.rip, x.0.orig_rax), (want, 0x1000, u64::MAX), "{rax}");
        }
        // A finished call (EINTR, a result) and a thread outside any call stay where they are.
        for (rax, orig) in [(-4i64, 7u64), (3, 7), (-512, u64::MAX)] {
            (r.0.rax, r.0.orig_rax) = (rax as u64, orig);
            let x = r.restarted();
            assert_eq!((x.0.rax, x.0.rip, x.0.orig_rax), (rax as u64, 0x1002, u64::MAX), "{rax}");
        }
    }
}
