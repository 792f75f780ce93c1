//! The process plumbing of the guardian (see `crate::live::guardian`): starting it detached from syscatch (its own
//! session, not our child, the stop signals ignored, the target's `/proc/PID/mem` handed over), and,
//! inside it, waiting for input from syscatch or the target's end.

use super::Tid;
use super::mem::ProcMem;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{ChildStdin, ChildStdout, Command, Stdio};

/// A started guardian: its input pipe (syscatch's end, close-on-exec) and its first line of output.
pub struct Started {
    pub input: ChildStdin,
    pub output: ChildStdout,
}

/// Re-executes the running syscatch binary as `syscatch <args>` in a process that outlives us: a new session
/// (Ctrl-C and a terminal hangup reach syscatch's process group, not it), SIGINT/SIGHUP/SIGTERM ignored from
/// before its exec, and reparented away from us by a double fork, so the tracer's `waitpid(-1, __WALL)` never
/// reaps it. The target's memory is opened here, by the tracer, and inherited under the same number (`mem_fd`,
/// which the caller passes in `args`): the access check is ours.
pub fn spawn(args: &[String], mem: &ProcMem) -> io::Result<Started> {
    let mem_fd = mem.as_raw_fd();
    let mut cmd = Command::new("/proc/self/exe");
    cmd.args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit());
    // SAFETY: the closure runs in the forked child before exec and calls only async-signal-safe functions
    // (setsid, signal, fcntl, fork, _exit); it touches no memory shared with other threads.
    unsafe {
        cmd.pre_exec(move || {
            libc::setsid();
            for sig in [libc::SIGINT, libc::SIGHUP, libc::SIGTERM, libc::SIGQUIT] {
                libc::signal(sig, libc::SIG_IGN);
            }
            // Kept open across exec (it is close-on-exec like every fd std opens).
            if libc::fcntl(mem_fd, libc::F_SETFD, 0) < 0 {
                return Err(io::Error::last_os_error());
            }
            match libc::fork() {
                -1 => Err(io::Error::last_os_error()),
                0 => Ok(()),
                _ => libc::_exit(0),
            }
        });
    }
    let mut child = cmd.spawn()?;
    let input = child.stdin.take().ok_or_else(|| io::Error::other("no input pipe"))?;
    let output = child.stdout.take().ok_or_else(|| io::Error::other("no output pipe"))?;
    // The intermediate process exits at once; the guardian is its child.
    child.wait()?;
    Ok(Started { input, output })
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
