//! A watch's triggered capture: the `--leaks` trace of one process for `--capture`, run as a syscatch process of
//! its own, so that the watch goes on sampling meanwhile, a capture's end never waits on the watch, and a watch
//! that is killed leaves its captures to finish and write their files. Each capture writes, under `--out DIR`,
//! `syscatch-PID-STAMP` (the UTC time it started) with `.txt` (the report), `.html`, `.rec` (the recording,
//! written as it goes), `.pb.gz` (pprof) and, once it has ended, `.jsonl` (the report as JSON Lines, from the
//! recording) and `.log` (what it said on stderr).

use crate::live::selection::Chosen;
use crate::model::duration::utc_stamp;
use anyhow::{Context, Result};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

/// When and how to capture.
pub struct Triggers {
    /// Bytes per minute the lower end of a process's rate must reach.
    pub rate: Option<f64>,
    /// The time to the limit under which to capture.
    pub oom: Option<Duration>,
    pub capture: Duration,
    pub out: PathBuf,
    pub cooldown: Duration,
}

impl Triggers {
    /// Why a process with this rate interval (bytes/s) and time to its limit should be captured now, if it should.
    pub fn fires(&self, low: f64, rate: f64, to_limit: Option<f64>) -> Option<String> {
        let mib = |b: f64| b / 1048576.0;
        if let Some(r) = self.rate.filter(|&r| low * 60.0 >= r) {
            return Some(format!(
                "growing at {:.1} MiB/min (at least {:.1}), over the trigger of {:.1} MiB/min",
                mib(rate * 60.0),
                mib(low * 60.0),
                mib(r)
            ));
        }
        let oom = self.oom?;
        let left = to_limit.filter(|&s| low > 0.0 && s <= oom.as_secs_f64())?;
        Some(format!("at its rate it meets its limit in {left:.0}s, within the trigger of {}s", oom.as_secs()))
    }
}

/// `--out DIR` can take the capture's files: refused before the watch starts if not.
pub fn check_out(dir: &Path) -> Result<()> {
    let probe = dir.join(format!(".syscatch-{}", std::process::id()));
    std::fs::write(&probe, b"").map_err(|e| {
        crate::app::trace::usage(format!(
            "cannot write the captures into --out {}: {e} (name a writable directory)",
            dir.display()
        ))
    })?;
    let _ = std::fs::remove_file(probe);
    Ok(())
}

/// A capture running or done.
pub struct Capture {
    pub pid: i32,
    pub command: String,
    pub reason: String,
    /// Seconds into the watch when it started.
    pub started: f64,
    stem: PathBuf,
    child: Child,
    began: Instant,
    interrupted: bool,
}

impl Capture {
    /// Starts the trace of `who` now.
    pub fn start(who: &Chosen, reason: String, t: &Triggers, started: f64) -> Result<Capture> {
        let secs = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let stem = t.out.join(format!("syscatch-{}-{}", who.pid, utc_stamp(secs)));
        let file = |ext: &str| PathBuf::from(format!("{}.{ext}", stem.display()));
        let exe = std::env::current_exe().context("cannot find syscatch's own executable to capture with")?;
        let txt =
            std::fs::File::create(file("txt")).with_context(|| format!("cannot create {}", file("txt").display()))?;
        let log = std::fs::File::create(file("log"))?;
        let mut cmd = Command::new(exe);
        cmd.args(["--pid", &who.pid.to_string(), "--leaks", "--for"])
            .arg(format!("{}ms", t.capture.as_millis()))
            .arg("--record")
            .arg(file("rec"))
            .arg("--html")
            .arg(file("html"))
            .arg("--pprof")
            .arg(file("pb.gz"))
            .stdin(Stdio::null())
            .stdout(txt)
            .stderr(log);
        // A group of its own: a Ctrl-C on the terminal reaches the watch, which ends the capture with one SIGINT.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let child = cmd.spawn().context("cannot start the capture")?;
        Ok(Capture {
            pid: who.pid,
            command: who.command.clone(),
            reason,
            started,
            stem,
            child,
            began: Instant::now(),
            interrupted: false,
        })
    }

    fn file(&self, ext: &str) -> PathBuf {
        PathBuf::from(format!("{}.{ext}", self.stem.display()))
    }

    /// The `capture` line that says it started.
    pub fn started_json(&self) -> Value {
        json!({"state": "started", "time": self.started, "pid": self.pid, "command": self.command,
               "reason": self.reason, "files": self.stem.display().to_string()})
    }

    /// Ends it early (its files are still written).
    pub fn interrupt(&mut self) {
        if !self.interrupted {
            let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
            self.interrupted = true;
        }
    }

    /// Once it has ended: the JSON report made from its recording, and the `capture` line that says so.
    pub fn try_finish(&mut self) -> Option<Value> {
        let status = self.child.try_wait().ok()??;
        let json = self.file("jsonl");
        let made = std::fs::File::create(&json).ok().and_then(|out| {
            let exe = std::env::current_exe().ok()?;
            let mut cmd = Command::new(exe);
            cmd.arg("report").arg(self.file("rec")).args(["--leaks", "--json"]);
            cmd.stdin(Stdio::null()).stdout(out).stderr(Stdio::null()).status().ok()
        });
        let mut files: Vec<String> = Vec::new();
        for ext in ["txt", "html", "rec", "pb.gz", "jsonl", "log"] {
            let f = self.file(ext);
            if f.metadata().is_ok_and(|m| m.len() > 0) {
                files.push(f.display().to_string());
            }
        }
        Some(json!({
            "state": "written", "pid": self.pid, "command": self.command, "started": self.started,
            "seconds": (self.began.elapsed().as_secs_f64() * 10.0).round() / 10.0,
            "exit_status": status.code(), "interrupted": self.interrupted,
            "json_report": made.is_some_and(|s| s.success()), "files": files,
        }))
    }

    /// Waits for it to end (at most `limit`; then it is killed and its files are what it wrote so far).
    pub fn finish_within(&mut self, limit: Duration) -> Option<Value> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(v) = self.try_finish() {
                return Some(v);
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                return self.try_finish();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
