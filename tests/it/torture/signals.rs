//! Torture: signal storms, job control and the target killed while traced: every signal delivered once.

use super::*;

#[test]
fn signal_storm_and_job_control_while_traced() {
    let mut rng = Rng::new("signal_storm_and_job_control_while_traced");
    for tool in TOOLS {
        let ctx = format!("signals {}", tool.name);
        let mut t = torture_target(&[]);
        cmd(&mut t, "start 3");
        let sc = attached(tool, &t);
        let mut sent = 0u64;
        let total = 1500 + rng.below(500);
        let stop_at = rng.below(total);
        for i in 0..total {
            if i == stop_at {
                stop_and_continue(&mut t, &ctx);
            }
            if sigqueue(t.pid, libc::SIGRTMIN()) {
                sent += 1;
            }
        }
        assert!(sent > total / 2, "{ctx}: the signal queue was full: {sent} of {total} queued");
        wait_handled(&mut t, sent, &ctx);
        stop_and_continue(&mut t, &ctx);
        // Stopped when syscatch detaches: it stays stopped after, until SIGCONT.
        // SAFETY: plain kill(2) of our own child.
        unsafe { libc::kill(t.pid, libc::SIGSTOP) };
        assert!(poll(|| all_stopped(t.pid)), "{ctx}");
        let (values, err) = stop_with(sc, libc::SIGINT, &ctx);
        if tool.events {
            let fwd = summary_data(&values)["signals_forwarded"].as_u64().unwrap_or(0);
            assert!(fwd >= sent, "{ctx}: {fwd} signals forwarded, {sent} sent");
        }
        t.send("signals");
        for _ in 0..2000 {
            assert!(
                thread_states_of(t.pid).iter().all(|&c| c == 'T'),
                "{ctx}: stopped after detach: {:?}",
                thread_states_of(t.pid)
            );
            assert_eq!(t.out.try_next(), None, "{ctx}: a stopped target answered");
        }
        unsafe { libc::kill(t.pid, libc::SIGCONT) };
        t.out.until(|l| l == "ok");
        assert_unharmed(t.pid, &err, &ctx);
        wait_handled(&mut t, sent, &ctx);
        finish(t, &ctx);
    }
}

#[test]
fn target_killed_mid_trace_is_reported() {
    let mut rng = Rng::new("target_killed_mid_trace_is_reported");
    for tool in TOOLS {
        for round in 0..rounds(3) {
            let ctx = format!("SIGKILL {} round {round}", tool.name);
            let mut t = torture_target(&[]);
            cmd(&mut t, "start 3");
            let mut sc = attached(tool, &t);
            // Churn only once attached: churn during attach hits the bug of thread_churn_during_attach.
            cmd(&mut t, "churn 2");
            if tool.events {
                for _ in 0..rng.below(40) {
                    sc.out.next();
                }
            }
            t.child.kill().expect("SIGKILL the target");
            let (status, out, err) = sc.finish();
            assert_no_panic(&err, &ctx);
            assert!(status.success(), "{ctx}: syscatch exits 0: {status:?} {err:#?}");
            if tool.events {
                let values = json_lines(&out);
                let s = summary_data(&values);
                assert_eq!((&s["end"], &s["end_value"]), (&"target_killed".into(), &9.into()), "{ctx}: {s}");
                check_events(&values, &ctx);
                assert!(err.iter().any(|l| l.contains("killed by signal 9")), "{ctx}: said on stderr: {err:#?}");
            }
            assert_eq!(t.wait().signal(), Some(libc::SIGKILL), "{ctx}");
        }
    }
}

/// A script's background job inherits SIGINT ignored. syscatch takes SIGINT (and SIGTERM) itself from its first
/// moment, so a `kill -INT` that comes while it is still getting ready is not lost (it used to be ignored, and the
/// trace ran on until the end): here it is held up opening its recording, a FIFO nobody reads yet, when the signal
/// comes. It ends without having touched the target.
#[test]
fn a_stop_request_while_getting_ready_is_kept_even_with_sigint_inherited_ignored() {
    use std::os::unix::process::CommandExt;
    require_ptrace();
    let mut t = Target::start(&testprog("target"), &[]);
    let fifo = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("rec-{}.fifo", t.pid));
    let _ = std::fs::remove_file(&fifo);
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo on a NUL-terminated path in our own temporary directory.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let pid = t.pid.to_string();
    let mut cmd = syscatch_cmd();
    cmd.args(["--syscall", "mmap", "--pid", pid.as_str(), "--record", fifo.to_str().unwrap()]);
    // SAFETY: only signal(2) between fork and exec, which is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_IGN);
            Ok(())
        })
    };
    let sc = Syscatch::start_cmd(&mut cmd);
    let me = sc.child.id() as i32;
    // Blocked opening the FIFO.
    assert!(poll(|| std::fs::read_to_string(format!("/proc/{me}/wchan"))
        .is_ok_and(|w| w.contains("fifo") || w == "wait_for_partner")));
    sc.signal(libc::SIGINT);
    // Now a reader comes: syscatch goes on getting ready, and must then remember that it was asked to stop.
    let path = fifo.clone();
    let reader = std::thread::spawn(move || std::io::copy(&mut std::fs::File::open(path)?, &mut std::io::sink()));
    let (status, _, err) = sc.finish_within(std::time::Duration::from_secs(20), t.pid);
    assert!(reader.join().unwrap().is_ok());
    assert!(err.iter().any(|l| l.contains("before attaching")), "{status:?} {err:#?}");
    assert_eq!(tracer_pid(t.pid), Some(0));
    assert_text_pristine(t.pid, "after a stop before attaching");
    t.send("exit 0");
    assert_eq!(t.wait().code(), Some(0));
    let _ = std::fs::remove_file(&fifo);
}
