//! A trace of several processes at once (`--pid 10,11 --leaks`, `--tree`): a session. Each process is traced by
//! the one-process pipeline (`trace::run_trace`: attach, arm, the tracer loop, detach, its own analysis) on a
//! thread of its own, since ptrace ties a tracee to the thread that attached it and one process's stops must
//! never wait behind another's. With `--tree`, children that start during the trace are found by polling /proc
//! (as py-spy's `--subprocesses` does, every 100 ms) and join with the time left. Each process's report is kept;
//! at the end the session writes a table of processes ranked by growth rate, then each process's report under
//! its header (in JSON, a `process` line and `pid` on every line).
//!
//! The pipeline, top to bottom: create the session's files; start a member per process; follow the tree until the
//! trace ends; wait for every member; write the table and the reports, then the files (`session_files`).

use crate::app::session_report::{Row, write_session};
use crate::app::trace::{Output, Start, check_target, open_mem, run_trace, syscall_site};
use crate::cli::TraceArgs;
use crate::live::selection::{self, Chosen, PARTIAL, Selection};
use crate::model::event::End;
use crate::os::{Tid, signals};
use anyhow::{Result, anyhow};
use std::collections::HashSet;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often `--tree` looks for new children (py-spy's `--subprocesses` period).
const TREE_POLL: Duration = Duration::from_millis(100);

/// How many looks a new process that cannot be traced yet (no libc mapped: it is starting) gets.
const RETRIES: u32 = 20;

/// How many times a trace that failed after attaching (the process changed its code meanwhile) is started again.
const RUN_RETRIES: u32 = 3;

/// Bytes written by one member, kept for the session's output.
#[derive(Clone, Default)]
pub struct Buffer(Arc<Mutex<Vec<u8>>>);

impl Buffer {
    pub(crate) fn take(&self) -> Vec<u8> {
        self.0.lock().map(|mut b| std::mem::take(&mut *b)).unwrap_or_default()
    }
}

impl Write for Buffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().map_err(|_| std::io::Error::other("a writer of this buffer panicked"))?.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The session's stdout, shared by its members' event streams.
pub type Out = Arc<Mutex<Box<dyn Write + Send>>>;

/// One process's events, written to the session's shared output a batch at a time (the analysis flushes after
/// each batch), so that one process's event and its stack are never split by another's: in JSON each line gets
/// the process's `pid`, in text each line starts with `[pid N] `, as strace -f marks its lines.
pub struct Stream {
    pid: Tid,
    json: bool,
    shared: Out,
    batch: Vec<u8>,
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.batch.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let batch = std::mem::take(&mut self.batch);
        let mut out = self.shared.lock().map_err(|_| std::io::Error::other("a writer of the output panicked"))?;
        if self.json {
            crate::report::json::with_pid(&batch, self.pid, &mut *out)?;
        } else {
            for line in batch.split_inclusive(|&b| b == b'\n') {
                write!(out, "[pid {}] ", self.pid)?;
                out.write_all(line)?;
            }
        }
        out.flush()
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if !self.batch.is_empty() {
            let _ = self.flush();
        }
    }
}

/// What one process of a session writes: its report (stdout's part), its summary and notes (stderr's part), and
/// its row of the table of processes.
#[derive(Clone, Default)]
pub struct Member {
    pub report: Buffer,
    pub err: Buffer,
    pub row: Arc<Mutex<Option<Row>>>,
    /// What its report gives the session's `--folded`, `--flamegraph`, `--pprof` and `--fail-over`.
    pub profile: Arc<Mutex<Option<crate::app::session_files::Profile>>>,
    /// Its part of the session's recording (`--record`), while it is traced.
    pub part: Option<std::path::PathBuf>,
    /// Where its events go (the session's stdout or `-o FILE`, shared), and whose they are; with `--leaks`, only
    /// with `-o`.
    pub events: Option<(Tid, Out)>,
}

impl Member {
    /// Its event writer, when its events are streamed.
    pub fn stream(&self, json: bool) -> Option<Stream> {
        self.events.clone().map(|(pid, shared)| Stream { pid, json, shared, batch: Vec::new() })
    }
}

/// What every process of the session is traced with.
struct Session<'a> {
    args: &'a TraceArgs,
    out: &'a Output,
    numbers: HashSet<u64>,
    asked: &'a HashSet<u64>,
    deadline: Option<Instant>,
    start: Instant,
    /// Where the members' events go (stdout or `-o FILE`, shared).
    events: Out,
}

/// One process of the session: who, its member's output, and its trace's thread.
struct Traced {
    who: Chosen,
    member: Member,
    thread: std::thread::JoinHandle<Result<End>>,
    /// Seconds after the session's start that its trace began (0 for the processes named).
    joined: f64,
}

/// Traces the processes of `chosen` together (and with `--tree`, their children as they start).
pub fn trace(
    args: &TraceArgs,
    out: &Output,
    chosen: Selection,
    numbers: HashSet<u64>,
    asked: &HashSet<u64>,
) -> Result<i32> {
    let files = crate::app::session_files::Files::create(out)?;
    let start = Instant::now();
    let deadline = out.duration.map(|d| start + d);
    let events: Out = Arc::new(Mutex::new(crate::app::outputs::event_writer(out.path.as_deref(), false)?));
    let session = Session { args, out, numbers, asked, deadline, start, events };
    let mut status = chosen.status();
    let mut members: Vec<Traced> = Vec::new();
    for who in chosen.processes {
        let named = args.select.pid.contains(&who.pid);
        match begin(&session, who, 0.0) {
            Ok(t) => members.push(t),
            // A descendant that cannot be traced yet (starting, a vfork child) is tried again by `follow_tree`.
            Err(_) if !named => {}
            Err(e) => {
                say(format_args!("{e:#}"));
                status = PARTIAL;
            }
        }
    }
    if members.is_empty() {
        return Err(anyhow!("no process could be traced"));
    }
    let mut done = Vec::new();
    // A panic while following the tree (a parser fed by a new process) must not exit with the others attached:
    // every member is asked to end, and joined (each detaches as after any fault).
    let followed = match args.select.tree {
        true => {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| follow_tree(&session, &mut members, &mut done)))
        }
        false => Ok(()),
    };
    if followed.is_err() {
        signals::fault();
    }
    for t in members {
        let end = t.thread.join().unwrap_or_else(|_| Err(anyhow!("internal error: the tracer thread panicked")));
        done.push((t.who, t.member, end, t.joined));
    }
    if followed.is_err() {
        let what = crate::app::crash::take().unwrap_or_else(|| "a panic".into());
        return Err(anyhow!("internal error following the tree: {what}; every process was detached"));
    }
    if done.iter().all(|(_, _, end, _)| end.is_err()) {
        let first = done.into_iter().find_map(|(_, _, end, _)| end.err());
        return Err(first.unwrap_or_else(|| anyhow!("no process could be traced")));
    }
    if done.iter().any(|(_, _, end, _)| end.is_err()) {
        status = PARTIAL;
    }
    write_session(out, &mut done, &session.events)?;
    say_own_usage(done.len(), start.elapsed().as_secs_f64());
    files.write(out, &done, u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX))?;
    Ok(status)
}

/// syscatch's own CPU time and peak memory over the session, in all and by process.
fn say_own_usage(processes: usize, secs: f64) {
    use crate::model::proctree::{parse_cpu_ticks, parse_status_kb};
    let cpu = crate::os::procfs::read_stat(std::process::id() as Tid).ok().and_then(|s| parse_cpu_ticks(&s));
    let hwm = crate::os::procfs::read_status(std::process::id() as Tid).ok().and_then(|s| parse_status_kb(&s, "VmHWM"));
    let (Some((user, system)), Some(hwm), n) = (cpu, hwm, processes.max(1) as f64) else { return };
    // /proc counts CPU time in USER_HZ ticks, 100 a second on Linux whatever the kernel's HZ.
    let cpu_s = (user + system) as f64 / 100.0;
    say(format_args!(
        "{processes} processes traced for {secs:.1}s; syscatch's own CPU time {cpu_s:.2}s ({:.2}s a process, {:.1}% of \
         one CPU), its peak RSS {:.1} MiB ({:.1} MiB a process)",
        cpu_s / n,
        cpu_s / secs.max(1e-3) * 100.0,
        hwm as f64 / 1024.0,
        hwm as f64 / 1024.0 / n
    ));
}

/// Checks one process, makes its plan and starts its trace on a thread of its own.
fn begin(session: &Session, who: Chosen, joined: f64) -> Result<Traced> {
    let Session { args, out, numbers, asked, deadline, events, .. } = session;
    let (out, deadline) = (*out, *deadline);
    let pid = who.pid;
    check_target(pid)?;
    // A vfork child before its exec runs in its parent's memory: what we would plant, we would plant there. Only a
    // process not exec'd since its fork can be one, and such a process is taken only when the kernel says it has
    // memory of its own.
    let stat = crate::os::procfs::read_stat(pid).ok().and_then(|t| crate::model::proctree::parse_stat(&t));
    if let Some(p) = stat.filter(|p| p.forked && p.ppid > 0)
        && crate::os::ptrace::compare_vm(pid, p.ppid) != Some(false)
    {
        return Err(anyhow!(
            "process {pid} has not exec'd since its fork and may run in its parent's memory (a vfork child)"
        ));
    }
    if deadline_near(deadline) {
        return Err(anyhow!("process {pid} started as the trace ended"));
    }
    let mem = open_mem(pid)?;
    let site = syscall_site(pid, &mem)?;
    drop(mem);
    let mut plan = match out.report {
        true => crate::app::plans::leak_plan(pid, numbers.clone(), asked, site, !args.no_fast)?,
        false => crate::app::plans::trace_plan(pid, numbers.clone(), site, !args.no_fast, args.only_syscall_wrapper)?,
    };
    if args.samples_allocations() {
        crate::app::plans::add_allocators(pid, &mut plan, args.malloc_every)?;
    }
    let streamed = crate::app::outputs::render_events(out);
    let part = out.record.as_deref().map(|f| crate::app::session_files::part_path(f, pid, joined));
    let member = Member { events: streamed.then(|| (pid, events.clone())), part: part.clone(), ..Member::default() };
    let mut o = out.clone();
    o.record = part;
    o.member = Some(member.clone());
    o.label = format!("pid {pid}");
    // The time left, for a process that joins late.
    o.duration = deadline.map(|d| d.saturating_duration_since(Instant::now()));
    let thread = std::thread::Builder::new()
        .name(format!("trace {pid}"))
        .spawn(move || run_trace(&o, plan, Start::Attach(pid)))
        .map_err(|e| anyhow!("cannot start the tracer thread of process {pid}: {e}"))?;
    Ok(Traced { who, member, thread, joined })
}

/// Whether the trace's deadline is less than a look away: a process found then is not worth stopping.
fn deadline_near(deadline: Option<Instant>) -> bool {
    deadline.is_some_and(|d| Instant::now() + TREE_POLL >= d)
}

/// One line on stderr; a closed stderr is not a reason to stop (a panic here would exit with processes attached).
fn say(line: std::fmt::Arguments) {
    let _ = writeln!(std::io::stderr(), "syscatch: {line}");
}

/// Until the trace ends (its duration, a stop signal, every member done), the descendants of the traced
/// processes that start meanwhile join it. A process caught between fork and exec (multiprocessing's spawn) ends
/// its trace at the exec: it is traced again, as the program it became; one caught before its libc is mapped is
/// tried again at the next look, for a while.
fn follow_tree(session: &Session, members: &mut Vec<Traced>, finished: &mut Vec<Done>) {
    let Session { args, deadline, start, .. } = session;
    let mut seen: HashSet<Tid> = members.iter().map(|t| t.who.pid).collect();
    let mut tries: std::collections::HashMap<Tid, u32> = Default::default();
    // Traces that failed after attaching, by process: each retry stops the process's threads again.
    let mut runs: std::collections::HashMap<Tid, u32> = Default::default();
    loop {
        std::thread::sleep(TREE_POLL);
        let over = deadline.is_some_and(|d| Instant::now() + TREE_POLL >= d);
        if over || signals::stop_requested() != 0 || signals::faulted() {
            return;
        }
        let mut again = Vec::new();
        let mut i = 0;
        while i < members.len() {
            if !members[i].thread.is_finished() {
                i += 1;
                continue;
            }
            let t = members.swap_remove(i);
            let end = t.thread.join().unwrap_or_else(|_| Err(anyhow!("internal error: the tracer thread panicked")));
            let pid = t.who.pid;
            let alive = crate::live::process::check_process(pid, crate::live::process::Ids::Process).is_ok();
            let tried = runs.get(&pid).copied().unwrap_or(0);
            // A process traced again has no part in the recording from the trace that ended.
            let drop_part = || t.member.part.as_ref().map(std::fs::remove_file);
            match end {
                Ok(End::Exec) if alive => {
                    drop_part();
                    say(format_args!(
                        "process {pid} exec'd: traced again as its new program (its calls before the exec are not in \
                         the report)"
                    ));
                    again.push(pid);
                }
                // A trace that failed to start on a process that is starting itself (a library patching a
                // function between the plan and the arming): tried again with a new plan, a few times.
                Err(e) if alive && t.joined > 0.0 && tried < RUN_RETRIES => {
                    runs.insert(pid, tried + 1);
                    drop_part();
                    say(format_args!("process {pid}: trying again: {e:#}"));
                    again.push(pid);
                }
                end => finished.push((t.who, t.member, end, t.joined)),
            }
        }
        // The processes named stay roots when their own trace has ended or failed (a supervisor without libc).
        let named = args.select.pid.iter().copied().filter(|&p| crate::os::procfs::read_stat(p).is_ok());
        let roots: Vec<Tid> = members.iter().map(|t| t.who.pid).chain(again.iter().copied()).chain(named).collect();
        let table = selection::read_table();
        let born = crate::model::proctree::descendants(&table, &roots);
        tries.retain(|pid, _| born.contains(pid) || again.contains(pid));
        for pid in again.iter().copied().chain(born) {
            let first_look = seen.insert(pid);
            let traced = members.iter().any(|t| t.who.pid == pid);
            if traced || !(first_look || again.contains(&pid) || tries.contains_key(&pid)) {
                continue;
            }
            let Some(p) = table.iter().find(|p| p.pid == pid) else { continue };
            if crate::model::proctree::skip_reason(p).is_some() || selection::ours(pid) {
                continue;
            }
            // Forked and not exec'd yet: most such children exec at once (multiprocessing's spawn, a shell); one
            // still so at the next look is a pre-forked worker, traced as it is.
            if p.forked && first_look {
                tries.insert(pid, 0);
                continue;
            }
            if members.len() >= args.select.max_processes {
                say(format_args!(
                    "process {pid} ({}) started but is not traced: --max-processes {} reached",
                    p.name, args.select.max_processes
                ));
                continue;
            }
            let joined = start.elapsed().as_secs_f64();
            match begin(session, selection::describe(pid), joined) {
                Ok(t) => {
                    say(format_args!("process {pid} ({}) started at {joined:.1}s: traced", t.who.command));
                    members.push(t);
                }
                Err(e) => {
                    // Not yet exec'd, or its libc not mapped yet: the next look tries again, for a while.
                    let n = tries.entry(pid).or_insert(0);
                    *n += 1;
                    if *n >= RETRIES {
                        tries.remove(&pid);
                        say(format_args!("process {pid} started at {joined:.1}s and is not traced: {e:#}"));
                    }
                }
            }
        }
        if members.is_empty() && tries.is_empty() {
            return;
        }
    }
}

/// A process whose trace is over: who, what it wrote, how its trace ended, when it joined (s).
pub(crate) type Done = (Chosen, Member, Result<End>, f64);
