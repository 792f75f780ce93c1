//! `syscatch mem` over several processes (`--pid 10,11`, `--tree`): one table, a row per process and a total,
//! like smem, from /proc alone. With `--watch`, the table again each interval, processes ranked by growth since
//! they were first seen and the growing ones marked; with `--tree`, processes that start meanwhile join the table,
//! and those that exit leave it with a line. `--plot` draws Rss+Swap by process.
//!
//! `--json`: per sample, one `mem` line per process (the single-process record, with `command`, and with
//! `--watch` `sample`, `growth[]`, `growth_kb` and `growing`), then one `total` line: `time`, `processes`,
//! `rss_kb`, `swap_kb`, `pss_kb`, `rss_swap_kb` (and `sample`, `growth_kb` with `--watch`).

use super::mem::{advice_for, growth, growth_json, human, mem_json, signed_kb, sleep_until};
use crate::analysis::memclass::{self, Allocator, Class};
use crate::cli::MemArgs;
use crate::live::memory::{Sample, read_sample};
use crate::live::selection::{self, Chosen, Selection};
use crate::os::{Tid, mem::ProcMem, procfs, signals};
use crate::report::json::line;
use crate::report::memplot::{self, Series};
use anyhow::{Context, Result};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::time::Instant;

/// The classes of the table's `other` column (so that a row's columns add up to its Rss+Swap).
const OTHER: &[Class] = &[Class::Shm, Class::Gpu, Class::Other];

/// One process of the table: what it is, what it runs with, and its samples so far.
struct Row {
    who: Chosen,
    mem: Option<ProcMem>,
    alloc: Allocator,
    env: BTreeMap<String, String>,
    ucx: bool,
    first: Sample,
    /// Rss+Swap in kB at each sample of the watch (0 before it joined and after it left).
    series: Vec<u64>,
    last: Option<Sample>,
    /// Rss+Swap in kB at the sample before the last.
    previous: u64,
    gone: bool,
}

impl Row {
    fn start(who: Chosen, time: f64) -> Option<Row> {
        let mem = ProcMem::open(who.pid).ok();
        let first = read_sample(who.pid, mem.as_ref(), time).ok()?;
        let env = procfs::read_environ(who.pid).map(|raw| memclass::parse_environ(&raw)).unwrap_or_default();
        let alloc = memclass::detect_allocator(&first.regions);
        let ucx = memclass::ucx_hooks_mapped(&first.regions);
        let previous = first.total.rss_swap();
        Some(Row { who, mem, alloc, env, ucx, first, series: Vec::new(), last: None, previous, gone: false })
    }

    fn now(&self) -> &Sample {
        self.last.as_ref().unwrap_or(&self.first)
    }

    /// Rss+Swap in kB since the process was first seen.
    fn growth(&self) -> i128 {
        i128::from(self.now().total.rss_swap()) - i128::from(self.first.total.rss_swap())
    }

    /// Grew since it was first seen, and in the last interval.
    fn growing(&self) -> bool {
        self.growth() > 0 && self.now().total.rss_swap() > self.previous
    }

    fn advice(&self) -> Vec<String> {
        advice_for(self.who.pid, &self.alloc, &self.env, &self.first, self.now(), self.ucx)
    }
}

pub fn run(args: &MemArgs, chosen: Selection) -> Result<i32> {
    let start = Instant::now();
    let mut status = chosen.status();
    let mut rows: Vec<Row> = Vec::new();
    for who in chosen.processes {
        let pid = who.pid;
        match Row::start(who, 0.0) {
            Some(r) => rows.push(r),
            None => {
                eprintln!("syscatch: process {pid} exited before its memory was read");
                // Only a process named counts as missing (one of a tree may end as it likes).
                if args.select.pid.contains(&pid) {
                    status = selection::PARTIAL;
                }
            }
        }
    }
    let out = std::io::stdout();
    let mut out = out.lock();
    let Some(interval) = args.watch else {
        emit(&mut out, args.json, &rows, None)?;
        out.flush()?;
        return Ok(status);
    };
    signals::install_handlers(1000);
    signals::stop_timer();
    let tty = !args.json && std::io::stdout().is_terminal();
    let roots: Vec<Tid> = rows.iter().map(|r| r.who.pid).collect();
    // Processes of the tree past --max-processes, said once.
    let mut refused = std::collections::HashSet::new();
    let mut times = vec![0.0];
    for r in &mut rows {
        r.series.push(r.first.total.rss_swap());
    }
    emit(&mut out, args.json, &rows, Some((1, tty)))?;
    loop {
        let n = times.len();
        let mut at = interval.saturating_mul(u32::try_from(n).unwrap_or(u32::MAX));
        let last_one = args.duration.is_some_and(|d| at >= d);
        if last_one {
            at = args.duration.unwrap_or(at);
        }
        if !sleep_until(start, at) {
            break;
        }
        let time = start.elapsed().as_secs_f64();
        times.push(time);
        for r in rows.iter_mut().filter(|r| !r.gone) {
            r.previous = r.now().total.rss_swap();
            match read_sample(r.who.pid, r.mem.as_ref(), time) {
                Ok(s) => r.last = Some(s),
                Err(_) => {
                    r.gone = true;
                    // Its /proc/PID/mem is let go: an open one keeps nothing alive, but names a pid reused later.
                    r.mem = None;
                    eprintln!("syscatch: process {} ({}) exited at {time:.1}s", r.who.pid, r.who.command);
                }
            }
        }
        if args.select.tree {
            join_new(&mut rows, &roots, time, n, args.select.max_processes, &mut refused);
        }
        for r in &mut rows {
            r.series.resize(n, 0);
            r.series.push(if r.gone { 0 } else { r.now().total.rss_swap() });
        }
        rows.retain(|r| !r.gone || args.plot.is_some());
        emit(&mut out, args.json, &rows, Some((times.len(), tty)))?;
        if last_one {
            break;
        }
    }
    out.flush()?;
    if let Some(path) = &args.plot {
        let labels: Vec<String> = rows.iter().map(|r| format!("{} {}", r.who.pid, r.who.command)).collect();
        let series: Vec<Series> =
            rows.iter().zip(&labels).map(|(r, label)| Series { label, values: r.series.clone() }).collect();
        let svg = memplot::plot_svg(&format!("{} processes: Rss+Swap", rows.len()), &times, &series);
        std::fs::write(path, svg).with_context(|| format!("cannot write the plot to {}", path.display()))?;
        eprintln!("syscatch: plot of {} samples written to {}", times.len(), path.display());
    }
    Ok(status)
}

/// The descendants of `roots` that started since the last sample join the table.
fn join_new(
    rows: &mut Vec<Row>,
    roots: &[Tid],
    time: f64,
    samples: usize,
    max: usize,
    refused: &mut std::collections::HashSet<Tid>,
) {
    let table = selection::read_table();
    for pid in crate::model::proctree::descendants(&table, roots) {
        if rows.iter().any(|r| r.who.pid == pid) {
            continue;
        }
        let Some(p) = table.iter().find(|p| p.pid == pid) else { continue };
        if crate::model::proctree::skip_reason(p).is_some() || selection::ours(pid) {
            continue;
        }
        if rows.iter().filter(|r| !r.gone).count() >= max {
            if refused.insert(pid) {
                eprintln!(
                    "syscatch: process {pid} ({}) started but is not shown: --max-processes {max} reached",
                    p.name
                );
            }
            continue;
        }
        if let Some(mut r) = Row::start(selection::describe(pid), time) {
            eprintln!("syscatch: process {} ({}) started at {time:.1}s", r.who.pid, r.who.command);
            r.series.resize(samples, 0);
            rows.push(r);
        }
    }
}

/// The table (text) or the records (JSON) of one sample; `watch`: the sample's number, and whether stdout is a
/// terminal to redraw.
fn emit(w: &mut impl Write, json: bool, rows: &[Row], watch: Option<(usize, bool)>) -> std::io::Result<()> {
    let mut shown: Vec<&Row> = rows.iter().filter(|r| !r.gone).collect();
    if watch.is_some() {
        shown.sort_by_key(|r| (std::cmp::Reverse(r.growth()), r.who.pid));
    } else {
        shown.sort_by_key(|r| (std::cmp::Reverse(r.now().total.rss_swap()), r.who.pid));
    }
    let time = shown.first().map(|r| r.now().time).unwrap_or(0.0);
    let sum = |f: &dyn Fn(&Row) -> u64| shown.iter().map(|r| f(r)).fold(0u64, u64::saturating_add);
    let total_growth: i128 = shown.iter().map(|r| r.growth()).sum();
    if json {
        for r in &shown {
            let top = watch.map(|(n, _)| {
                let g: Vec<Value> = growth(&r.first, r.now()).iter().take(20).map(growth_json).collect();
                (n, g)
            });
            let mut v = mem_json(r.who.pid, &r.who.name, r.now(), &r.alloc, &r.env, &r.advice(), top);
            v["command"] = json!(r.who.command);
            v["nspid"] = json!(r.who.nspid);
            if watch.is_some() {
                v["growth_kb"] = json!(i64::try_from(r.growth()).unwrap_or(i64::MAX));
                v["growing"] = json!(r.growing());
            }
            line(w, "mem", v)?;
        }
        let mut total = json!({
            "time": time,
            "processes": shown.len(),
            "rss_kb": sum(&|r| r.now().total.rss),
            "swap_kb": sum(&|r| r.now().total.swap),
            "pss_kb": sum(&|r| r.now().total.pss),
            "rss_swap_kb": sum(&|r| r.now().total.rss_swap()),
        });
        if let Some((n, _)) = watch {
            total["sample"] = json!(n);
            total["growth_kb"] = json!(i64::try_from(total_growth).unwrap_or(i64::MAX));
        }
        line(w, "total", total)?;
        return w.flush();
    }
    match watch {
        Some((_, true)) => write!(w, "\x1b[H\x1b[2J")?,
        Some((n, false)) => writeln!(w, "--- sample {n} at {time:.1}s")?,
        None => {}
    }
    let class = |r: &Row, cs: &[Class]| {
        cs.iter().filter_map(|c| r.now().by_class.get(c)).map(|t| t.rss_swap()).fold(0u64, u64::saturating_add)
    };
    let grow_head = if watch.is_some() { format!(" {:>11}  ", "growth") } else { String::new() };
    writeln!(
        w,
        "{:>8} {:>10} {:>10}{grow_head} {:>9} {:>15} {:>9} {:>9} {:>9} {:>9}  {:<9} command",
        "pid", "Rss+Swap", "Pss", "heap", "arenas", "anon", "stacks", "file", "other", "allocator"
    )?;
    for r in &shown {
        let s = r.now();
        let arenas = match s.arenas.arenas.len() {
            0 => human(class(r, &[Class::Arena])),
            n => format!("{} in {n}", human(class(r, &[Class::Arena]))),
        };
        let grow = match watch {
            Some(_) => format!(" {:>11}{} ", signed_kb(r.growth()), if r.growing() { " ^" } else { "  " }),
            None => String::new(),
        };
        writeln!(
            w,
            "{:>8} {:>10} {:>10}{grow} {:>9} {:>15} {:>9} {:>9} {:>9} {:>9}  {:<9} {}{}",
            r.who.pid,
            human(s.total.rss_swap()),
            human(s.total.pss),
            human(class(r, &[Class::Heap])),
            arenas,
            human(class(r, &[Class::AnonLarge, Class::AnonSmall])),
            human(class(r, &[Class::Stack])),
            human(class(r, &[Class::FileCode, Class::FileData])),
            human(class(r, OTHER)),
            r.alloc.name,
            r.who.command,
            // A process in a container: its pid there too.
            match r.who.nspid.as_slice() {
                [_, .., inner] => format!(" (pid {inner} in its namespace)"),
                _ => String::new(),
            },
        )?;
    }
    let grow = match watch {
        Some(_) => format!(" {:>11}   ", signed_kb(total_growth)),
        None => String::new(),
    };
    writeln!(
        w,
        "{:>8} {:>10} {:>10}{grow} {:>9} {:>15} {:>9} {:>9} {:>9} {:>9}  {:<9} {} processes",
        "total",
        human(sum(&|r| r.now().total.rss_swap())),
        human(sum(&|r| r.now().total.pss)),
        human(sum(&|r| class(r, &[Class::Heap]))),
        human(sum(&|r| class(r, &[Class::Arena]))),
        human(sum(&|r| class(r, &[Class::AnonLarge, Class::AnonSmall]))),
        human(sum(&|r| class(r, &[Class::Stack]))),
        human(sum(&|r| class(r, &[Class::FileCode, Class::FileData]))),
        human(sum(&|r| class(r, OTHER))),
        "",
        shown.len()
    )?;
    if watch.is_some() {
        writeln!(w, "(^: grew since first seen and in the last interval)")?;
    }
    // The same advice in several processes is said once, with its processes.
    let mut advice: Vec<(String, Vec<Tid>)> = Vec::new();
    for r in &shown {
        for a in r.advice() {
            match advice.iter_mut().find(|(text, _)| *text == a) {
                Some((_, pids)) => pids.push(r.who.pid),
                None => advice.push((a, vec![r.who.pid])),
            }
        }
    }
    for (a, pids) in advice {
        let pids: Vec<String> = pids.iter().map(Tid::to_string).collect();
        let whose = if pids.len() == 1 { "process" } else { "processes" };
        writeln!(w, "advice ({whose} {}): {a}", pids.join(", "))?;
    }
    w.flush()
}
