//! `syscatch watch --pid N [--tree] [--every 5s] [--window 10m] [--for DURATION] [--json]`: which process grows
//! and how fast, for hours, from /proc alone (no ptrace: the target never stops).
//!
//! Each interval it reads each process's `smaps_rollup` (Rss and Swap, summed by the kernel), and about once a
//! minute its whole smaps, classified as `syscatch mem` does, to say which class grows. A process's rate is the
//! trend of its Rss+Swap floor over the window (`analysis::trend`: Theil-Sen, with an interval); the time to the
//! limit is what is left under the tightest of its cgroup's limits and the host's available memory
//! (`live::limits`), over the rate of every watched process under that limit. A read that costs more than a
//! hundredth of the interval lengthens the interval, said once. With `--tree`, processes that start join;
//! one that exits says so and the watch goes on.
//!
//! On a terminal, a table refreshed in place, like top; otherwise (or with `--json`) JSON Lines: at each
//! sample one `watch` line per process: `time` (s), `pid`, `command`, `rss_kb`, `swap_kb`, `rss_swap_kb`,
//! `growth` (`mib_per_min`, `low_mib_per_min`, `high_mib_per_min`, `window_s`, `points`; null until four samples),
//! `grows` (the class that grew most in the window, or null), `limit` (`bound`: `cgroup` or `host`, `file`,
//! `headroom_kb`), `to_limit_s` (null when not growing); and an `exit` line (`time`, `pid`, `command`) when a
//! process leaves.

use crate::analysis::memclass::Class;
use crate::analysis::trend::{self, Trend};
use crate::app::capture::{self, Capture, Triggers};
use crate::app::mem::human;
use crate::app::metrics::{Exposition, Labels, Server};
use crate::cli::WatchArgs;
use crate::live::limits::{self, Bound, Headroom};
use crate::live::memory::read_sample;
use crate::live::selection::{self, Chosen};
use crate::model::cgroup::Mounts;
use crate::model::smaps::{self, Rollup};
use crate::os::{Tid, procfs, signals};
use crate::report::json::line;
use anyhow::Result;
use serde_json::{Value, json};
use std::collections::{BTreeMap, VecDeque};
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// Capture lines kept under the terminal's table.
const RECENT: usize = 6;
/// The part of one CPU the watch's reads may take before it samples less often.
const BUDGET: f64 = 0.01;
/// A process's whole smaps is read and classified every this many samples (about once a minute at the default
/// interval), or less often where it costs more than half a percent of a CPU.
const CLASSES_EVERY: f64 = 12.0;

/// One process watched.
struct Watched {
    who: Chosen,
    /// Its rank in a distributed job (`RANK`, else `LOCAL_RANK`, in its environment), or empty.
    rank: String,
    /// `(time, Rss+Swap bytes)` of the samples in the window.
    samples: VecDeque<(f64, f64)>,
    now: Rollup,
    /// `(time, kB by class)` of the classified samples in the window.
    classes: VecDeque<(f64, BTreeMap<Class, u64>)>,
    classes_due: f64,
    headroom: Option<Headroom>,
    trend: Option<Trend>,
    /// Captures taken, the one running, when the last started, and triggers that fired while one ran.
    captures: u32,
    capturing: bool,
    captured_at: Option<f64>,
    ignored: u32,
    /// Seconds until the processes under its bound fill it, at their rates.
    to_limit: Option<f64>,
    gone: bool,
}

impl Watched {
    /// The class whose Rss+Swap rose most over the window's classified samples, if any rose.
    fn grows(&self) -> Option<Class> {
        let (first, last) = (&self.classes.front()?.1, &self.classes.back()?.1);
        let rise = |c: &Class| last.get(c).copied().unwrap_or(0) as i64 - first.get(c).copied().unwrap_or(0) as i64;
        last.keys().chain(first.keys()).copied().filter(|c| rise(c) > 0).max_by_key(rise)
    }
}

pub fn run(args: &WatchArgs) -> Result<i32> {
    let triggers = triggers(args)?;
    let server = args.metrics.as_deref().map(Server::start).transpose()?;
    let chosen = crate::app::choose::choose(&args.select)?;
    let mut read_cpu = Duration::ZERO;
    let status = chosen.status();
    let mounts = limits::read_mounts();
    signals::install_handlers(1000);
    signals::stop_timer();
    let start = Instant::now();
    let tty = !args.json && std::io::stdout().is_terminal();
    let out = std::io::stdout();
    let mut out = out.lock();
    let mut procs: Vec<Watched> = Vec::new();
    let window = args.window.as_secs_f64();
    let mut every = args.every;
    let mut slowed = false;
    let mut next = Duration::ZERO;
    let mut first = true;
    let mut running: Vec<Capture> = Vec::new();
    let mut announced = false;
    let mut recent: Vec<String> = Vec::new();
    loop {
        let time = start.elapsed().as_secs_f64();
        if first || args.select.tree {
            join(&mut procs, args, &chosen.processes, first, time);
            first = false;
        }
        // The budget is of CPU time (a loaded machine's waits are not the watch's cost).
        let began = crate::os::sched::thread_cpu();
        let mut exits = Vec::new();
        // The whole smaps of the rounds that read it has a budget of its own (see `sample`).
        let mut classifying = Duration::ZERO;
        for w in procs.iter_mut().filter(|w| !w.gone) {
            match sample(w, time, window, every.as_secs_f64(), &mounts) {
                Some(spent) => classifying += spent,
                None => {
                    w.gone = true;
                    exits.push(json!({"time": round(time), "pid": w.who.pid, "command": w.who.command}));
                }
            }
        }
        let spent = crate::os::sched::thread_cpu().saturating_sub(began);
        read_cpu += spent;
        let cost = spent.saturating_sub(classifying);
        project(&mut procs);
        let first_round = !std::mem::replace(&mut announced, true);
        let mut said = Vec::new();
        if let Some(t) = &triggers {
            said.extend(finished(&mut running, &mut procs));
            said.extend(trigger(t, &mut procs, &mut running, time));
        }
        if let Some(s) = &server {
            publish(s, &procs, read_cpu, &said, first_round);
        }
        if tty {
            // The latest captures stay under the table, which is redrawn each sample.
            recent.extend(said.iter().map(capture_text));
            let keep = recent.len().saturating_sub(RECENT);
            recent.drain(..keep);
            table(&mut out, &procs, time, every, window)?;
            for r in &recent {
                writeln!(out, "{r}")?;
            }
        } else {
            for w in procs.iter().filter(|w| !w.gone) {
                line(&mut out, "watch", row_json(w, time))?;
            }
            for e in exits {
                line(&mut out, "exit", e)?;
            }
        }
        for c in said.into_iter().filter(|_| !tty) {
            line(&mut out, "capture", c)?;
        }
        out.flush()?;
        procs.retain(|w| !w.gone || tty);
        if procs.iter().all(|w| w.gone) && !args.select.tree {
            eprintln!("syscatch: every process watched has exited");
            break;
        }
        // Reads that take more than the budget's share of the interval lengthen it.
        let needed = cost.mul_f64(1.0 / BUDGET);
        if needed > every {
            every = needed.min(Duration::from_secs(600));
            if !slowed {
                eprintln!(
                    "syscatch: one round of reads took {:.1} ms of CPU: sampling every {:.1}s instead, to stay under 1% of a CPU",
                    cost.as_secs_f64() * 1e3,
                    every.as_secs_f64()
                );
                slowed = true;
            }
        }
        next += every;
        if args.duration.is_some_and(|d| next > d) || !crate::app::mem::sleep_until(start, next) {
            break;
        }
    }
    // Captures still running end now, and write their files.
    for c in &mut running {
        c.interrupt();
    }
    for mut c in running {
        if let Some(v) = c.finish_within(Duration::from_secs(120)) {
            if tty {
                writeln!(out, "{}", capture_text(&v))?;
            } else {
                line(&mut out, "capture", v)?;
            }
        }
    }
    out.flush()?;
    Ok(status)
}

/// The processes named (in the first round) and, with `--tree`, their descendants not watched yet, join.
fn join(procs: &mut Vec<Watched>, args: &WatchArgs, named: &[Chosen], first: bool, time: f64) {
    let roots: Vec<Tid> = named.iter().map(|c| c.pid).collect();
    let mut pids = if first { roots.clone() } else { Vec::new() };
    if args.select.tree {
        let table = selection::read_table();
        for pid in crate::model::proctree::descendants(&table, &roots) {
            let p = table.iter().find(|p| p.pid == pid);
            if p.is_some_and(|p| crate::model::proctree::skip_reason(p).is_none()) && !selection::ours(pid) {
                pids.push(pid);
            }
        }
    }
    for pid in pids {
        let live = procs.iter().filter(|w| !w.gone).count();
        if procs.iter().any(|w| w.who.pid == pid && !w.gone) || live >= args.select.max_processes {
            continue;
        }
        // A pid seen before that exited and now names a new process starts afresh.
        procs.retain(|w| w.who.pid != pid);
        let who = named.iter().find(|c| c.pid == pid && first).cloned().unwrap_or_else(|| selection::describe(pid));
        procs.push(Watched {
            rank: rank_of(pid),
            who,
            samples: VecDeque::new(),
            now: Rollup::default(),
            classes: VecDeque::new(),
            classes_due: time,
            headroom: None,
            trend: None,
            to_limit: None,
            captures: 0,
            capturing: false,
            captured_at: None,
            ignored: 0,
            gone: false,
        });
    }
}

/// The figures of this sample to `/metrics`, and the profile of a capture just written to `/debug/pprof/allocs`.
fn publish(s: &Server, procs: &[Watched], read_cpu: Duration, said: &[Value], first_round: bool) {
    s.publish(exposition(procs, read_cpu));
    // Said once the first sample is there to serve.
    if first_round {
        eprintln!("syscatch: serving http://{}/metrics and /debug/pprof/allocs", s.addr);
    }
    for c in said.iter().filter(|c| c["state"] == "written") {
        let files = c["files"].as_array().into_iter().flatten().filter_map(Value::as_str);
        if let Some(profile) = files.filter(|f| f.ends_with(".pb.gz")).find_map(|f| std::fs::read(f).ok()) {
            s.publish_pprof(profile);
        }
    }
}

/// The triggers asked for, with `--out` checked before anything starts.
fn triggers(args: &WatchArgs) -> Result<Option<Triggers>> {
    let Some(out) = &args.out else { return Ok(None) };
    if args.trigger.is_none() && args.trigger_oom.is_none() {
        return Err(crate::app::trace::usage("--out goes with --trigger RATE or --trigger-oom DURATION"));
    }
    capture::check_out(out)?;
    Ok(Some(Triggers {
        rate: args.trigger,
        oom: args.trigger_oom,
        capture: args.capture,
        out: out.clone(),
        cooldown: args.cooldown,
    }))
}

/// The captures that ended since the last round: their `capture` lines.
fn finished(running: &mut Vec<Capture>, procs: &mut [Watched]) -> Vec<Value> {
    let mut said = Vec::new();
    running.retain_mut(|c| match c.try_finish() {
        Some(v) => {
            if let Some(w) = procs.iter_mut().find(|w| w.who.pid == c.pid) {
                w.capturing = false;
            }
            said.push(v);
            false
        }
        None => true,
    });
    said
}

/// Starts a capture of each process whose trigger fires, unless one runs (counted) or its cooldown holds.
fn trigger(t: &Triggers, procs: &mut [Watched], running: &mut Vec<Capture>, time: f64) -> Vec<Value> {
    let mut said = Vec::new();
    for w in procs.iter_mut().filter(|w| !w.gone) {
        let Some(trend) = w.trend else { continue };
        let Some(reason) = t.fires(trend.low, trend.per_sec, w.to_limit) else { continue };
        if w.capturing {
            w.ignored += 1;
            continue;
        }
        if w.captured_at.is_some_and(|at| time - at < t.cooldown.as_secs_f64()) {
            continue;
        }
        match Capture::start(&w.who, reason, t, round(time)) {
            Ok(c) => {
                said.push(c.started_json());
                running.push(c);
                (w.capturing, w.captured_at) = (true, Some(time));
                w.captures += 1;
            }
            Err(e) => eprintln!("syscatch: process {}: {e:#}", w.who.pid),
        }
    }
    said
}

/// A `capture` line as the terminal says it.
fn capture_text(c: &Value) -> String {
    if c["state"] == "started" {
        return format!(
            "capture of process {} ({}) started at {}s: {}",
            c["pid"],
            c["command"].as_str().unwrap_or(""),
            c["time"],
            c["reason"].as_str().unwrap_or("")
        );
    }
    // The files share their stem: `DIR/syscatch-PID-STAMP.{txt,html,...}`.
    let files: Vec<&str> = c["files"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    let split = |f: &str| {
        let name = f.rfind('/').map_or(0, |i| i + 1);
        f[name..].find('.').map_or((f.to_string(), String::new()), |d| (f[..name + d].into(), f[name + d + 1..].into()))
    };
    let stem = files.first().map(|f| split(f).0).unwrap_or_default();
    let exts: Vec<String> = files.iter().map(|f| split(f).1).collect();
    format!(
        "capture of process {} written ({}s{}): {stem}.{{{}}}",
        c["pid"],
        c["seconds"],
        if c["interrupted"] == true { ", ended early" } else { "" },
        exts.join(",")
    )
}

/// One sample of `w`, and the time spent reading its whole smaps (zero in most rounds); `None` when it has
/// exited.
fn sample(w: &mut Watched, time: f64, window: f64, every: f64, mounts: &Mounts) -> Option<Duration> {
    let pid = w.who.pid;
    let rollup = procfs::read_smaps_rollup(pid).ok().and_then(|t| smaps::parse_rollup(&t))?;
    let mut spent = Duration::ZERO;
    w.now = rollup;
    w.samples.push_back((time, (rollup.rss_swap() * 1024) as f64));
    while w.samples.front().is_some_and(|(t, _)| *t < time - window) {
        w.samples.pop_front();
    }
    if time >= w.classes_due {
        let began = crate::os::sched::thread_cpu();
        if let Ok(s) = read_sample(pid, None, time) {
            w.classes.push_back((time, s.by_class.iter().map(|(c, t)| (*c, t.rss_swap())).collect()));
        }
        // At most half a percent of a CPU on the whole smaps.
        spent = crate::os::sched::thread_cpu().saturating_sub(began);
        w.classes_due = time + (CLASSES_EVERY * every).max(spent.as_secs_f64() * 200.0);
        while w.classes.len() > 1 && w.classes.front().is_some_and(|(t, _)| *t < time - window) {
            w.classes.pop_front();
        }
    }
    w.headroom = limits::read_headroom(pid, mounts);
    w.trend = trend::floor_trend(w.samples.make_contiguous());
    Some(spent)
}

/// Each process's seconds to its limit: the headroom under its bound over the rate of every watched process
/// under the same bound (they fill it together); none for a process that is not growing.
fn project(procs: &mut [Watched]) {
    let mut rates: BTreeMap<String, f64> = BTreeMap::new();
    for w in procs.iter().filter(|w| !w.gone) {
        if let (Some(h), Some(t)) = (&w.headroom, &w.trend) {
            *rates.entry(h.key()).or_default() += t.per_sec.max(0.0);
        }
    }
    for w in procs.iter_mut() {
        w.to_limit = match (&w.headroom, &w.trend) {
            (Some(h), Some(t)) if t.per_sec > 0.0 && !w.gone => Some(h.bytes as f64 / rates[&h.key()]),
            _ => None,
        };
    }
}

fn round(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn mib_min(bytes_per_sec: f64) -> f64 {
    (bytes_per_sec * 60.0 / 1048576.0 * 1000.0).round() / 1000.0
}

fn row_json(w: &Watched, time: f64) -> Value {
    let span = w.samples.back().map(|b| b.0).unwrap_or(time) - w.samples.front().map(|f| f.0).unwrap_or(time);
    let growth = w.trend.map(|t| {
        json!({"mib_per_min": mib_min(t.per_sec), "low_mib_per_min": mib_min(t.low),
               "high_mib_per_min": mib_min(t.high), "window_s": round(span), "points": t.points})
    });
    let limit = w.headroom.as_ref().map(|h| match &h.bound {
        Bound::Cgroup { file, limit } => json!({"bound": "cgroup", "file": file, "limit_kb": limit / 1024,
                                                "headroom_kb": h.bytes / 1024}),
        Bound::Host => json!({"bound": "host", "file": "/proc/meminfo", "headroom_kb": h.bytes / 1024}),
    });
    json!({
        "time": round(time), "pid": w.who.pid, "command": w.who.command,
        "rss_kb": w.now.rss, "swap_kb": w.now.swap, "rss_swap_kb": w.now.rss_swap(),
        "growth": growth, "grows": w.grows().map(Class::name), "limit": limit,
        "to_limit_s": w.to_limit.map(|s| s.round()),
        "captures": w.captures, "capturing": w.capturing, "triggers_ignored": w.ignored,
    })
}

/// `2h05m`, `14m`, `42s`.
fn span(secs: f64) -> String {
    if secs < 9.95 && secs.fract() > 0.05 {
        return format!("{:.0}ms", secs * 1000.0);
    }
    let s = secs.max(0.0).round() as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86400, s % 86400 / 3600),
    }
}

/// The table on a terminal, redrawn in place: processes by growth rate, fastest first.
fn table(out: &mut impl Write, procs: &[Watched], time: f64, every: Duration, window: f64) -> std::io::Result<()> {
    write!(out, "\x1b[H\x1b[2J")?;
    let live = procs.iter().filter(|w| !w.gone).count();
    writeln!(
        out,
        "syscatch watch: {live} process{} every {}, {} so far; growth over the last {} (floor trend, with its interval)",
        if live == 1 { "" } else { "es" },
        span(every.as_secs_f64()),
        span(time),
        span(window.min(time))
    )?;
    writeln!(
        out,
        "{:>8} {:>11} {:>26} {:>10} {:>9}  COMMAND",
        "PID", "RSS+SWAP", "GROWTH MiB/min", "GROWS", "TO LIMIT"
    )?;
    let mut order: Vec<&Watched> = procs.iter().collect();
    order.sort_by(|a, b| {
        let rate = |w: &Watched| if w.gone { f64::NEG_INFINITY } else { w.trend.map_or(0.0, |t| t.per_sec) };
        rate(b).total_cmp(&rate(a))
    });
    for w in order {
        if w.gone {
            writeln!(out, "{:>8} {:>11} {:>26} {:>10} {:>9}  {}", w.who.pid, "exited", "", "", "", w.who.command)?;
            continue;
        }
        let growth = match w.trend {
            Some(t) => format!("{:+.2} ({:.2} to {:.2})", mib_min(t.per_sec), mib_min(t.low), mib_min(t.high)),
            None => "(4 samples first)".into(),
        };
        let grows = w.grows().map_or("", Class::name);
        let limit = w.to_limit.map_or_else(|| "-".into(), span);
        let rss = human(w.now.rss_swap());
        writeln!(out, "{:>8} {rss:>11} {growth:>26} {grows:>10} {limit:>9}  {}", w.who.pid, w.who.command)?;
    }
    let mut bounds: Vec<&Headroom> = procs.iter().filter(|w| !w.gone).filter_map(|w| w.headroom.as_ref()).collect();
    bounds.sort_by_key(|h| h.key());
    bounds.dedup_by_key(|h| h.key());
    for h in bounds {
        writeln!(out, "limit: {}, {} left", h.describe(), human(h.bytes / 1024))?;
    }
    Ok(())
}

/// `RANK`, else `LOCAL_RANK`, from the process's environment (what torchrun and vLLM's workers are started with).
pub(crate) fn rank_of(pid: Tid) -> String {
    let env = procfs::read_environ(pid).unwrap_or_default();
    let var = |name: &str| {
        env.split(|&b| b == 0)
            .find_map(|kv| kv.strip_prefix(name.as_bytes())?.strip_prefix(b"="))
            .map(|v| String::from_utf8_lossy(v).chars().take(16).collect::<String>())
    };
    var("RANK").or_else(|| var("LOCAL_RANK")).unwrap_or_default()
}

/// The figures of the latest sample as `/metrics` serves them: a series per process name and rank (no pid: a
/// label that changes with every restart would make new series without end), the figures of processes that share
/// both added up (the least time to the limit).
fn exposition(procs: &[Watched], read_cpu: Duration) -> String {
    let mut e = Exposition::with_build_info();
    e.family("syscatch_watched_processes", "gauge", "Processes watched now.");
    e.add("syscatch_watched_processes", Vec::new(), procs.iter().filter(|w| !w.gone).count() as f64);
    e.family("syscatch_read_cpu_seconds_total", "counter", "CPU time the watch spent reading /proc.");
    e.add("syscatch_read_cpu_seconds_total", Vec::new(), read_cpu.as_secs_f64());
    let families = [
        ("syscatch_rss_swap_bytes", "gauge", "Rss+Swap of the process (smaps_rollup)."),
        ("syscatch_memory_bytes", "gauge", "Rss+Swap by class, at the latest reading of the whole smaps."),
        ("syscatch_growth_bytes_per_second", "gauge", "Lasting growth rate: the trend of the Rss+Swap floor."),
        ("syscatch_growth_low_bytes_per_second", "gauge", "Lower end of the growth rate's interval."),
        ("syscatch_growth_high_bytes_per_second", "gauge", "Upper end of the growth rate's interval."),
        ("syscatch_time_to_limit_seconds", "gauge", "At the growth rates, seconds until the memory limit is met."),
        ("syscatch_captures_total", "counter", "Captures taken of the process."),
        ("syscatch_triggers_ignored_total", "counter", "Samples at which a trigger held while a capture ran."),
    ];
    for (name, kind, help) in families {
        e.family(name, kind, help);
    }
    for w in procs.iter().filter(|w| !w.gone) {
        let labels: Labels = vec![("process", w.who.name.clone()), ("rank", w.rank.clone())];
        e.add("syscatch_rss_swap_bytes", labels.clone(), (w.now.rss_swap() * 1024) as f64);
        if let Some((_, classes)) = w.classes.back() {
            for (class, kb) in classes {
                let mut l = labels.clone();
                l.push(("class", class.name().into()));
                e.add("syscatch_memory_bytes", l, (kb * 1024) as f64);
            }
        }
        if let Some(t) = w.trend {
            e.add("syscatch_growth_bytes_per_second", labels.clone(), t.per_sec);
            e.add("syscatch_growth_low_bytes_per_second", labels.clone(), t.low);
            e.add("syscatch_growth_high_bytes_per_second", labels.clone(), t.high);
        }
        if let Some(s) = w.to_limit {
            e.least("syscatch_time_to_limit_seconds", labels.clone(), s);
        }
        e.add("syscatch_captures_total", labels.clone(), f64::from(w.captures));
        e.add("syscatch_triggers_ignored_total", labels, f64::from(w.ignored));
    }
    e.text()
}
