//! The process plumbing of the guardian (see `crate::live::guardian`): starting it detached from syscatch (its own
//! session, not our child, the stop signals ignored, the target's `/proc/PID/mem` handed over), and,
//! inside it, waiting for input from syscatch or the target's end.

use super::Tid;
use super::mem::ProcMem;
use std::ffi::CString;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// A started guardian: its input pipe (syscatch's end, close-on-exec) and its output.
pub struct Started {
    pub input: File,
    pub output: File,
}

/// Where the guardian finds the target's memory.
const CHILD_MEM_FD: i32 = 3;

/// Re-executes the running syscatch binary as `syscatch <args> 3` in a process that outlives us: a new session
/// (Ctrl-C and a terminal hangup reach syscatch's process group, not it), with the target's `/proc/PID/mem` as fd 3
/// (opened here, by the tracer: the access check is ours). The guardian then ignores the stop signals and forks
/// once more ([`leave_parent`]), so it is not our child and the tracer's `waitpid(-1, __WALL)` never reaps it.
///
/// Started with posix_spawn, which shares our memory until the exec (vfork), not with fork: a fork would
/// write-protect every page of syscatch, and each first write to one afterwards would fault, in the tracer, while
/// a thread of the target waits (the first events, and a burst's first pass through the event queue).
pub fn spawn(args: &[String], mem: &ProcMem) -> io::Result<Started> {
    let (to_child, input) = pipe()?;
    let (output, from_child) = pipe()?;
    // Copies above the numbers the child's dup2s write to, so no source is overwritten before it is copied.
    let high = |fd: RawFd| -> io::Result<OwnedFd> {
        // SAFETY: F_DUPFD_CLOEXEC on an open fd returns a new fd (or -1), which we own.
        let d = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 10) };
        if d < 0 { Err(io::Error::last_os_error()) } else { Ok(unsafe { OwnedFd::from_raw_fd(d) }) }
    };
    let (r, w, m) = (high(to_child.as_raw_fd())?, high(from_child.as_raw_fd())?, high(mem.as_raw_fd())?);
    drop((to_child, from_child));
    let mut argv: Vec<CString> = vec![c"syscatch".to_owned()];
    for a in args.iter().map(String::as_str).chain([CHILD_MEM_FD.to_string().as_str()]) {
        argv.push(CString::new(a).map_err(|_| io::Error::other("an argument holds a NUL byte"))?);
    }
    let pid = posix_spawn(
        c"/proc/self/exe",
        &argv,
        &[(r.as_raw_fd(), 0), (w.as_raw_fd(), 1), (m.as_raw_fd(), CHILD_MEM_FD)],
    )?;
    drop((r, w, m));
    // The spawned process forks the guardian and exits at once.
    let mut status = 0;
    // SAFETY: waits for our own child, writing its status into a local.
    while unsafe { libc::waitpid(pid, &mut status, 0) } < 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    Ok(Started { input: File::from(input), output: File::from(output) })
}

/// A pipe, both ends close-on-exec: (read end, write end).
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two fds into the array on success.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both fds were just created and are owned by nothing else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// posix_spawn of `path` with `argv`, our environment, a new session, and `dups` (from, to) applied in order.
fn posix_spawn(path: &std::ffi::CStr, argv: &[CString], dups: &[(RawFd, RawFd)]) -> io::Result<libc::pid_t> {
    unsafe extern "C" {
        static mut environ: *const *mut libc::c_char;
    }
    let mut ptrs: Vec<*mut libc::c_char> = argv.iter().map(|a| a.as_ptr().cast_mut()).collect();
    ptrs.push(std::ptr::null_mut());
    let mut pid = 0;
    // SAFETY: the attribute and file-action objects are initialised before use and destroyed after, on every
    // path; `ptrs` is a NULL-terminated array of pointers into `argv`'s strings, alive for the call; `environ` is
    // the process's environment, read (not changed) by posix_spawn while no other thread of ours changes it (std's
    // env functions would, and syscatch calls none once threads run).
    unsafe {
        let mut attr: libc::posix_spawnattr_t = std::mem::zeroed();
        let mut acts: libc::posix_spawn_file_actions_t = std::mem::zeroed();
        libc::posix_spawnattr_init(&mut attr);
        libc::posix_spawn_file_actions_init(&mut acts);
        // A new session, and no signal blocked (the mask is inherited otherwise).
        let flags = libc::POSIX_SPAWN_SETSID | libc::POSIX_SPAWN_SETSIGMASK as libc::c_short;
        let mut rc = libc::posix_spawnattr_setflags(&mut attr, flags);
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        if rc == 0 {
            rc = libc::posix_spawnattr_setsigmask(&mut attr, &none);
        }
        for &(from, to) in dups {
            if rc == 0 {
                rc = libc::posix_spawn_file_actions_adddup2(&mut acts, from, to);
            }
        }
        if rc == 0 {
            rc = libc::posix_spawn(&mut pid, path.as_ptr(), &acts, &attr, ptrs.as_ptr(), environ);
        }
        libc::posix_spawn_file_actions_destroy(&mut acts);
        libc::posix_spawnattr_destroy(&mut attr);
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
    }
    Ok(pid)
}

/// Whether process `pid` has exited (its pidfd is readable, or it is not there at all).
pub fn exited(pid: Tid) -> bool {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
    }
    // SAFETY: a non-negative return is a new fd that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    let mut p = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd, no wait.
    unsafe { libc::poll(&mut p, 1, 0) == 1 }
}

/// Inside the guardian, first thing: ignores the signals that stop syscatch (a `kill` of syscatch's process group
/// must not take the guardian too) and forks once more, the parent (syscatch's child, which syscatch waits for)
/// exiting at once, so the guardian is nobody's traced-for child.
pub fn leave_parent() -> io::Result<()> {
    // SAFETY: signal() with SIG_IGN and fork() in a process that has started no thread (the guardian's main
    // calls this before anything else); the parent only calls _exit.
    unsafe {
        for sig in [libc::SIGINT, libc::SIGHUP, libc::SIGTERM, libc::SIGQUIT] {
            libc::signal(sig, libc::SIG_IGN);
        }
        match libc::fork() {
            -1 => Err(io::Error::last_os_error()),
            0 => Ok(()),
            _ => libc::_exit(0),
        }
    }
}

/// Inside the guardian: the target's memory, inherited as `fd` from syscatch. It must be the `/proc/PID/mem`
/// of `pid`, so a guardian started by hand with a wrong number fails cleanly instead of writing elsewhere.
pub fn inherited_mem(pid: Tid, fd: i32) -> io::Result<ProcMem> {
    let link = std::fs::read_link(format!("/proc/self/fd/{fd}"))?;
    if fd < 3 || link != std::path::Path::new(&format!("/proc/{pid}/mem")) {
        return Err(io::Error::other(format!("fd {fd} is {}, not process {pid}'s memory", link.display())));
    }
    // SAFETY: the fd is open (its link was read) and nothing else in this process owns it.
    let file = unsafe { File::from_raw_fd(fd) };
    Ok(ProcMem::from_file(file, pid))
}

/// What woke the guardian.
pub enum Wake {
    /// Bytes from syscatch (0: end of file, syscatch is gone).
    Input(usize),
    /// The target has exited.
    TargetGone,
}

/// Waits on syscatch's pipe (stdin) and the target's pidfd together.
pub struct Waiter {
    input: File,
    pidfd: Option<OwnedFd>,
}

impl Waiter {
    pub fn new(pid: Tid) -> Waiter {
        // SAFETY: fd 0 is the pipe from syscatch; the guardian owns it from here on.
        let input = unsafe { File::from_raw_fd(0) };
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        // SAFETY: a non-negative return is a new fd that nothing else owns.
        let pidfd = (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as i32) });
        Waiter { input, pidfd }
    }

    /// Blocks until input arrives (read into `buf`) or the target exits.
    pub fn wait(&mut self, buf: &mut [u8]) -> io::Result<Wake> {
        loop {
            let mut fds = [
                libc::pollfd { fd: self.input.as_raw_fd(), events: libc::POLLIN, revents: 0 },
                libc::pollfd {
                    fd: self.pidfd.as_ref().map_or(-1, |f| f.as_raw_fd()),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: `fds` is a valid array of two pollfds for the duration of the call (a negative fd is ignored).
            let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            // Input first: syscatch's last words (done) may come together with the target's end.
            if fds[0].revents != 0 {
                return match self.input.read(buf) {
                    Ok(n) => Ok(Wake::Input(n)),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => Err(e),
                };
            }
            if fds[1].revents != 0 {
                return Ok(Wake::TargetGone);
            }
        }
    }
}
