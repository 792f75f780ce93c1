//! The trace pipeline, written out once: check the target, resolve the probe site, attach, arm, run the
//! event loop, detach; captured events flow to an analysis thread that renders them while the tracer traces.

use crate::analysis::rules::ProcessFacts;
use crate::app::outputs::{self, Ending, finish, open_outputs, render_events};
use crate::app::placement::{cpus_away_from, sit_with_pinned_target};
use crate::app::plans::{leak_plan, trace_plan};
use crate::app::record::{Record, Recorder, Recording};
use crate::app::sink::ChannelSink;
use crate::cli::TraceArgs;
use crate::live::plan::{Plan, Wrapper};
use crate::live::process::{self, Ids};
use crate::live::tracer::{AttachError, Config, FastRequest, Tracer};
use crate::model::event::{End, Summary};
use crate::model::smaps::Span;
use crate::os::{Tid, procfs, ptrace, signals};
use crate::{app::analyze as analysis, live::resolve, model::status, model::syscalls};
use anyhow::{Context, Result, anyhow, bail};
use crossbeam_channel::SendTimeoutError;
use nix::errno::Errno;
use std::collections::HashSet;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use std::time::Instant;

/// A usage error: exit status 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

pub fn usage(msg: impl Into<String>) -> anyhow::Error {
    UsageError(msg.into()).into()
}

/// `--fail-over`: the traced stacks grew faster than allowed (exit status 3, after the whole report).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct GateFailed(pub String);

/// Refuses, before touching it, a pid that is not a live process with user memory (no such pid, a thread id, a
/// zombie, a kernel thread), with one line saying why and what to do.
pub fn check_process(pid: Tid) -> Result<status::Status> {
    Ok(process::check_process(pid, Ids::Process)?)
}

/// [`check_process`], and refuses a process another tracer holds, naming it.
pub fn check_target(pid: Tid) -> Result<status::Status> {
    let st = check_process(pid)?;
    if st.tracer_pid != 0 {
        let tracer =
            procfs::read_status(st.tracer_pid).map(|t| status::parse_status(&t).name).unwrap_or_else(|_| "?".into());
        bail!(
            "process {pid} ({}) is already traced by process {} ({tracer}); only one tracer at a time: detach it first",
            st.name,
            st.tracer_pid
        );
    }
    Ok(st)
}

fn attach_error(pid: Tid, e: AttachError) -> anyhow::Error {
    match e {
        AttachError::Ptrace(Errno::EPERM) => anyhow!(
            "permission denied tracing process {pid}: run as root or with CAP_SYS_PTRACE, or relax \
             /proc/sys/kernel/yama/ptrace_scope (0 allows tracing your own processes)"
        ),
        AttachError::Ptrace(Errno::ESRCH) => anyhow!("process {pid} exited while attaching"),
        AttachError::Ptrace(e) => anyhow!("cannot attach to process {pid}: {}", e.desc()),
        e => anyhow!("cannot trace process {pid}: {e}"),
    }
}

/// Parses `--syscall` names and numbers.
pub fn syscall_numbers(list: &[String]) -> Result<HashSet<u64>> {
    let mut set = HashSet::new();
    for s in list.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
        let nr = syscalls::parse(s).ok_or_else(|| usage(format!("unknown syscall `{s}` (x86_64 names or numbers)")))?;
        set.insert(nr);
    }
    if set.is_empty() {
        return Err(usage("--syscall needs at least one syscall"));
    }
    Ok(set)
}

/// The `syscall()` wrapper of the libc mapped by `pid`.
pub fn syscall_site(pid: Tid, mem: &crate::os::mem::ProcMem) -> Result<Wrapper> {
    let maps = resolve::read_maps(pid)?;
    let Some(libc) = resolve::find_syscall_module(pid, &maps, Some(mem)) else {
        let name = procfs::read_status(pid).map(|s| status::parse_status(&s).name).unwrap_or_default();
        let mods: Vec<String> = crate::model::modules::group_modules(&maps)
            .iter()
            .map(|m| crate::model::modules::file_name(&m.path).to_string())
            .collect();
        bail!(
            "process {pid} ({name}) has no libc mapped and no syscall() in its own symbols (a stripped static \
             binary?); searched: {}",
            if mods.is_empty() { "no file-backed modules".into() } else { mods.join(", ") }
        );
    };
    let module = resolve::read_module(pid, &libc, Some(mem))?;
    let (addr, code) = resolve::wrapper_code(&module, "syscall")?;
    Ok(Wrapper { addr, code })
}

/// What a trace produces, whichever command started it.
#[derive(Clone)]
pub struct Output {
    pub json: bool,
    pub path: Option<PathBuf>,
    pub stack_bytes: usize,
    pub stack_depth: usize,
    pub duration: Option<Duration>,
    /// Leak tracking, sampling smaps this often.
    pub leaks: Option<Duration>,
    pub folded: Option<PathBuf>,
    pub flamegraph: Option<PathBuf>,
    pub pprof: Option<PathBuf>,
    /// `--heap-pprof`: the sampled allocations' heap profile (with `--malloc`).
    pub heap_pprof: Option<PathBuf>,
    /// `--html FILE`: the report as one self-contained page.
    pub html: Option<PathBuf>,
    /// What the report is of (`pid 1234`, the command, the recording), for the page's title.
    pub label: String,
    /// What `folded` and `flamegraph` weigh stacks by.
    pub weight: crate::analysis::leaks::Weight,
    /// `--fail-over`: the most growth on traced stacks allowed, in bytes per minute.
    pub fail_over: Option<f64>,
    /// The part of the trace reported on (seconds since attach: from, and to, or to the end).
    pub window: (f64, Option<f64>),
    /// Report mode (`--leaks`): events go only to `path` (none without it); stdout (stderr with `-- CMD`)
    /// carries the report and the summary.
    pub report: bool,
    /// The findings rules (report mode).
    pub rules: Vec<crate::analysis::rules::Rule>,
    /// `--record FILE`: everything captured, for `syscatch report FILE`.
    pub record: Option<PathBuf>,
    /// How often smaps is sampled when leaks are tracked or a recording is made.
    pub smaps_every: Duration,
    /// `--no-known-stacks`: with `--fast`, every matching call stops, even one whose stack is known.
    pub stop_every_call: bool,
    /// `--faults`: sample one page fault in this many per thread.
    pub faults: Option<u64>,
    /// `--every`: the report's files of the trace so far, written this often.
    pub every: Option<Duration>,
    /// `--metrics ADDR`: the trace's figures for Prometheus, and its pprof profile, served there.
    pub metrics: Option<String>,
    /// One process of a session of several: the trace runs on a thread of its own, and its report is kept for
    /// the session's.
    pub member: Option<crate::app::session::Member>,
}

impl Output {
    fn from_trace(args: &TraceArgs) -> Result<Output> {
        let leaks = args.leaks
            || args.faults
            || args.samples_allocations()
            || args.folded.is_some()
            || args.flamegraph.is_some()
            || args.pprof.is_some()
            || args.html.is_some()
            || args.fail_over.is_some();
        if args.rules.is_some() && !leaks {
            return Err(usage("--rules goes with --leaks (the findings of the leak report)"));
        }
        let rules = if leaks { crate::app::findings::load_rules(args.rules.as_deref())? } else { Vec::new() };
        let files = args.folded.is_some() || args.flamegraph.is_some() || args.pprof.is_some() || args.html.is_some();
        if args.every.is_some() && !files {
            return Err(usage(
                "--every writes the report's files as the trace goes: give --html, --pprof, --folded or --flamegraph",
            ));
        }
        for (given, name) in [(args.every.is_some(), "--every"), (args.metrics.is_some(), "--metrics")] {
            if given && (args.select.tree || args.select.pid.len() > 1) {
                return Err(usage(format!("{name} is of one process's trace: leave out --tree and trace one --pid")));
            }
        }
        if args.metrics.is_some() && !leaks {
            return Err(usage("--metrics serves the leak report's figures: add --leaks"));
        }
        Ok(Output {
            json: args.json,
            path: args.output.clone(),
            stack_bytes: args.stack_bytes,
            stack_depth: args.stack_depth,
            duration: args.duration,
            leaks: leaks.then_some(args.smaps_every),
            folded: args.folded.clone(),
            flamegraph: args.flamegraph.clone(),
            pprof: args.pprof.clone(),
            heap_pprof: args.heap_pprof.clone(),
            html: args.html.clone(),
            label: match args.select.pid.first() {
                Some(pid) => format!("pid {pid}"),
                None => args.cmd.join(" "),
            },
            weight: args.weight,
            fail_over: args.fail_over,
            window: (0.0, None),
            report: leaks,
            rules,
            record: args.record.clone(),
            smaps_every: args.smaps_every,
            stop_every_call: args.no_known_stacks,
            faults: args.faults.then_some(args.fault_every),
            every: args.every,
            metrics: args.metrics.clone(),
            member: None,
        })
    }
}

/// Runs a trace as the command line asks. Returns the exit status.
pub fn trace(args: &TraceArgs) -> Result<i32> {
    // First of all: a stop request while syscatch gets ready (reading modules can take a while) must not be lost.
    // Without this, a syscatch started in the background by a script, which inherits SIGINT ignored, ignored a
    // `kill -INT` that came before attaching and traced on until the end.
    signals::install_stop_handlers();
    let mut numbers = syscall_numbers(&args.syscall)?;
    let asked = numbers.clone();
    let out = Output::from_trace(args)?;
    if out.leaks.is_some() {
        numbers.extend(crate::analysis::leaks::LEAK_SYSCALLS.iter().filter_map(|s| syscalls::parse(s)));
        if out.stack_bytes == 0 {
            return Err(usage("--leaks attributes memory to stacks: it needs --stack-bytes above 0"));
        }
    }
    match (args.select.pid.is_empty(), args.cmd.is_empty()) {
        (false, false) => Err(usage("give either --pid or a command after --, not both")),
        (true, true) => Err(usage("nothing to trace: give --pid N, or a command after --")),
        (false, true) => {
            let chosen = crate::app::choose::choose(&args.select)?;
            let ([one], false) = (chosen.processes.as_slice(), args.select.tree) else {
                return crate::app::session::trace(args, &out, chosen, numbers, &asked);
            };
            let pid = one.pid;
            check_target(pid)?;
            let mem = open_mem(pid)?;
            let site = syscall_site(pid, &mem)?;
            drop(mem);
            let mut plan = if out.report {
                leak_plan(pid, numbers, &asked, site, !args.no_fast)?
            } else {
                trace_plan(pid, numbers, site, !args.no_fast, args.only_syscall_wrapper)?
            };
            if args.samples_allocations() {
                crate::app::plans::add_allocators(pid, &mut plan, args.malloc_every)?;
            }
            run_trace(&out, plan, Start::Attach(pid))?;
            Ok(chosen.status())
        }
        (true, false) => {
            // A stop request while the command starts (its libraries' constructors may block) must end the wait.
            signals::install_handlers(50);
            let pid = spawn_stopped(&args.cmd)?;
            let site = match prepare_spawned(pid) {
                Ok(site) => site,
                Err(e) => {
                    let _ = ptrace::detach(pid, 0);
                    return Err(e);
                }
            };
            let plan = if out.report {
                leak_plan(pid, numbers, &asked, site, !args.no_fast)
            } else {
                trace_plan(pid, numbers, site, !args.no_fast, args.only_syscall_wrapper)
            };
            let plan = plan.and_then(|mut plan| {
                if args.samples_allocations() {
                    crate::app::plans::add_allocators(pid, &mut plan, args.malloc_every)?;
                }
                Ok(plan)
            });
            let plan = match plan {
                Ok(plan) => plan,
                Err(e) => {
                    let _ = ptrace::detach(pid, 0);
                    return Err(e);
                }
            };
            let end = run_trace(&out, plan, Start::Adopt(pid))?;
            // The command is our child: once detached it runs on, and its own status is ours (as strace does),
            // unless --for ended the trace: then, as `timeout` ends the wait, syscatch returns and leaves the
            // command running (never killed: it is the program being looked at).
            let end = match end {
                End::Exited(_) | End::Killed(_) => end,
                End::Duration => {
                    eprintln!(
                        "syscatch: --for ended the trace; {} (pid {pid}) was detached and runs on",
                        args.cmd.first().map(String::as_str).unwrap_or("the command")
                    );
                    end
                }
                _ => crate::os::spawn::wait_exit(pid).map(End::Exited).unwrap_or(end),
            };
            Ok(match end {
                End::Exited(code) => code,
                End::Killed(sig) => 128 + sig,
                _ => 0,
            })
        }
    }
}

/// Opens the target's memory, turning a permission error into the one-line explanation.
pub fn open_mem(pid: Tid) -> Result<crate::os::mem::ProcMem> {
    crate::os::mem::ProcMem::open(pid).map_err(|e| match e.raw_os_error() {
        Some(libc::EACCES) | Some(libc::EPERM) => attach_error(pid, AttachError::Ptrace(Errno::EPERM)),
        _ => anyhow!("cannot open process {pid}'s memory: {e}"),
    })
}

pub enum Start {
    Attach(Tid),
    Adopt(Tid),
}

/// Attach (or adopt), arm, trace, detach; the analysis thread renders as events arrive, then the leak report
/// and the summary.
/// A stop request that came before attaching: said, and nothing to undo.
fn stopped_before_attaching(pid: Tid) -> End {
    let sig = signals::stop_requested();
    eprintln!("syscatch: stopped by signal {sig} before attaching; process {pid} was not touched");
    End::Signal(sig)
}

pub fn run_trace(out: &Output, plan: Plan, start: Start) -> Result<End> {
    let (pid, spawned) = match start {
        Start::Attach(p) => (p, false),
        Start::Adopt(p) => (p, true),
    };
    // Output files are created before attaching, so a bad path is refused with the target untouched instead of
    // losing the report after the trace.
    let (renderer, files) = open_outputs(out, spawned)?;
    // `--every` writes them from the analysis thread too (leaving out syscatch's own pages, known once armed).
    let files = Arc::new(Mutex::new(files));
    let own_ranges: Arc<Mutex<Vec<(u64, u64)>>> = Arc::default();
    // `--metrics`: listening before attaching, so a bad or taken address leaves the target untouched.
    let server = out.metrics.as_deref().map(crate::app::metrics::Server::start).transpose()?;
    if let Some(s) = &server {
        eprintln!(
            "syscatch: serving the trace's figures at http://{}/metrics (every {:.0}s)",
            s.addr,
            outputs::METRICS_EVERY
        );
    }
    let recorder = out.record.as_ref().map(|p| Recorder::create(p, pid, out.stack_bytes)).transpose()?;
    // Bounded in records, and in stack windows by the sink: see [`ChannelSink`].
    let (tx, rx) = crossbeam_channel::bounded(ChannelSink::RECORDS);
    // A recording holds what every report option needs, so it samples smaps and reads the facts as --leaks does.
    let sampling = out.leaks.is_some() || recorder.is_some();
    // The baseline of growth is taken before anything is armed: the first call may come right after. The memory
    // classes before the trace come from the same reading of smaps (with many mappings, each costs the target).
    // It is read beside the search for a Python (30,000 mappings: 21 MB of smaps, 0.1 s).
    let classes = out.report || recorder.is_some();
    let reading_baseline = sampling
        .then(|| {
            std::thread::Builder::new().name("syscatch-sample".into()).spawn(move || {
                let regions = crate::live::memory::read_regions(pid).unwrap_or_default();
                let spans: Vec<Span> = regions.iter().map(Span::of).collect();
                let class = if classes { crate::live::memory::read_class_facts_of(pid, regions, None) } else { None };
                (spans, class.map(|(kb, _, _, heap)| (kb, heap)))
            })
        })
        .transpose()
        .context("cannot start the sampling thread")?;
    // Found before attaching (symbols only; the interpreter's state is read at each capture, so a Python that
    // has not started yet is fine). A Python that cannot be read costs its frames, not the trace.
    let (python, python_error) = match crate::live::python::PythonReader::locate(pid) {
        Ok(p) => (p, None),
        Err(e) => (None, Some(format!("Python frames left out: {e}"))),
    };
    let (baseline, class_before) = match reading_baseline.map(|h| h.join()) {
        Some(Ok((spans, class))) => (Some(spans), class),
        Some(Err(_)) => {
            bail!("internal error reading the memory of process {pid} before attaching; it was not touched")
        }
        None => (None, None),
    };
    let watched = plan.watched.clone();
    let mut source = crate::live::modules::LiveModules::boxed(pid);
    if let Some(rec) = &recorder {
        let depths = plan.depths.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        let fault_every = out.faults.unwrap_or(0);
        rec.write(&Record::Plan { depths, watched: watched.clone(), malloc_every: plan.malloc_every, fault_every });
        source = Box::new(Recording { inner: source, rec: rec.clone() });
    }
    // Time zero until every site is armed (then the tracer's `armed_at`, of events and samples alike).
    let epoch = Instant::now();
    // Samples the regions once every site is armed (the new baseline), then on a timer until the trace ends.
    let armed_sampler = baseline.as_ref().map(|b| crate::live::sampling::Sampler::new(pid, b));
    // (`ended`: set by the tracer when the trace ends; the samples stop there.)
    let traced_ranges = crate::live::sampling::Traced::default();
    let ended = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Stacks made known (unwound before: their calls go to the ring, see `crate::x86::known`), with `--fast`.
    let (known_tx, known_rx) = match plan.fast.is_some() && !out.stop_every_call {
        true => {
            let (tx, rx) = crossbeam_channel::bounded(256);
            (Some(tx), Some(rx))
        }
        false => (None, None),
    };
    let windows = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let acfg = analysis::Config {
        known: known_tx,
        windows: windows.clone(),
        source,
        stack_depth: out.stack_depth,
        depths: plan.depths,
        leaks: sampling,
        window: out.window,
        traced: Some(traced_ranges.clone()),
        baseline,
        render_events: render_events(out),
        recorder: recorder.clone(),
        interim: (out.leaks.is_some() && (out.every.is_some() || server.is_some()))
            .then(|| outputs::interim(out, pid, &files, &own_ranges, server)),
        calls_for: (out.leaks.is_some() && recorder.is_some()).then(crate::app::record::calls_for),
        malloc_every: plan.malloc_every,
        fault_every: out.faults.unwrap_or(0),
    };
    // A panic here (a parser fed by the target, a renderer) asks the tracer to end the trace and detach.
    let away = cpus_away_from(pid);
    let analysis_cpus = away.clone();
    let worker = std::thread::Builder::new()
        .name("analysis".into())
        .spawn(move || {
            // Before the unwinding thread starts: it inherits this.
            if let Some(cpus) = analysis_cpus {
                let _ = crate::os::sched::set_affinity(&cpus);
            }
            let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| analysis::run(rx, renderer, acfg)));
            if done.is_err() {
                signals::fault();
            }
            done
        })
        .context("cannot start the analysis thread")?;
    let cfg = Config {
        pid,
        python_search: python.is_none() && python_error.is_none(),
        python,
        stack_bytes: out.stack_bytes,
        deadline: out.duration.map(|d| Instant::now() + d),
        epoch,
        live_status: std::io::stderr().is_terminal() && !spawned && out.member.is_none(),
        restorers: crate::live::sigstack::read_restorers(pid),
        known: known_rx,
        ended: ended.clone(),
        fault_every: out.faults,
    };
    // The tick also paces the reading of `--fast`'s ring when no stop comes (512 slots: 51,200 calls a second
    // before its writers fall back to stops).
    let tick = if plan.ring.is_empty() { 50 } else { 10 };
    // A member of a session traces on a thread of its own: its tick is its own (see `ThreadTick`).
    let _tick = match out.member {
        Some(_) => Some(signals::ThreadTick::start(tick).context("cannot start the tracer's timer")?),
        None => {
            signals::install_handlers(tick);
            None
        }
    };
    // Once every site is armed, the baseline of growth is sampled again and sent ahead of any event; then the
    // periodic samples follow in the same queue, each after the events queued before it was read, until the trace
    // ends (then the sender is dropped, so the analysis still ends with the sink).
    let mut armed = armed_sampler.map(|s| (s, tx.clone()));
    let mut periodic = None;
    let mut sink = ChannelSink::new(tx, windows);
    // Asked to stop while getting ready (the handlers are in place from the start, see `trace`): not attached yet,
    // so nothing to undo.
    if signals::stop_requested() != 0 && !spawned {
        drop((sink, armed));
        let _ = worker.join();
        return Ok(stopped_before_attaching(pid));
    }
    crate::app::crash::contain();
    // The tracer's own panic is caught here: unwinding drops the tracer, whose `Drop` detaches with whatever
    // state is left (the thread caught mid-stop included), so the target is never left with our bytes.
    let traced = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| -> Result<(End, Summary)> {
        // The scheduling delay the target sees, read around the whole trace (no stop needed to read it).
        let (delays_before, own_before) = (procfs::read_run_delays(pid), procfs::read_own_run_delay());
        let mut tracer = match start {
            Start::Attach(_) => Tracer::attach(cfg, plan.specs, &mut sink).map_err(|e| attach_error(pid, e))?,
            Start::Adopt(_) => Tracer::adopt(cfg, plan.specs, &mut sink).map_err(|e| attach_error(pid, e))?,
        };
        let arming = Instant::now();
        match &plan.fast {
            Some((wanted, site)) => tracer.arm_preferring_fast(&FastRequest {
                numbers: wanted,
                ring: &plan.ring,
                entry: site.addr,
                code: &site.code,
                functions: &plan.fast_functions,
                malloc_every: plan.malloc_every,
            }),
            None => tracer.arm(),
        }
        .map_err(|e| anyhow!("process {pid}: {e}"))?;
        tracer.summary.arm = arming.elapsed();
        // Every site is armed: the baseline of growth is sampled now (calls made while attaching were not seen).
        if let Some((mut sampler, tx)) = armed.take() {
            if let Ok(mut own) = own_ranges.lock() {
                own.clone_from(&tracer.summary.own_ranges);
            }
            let spans = sampler.sample(&[]);
            let zero = tracer.armed_at();
            let _ = tx.send(analysis::Queued::Sample(Some(zero.elapsed().as_secs_f64()), spans, true));
            let every = out.leaks.unwrap_or(out.smaps_every);
            // A sample the analysis does not take within a second (its output is stuck) is left out.
            let announce = move |time, regions| match tx
                .send_timeout(analysis::Queued::Coming(time, regions), Duration::from_secs(1))
            {
                Ok(()) => std::ops::ControlFlow::Continue(true),
                Err(SendTimeoutError::Timeout(_)) => std::ops::ControlFlow::Continue(false),
                Err(SendTimeoutError::Disconnected(_)) => std::ops::ControlFlow::Break(()),
            };
            let started =
                crate::live::sampling::Periodic::start(sampler, every, zero, traced_ranges, ended, away, announce);
            periodic = Some(started.context("cannot start the sampling thread")?);
        }
        if let Some(note) = sit_with_pinned_target(pid) {
            eprintln!("syscatch: {note}");
        }
        // Before the line that says we are ready: whoever reads it may check the tracer's slice.
        crate::os::sched::short_slice();
        let how = match tracer.fast_installed() {
            true => " (--fast: calls that do not match never stop)",
            false => "",
        };
        eprintln!(
            "syscatch: attached to {} thread(s) of process {pid}; {}{how}",
            tracer.summary.threads_seen, plan.what
        );
        if spawned {
            // The spawned program is held at its entry point; let it go.
            let _ = ptrace::cont(pid, 0);
        }
        let end = tracer.run();
        drop(periodic.take());
        let mut summary = tracer.summary.clone();
        let delays_after = procfs::read_run_delays(pid);
        if !delays_before.is_empty() || !delays_after.is_empty() {
            summary.target_run_delay = Some(crate::model::schedstat::run_delay(&delays_before, &delays_after));
        }
        summary.tracer_run_delay_ns = own_before.zip(procfs::read_own_run_delay()).map(|(a, b)| b.saturating_sub(a));
        if let Some(p) = tracer.python() {
            summary.notes.push(p.describe());
            if let Some(why) = p.known_problem().filter(|_| summary.fast_stops > 0) {
                summary.notes.push(format!("{why}: calls made under Python frames stop every time"));
            }
            summary.warnings.extend(p.warnings.iter().cloned());
            summary.python_us_per_event = p.us_per_walk();
        }
        Ok((end, summary))
    }));
    drop((armed.take(), periodic.take()));
    let (end, mut summary) = match traced {
        Ok(r) => r?,
        Err(_) => {
            drop(sink);
            let _ = worker.join();
            return Err(internal_error("the tracer"));
        }
    };
    summary.warnings.extend(python_error);
    sink.say_drops(&mut summary.warnings);
    drop(sink);
    let done = match worker.join() {
        Ok(Ok(done)) => done,
        _ => return Err(internal_error("the analysis thread")),
    };
    summary.unwind_ns_per_frame = done.costs.unwind_ns_per_frame();
    summary.symbolize_first_ns_per_frame = done.costs.symbolize_first_ns_per_frame();
    summary.symbolize_cached_ns_per_frame = done.costs.symbolize_cached_ns_per_frame();
    summary.analysis_events_per_s = done.costs.events_per_s();
    summary.nested = done.nested;
    summary.watched = watched.paths.clone();
    if !out.report {
        // (The leak report says these itself.)
        summary.warnings.extend(watched.skipped.iter().map(|s| format!("not watched: {s}")));
    }
    // What the end of the report needs from the target, read after detach (no stop) and recorded.
    let mut ending = Ending { final_sample: None, residency: Box::new(|_, _, _| None), facts: None, watched };
    // The facts the findings look at are read beside the last sample, which reads the whole smaps again (the
    // memory classes at the end come from the same reading).
    let reading_facts = classes
        .then(|| {
            std::thread::Builder::new().name("syscatch-facts".into()).spawn(move || ProcessFacts {
                hooks: crate::hooks::read::read_hook_facts(pid),
                ..crate::live::facts::read_facts_but_memory(pid)
            })
        })
        .transpose()
        .context("cannot start the facts thread")?;
    let mut end_regions = None;
    if done.leaks.is_some() {
        let regions = crate::live::memory::read_regions(pid).unwrap_or_default();
        let last: Vec<Span> = regions.iter().map(Span::of).collect();
        end_regions = (!regions.is_empty()).then_some(regions);
        if let Some(r) = &recorder {
            r.write(&Record::Sample {
                spans: last.clone(),
                time: Some(summary.duration.as_secs_f64()),
                baseline: false,
            });
        }
        ending.final_sample = Some(last);
        if let Ok(pm) = crate::os::pagemap::Pagemap::open(pid) {
            let rec = recorder.clone();
            ending.residency = Box::new(move |start, end, max| {
                let entries = pm.read_entries(start, end, max).ok()?;
                let (pages, resident) = (entries.len() as u64, crate::analysis::leaks::parse_resident(&entries));
                if let Some(r) = &rec {
                    r.write(&Record::Residency { start, end, max, pages, resident });
                }
                Some((pages, resident))
            });
        }
    }
    if let Some(reading) = reading_facts {
        let Ok(mut facts) = reading.join() else { return Err(internal_error("the facts thread")) };
        (facts.class_before, facts.heap_before) = class_before.map_or((None, None), |(kb, heap)| (Some(kb), heap));
        let class =
            end_regions.and_then(|r| crate::live::memory::read_class_facts_of(pid, r, Some(&summary.thread_bases)));
        crate::live::facts::set_class_facts(&mut facts, class);
        if let Some(r) = &recorder {
            r.write(&Record::Facts(Box::new(facts.clone())));
        }
        ending.facts = Some(facts);
    }
    let mut files = files.lock().unwrap_or_else(|e| e.into_inner());
    let finished = finish(out, done, &mut summary, ending, &mut files, spawned);
    if let Some(r) = &recorder {
        // The recorded summary is the trace's (a report adds its own warnings).
        if let Some(ev_file) = &out.record {
            r.write(&Record::Summary(Box::new(summary.clone())));
            r.finish().with_context(|| format!("cannot write {}", ev_file.display()))?;
        }
    }
    finished?;
    Ok(end)
}

/// The one line for a panic contained during a trace (the target is detached by then).
fn internal_error(whose: &str) -> anyhow::Error {
    let what = crate::app::crash::take().unwrap_or_else(|| "a panic".into());
    anyhow!("internal error in {whose}: {what}; the trace was stopped, and the target detached with its original bytes")
}

/// Forks and execs `cmd` stopped at its entry point, seized, with libc mapped. Returns its pid.
fn spawn_stopped(cmd: &[String]) -> Result<Tid> {
    use std::ffi::CString;
    let argv: Vec<CString> = cmd
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect::<Result<_, _>>()
        .map_err(|_| usage("the command contains a NUL byte"))?;
    let pid = crate::os::spawn::fork_stopped(&argv).map_err(|e| anyhow!("cannot start {}: {e}", cmd[0]))?;
    Ok(pid)
}

/// Runs a freshly exec'd child to its entry point (all its libraries mapped), then finds the site.
fn prepare_spawned(pid: Tid) -> Result<Wrapper> {
    crate::os::spawn::run_to_entry(pid).map_err(|e| anyhow!("cannot start the command: {e}"))?;
    let mem = crate::os::mem::ProcMem::open(pid)?;
    syscall_site(pid, &mem)
}
