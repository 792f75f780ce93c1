//! Page-fault sampling with `perf_event_open`: a software event per thread that, every `period` page faults the
//! thread takes in user mode, sends it a SIGTRAP (`sigtrap`, Linux 5.13+) whose siginfo carries the faulting
//! address (`si_addr`, from `PERF_SAMPLE_ADDR`), `si_code` TRAP_PERF and our cookie in `si_perf_data`. Under ptrace
//! that signal is a signal-delivery-stop: the tracer reads the thread as at a breakpoint and suppresses it.

use crate::model::Tid;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};

/// `si_code` of a signal sent by a perf event's `sigtrap`.
pub const TRAP_PERF: i32 = 6;

/// `struct perf_event_attr` up to `sig_data` (PERF_ATTR_SIZE_VER7, 128 bytes).
#[repr(C)]
#[derive(Default)]
struct Attr {
    kind: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
    config2: u64,
    branch_sample_type: u64,
    sample_regs_user: u64,
    sample_stack_user: u32,
    clockid: i32,
    sample_regs_intr: u64,
    aux_watermark: u32,
    sample_max_stack: u16,
    reserved_2: u16,
    aux_sample_size: u32,
    aux_action: u32,
    sig_data: u64,
}

const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_COUNT_SW_PAGE_FAULTS: u64 = 2;
const PERF_SAMPLE_ADDR: u64 = 1 << 3;
const EXCLUDE_KERNEL: u64 = 1 << 5;
const EXCLUDE_HV: u64 = 1 << 6;
const REMOVE_ON_EXEC: u64 = 1 << 36;
const SIGTRAP: u64 = 1 << 37;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;

/// Opens a page-fault sampler on thread `tid`, counting from now: one SIGTRAP every `period` faults taken in user
/// mode (a fault in a system call copying to the user is the kernel's), none after an exec. Closing the descriptor
/// ends it; a signal already sent stays pending (the tracer or the trap pad takes it).
pub fn fault_sampler(tid: Tid, period: u64, cookie: u64) -> io::Result<OwnedFd> {
    const { assert!(std::mem::size_of::<Attr>() == 128) };
    let attr = Attr {
        kind: PERF_TYPE_SOFTWARE,
        size: std::mem::size_of::<Attr>() as u32,
        config: PERF_COUNT_SW_PAGE_FAULTS,
        sample_period: period.max(1),
        sample_type: PERF_SAMPLE_ADDR,
        flags: EXCLUDE_KERNEL | EXCLUDE_HV | REMOVE_ON_EXEC | SIGTRAP,
        sig_data: cookie,
        ..Attr::default()
    };
    // SAFETY: perf_event_open reads `attr.size` bytes of a live, initialised struct and returns a new descriptor
    // or -1; no memory of ours is kept by the kernel.
    let fd = unsafe {
        libc::syscall(libc::SYS_perf_event_open, &attr as *const Attr, tid, -1i32, -1i32, PERF_FLAG_FD_CLOEXEC)
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor to us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// The faults a sampler counted since it was opened.
pub fn count(fd: &OwnedFd) -> io::Result<u64> {
    use std::os::fd::AsRawFd;
    let mut v: u64 = 0;
    // SAFETY: reads at most 8 bytes into a live local u64; the descriptor is ours.
    let n = unsafe { libc::read(fd.as_raw_fd(), &mut v as *mut u64 as *mut libc::c_void, 8) };
    match n {
        8 => Ok(v),
        n if n < 0 => Err(io::Error::last_os_error()),
        _ => Err(io::ErrorKind::UnexpectedEof.into()),
    }
}

/// Sets a sampler's period (`PERF_EVENT_IOC_PERIOD`).
pub fn set_period(fd: &OwnedFd, period: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    const PERF_EVENT_IOC_PERIOD: libc::c_ulong = 0x4008_2404;
    let p = period.max(1);
    // SAFETY: the ioctl reads one u64 from a live local; the descriptor is ours.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), PERF_EVENT_IOC_PERIOD, &p as *const u64) };
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// The siginfo of a signal-delivery-stop, as far as a perf sample's needs: its code, address and `si_perf_data`.
pub fn sample_info(tid: Tid) -> Result<(i32, u64, u64), nix::errno::Errno> {
    let info = crate::os::ptrace::siginfo(tid)?;
    // On x86_64 the siginfo's `_sigfault` union starts at byte 16: `si_addr`, then `_perf._data` at byte 24.
    // SAFETY: siginfo_t is 128 bytes of plain data; bytes 16..32 are inside it.
    let words: [u64; 4] = unsafe { std::ptr::read_unaligned(&info as *const libc::siginfo_t as *const [u64; 4]) };
    Ok((info.si_code, words[2], words[3]))
}
