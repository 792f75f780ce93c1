//! `syscatch mem --pid N [--json] [--watch 2s] [--for 1m] [--plot FILE.svg]`: a process's memory by class, from
//! /proc alone (no ptrace: the target never stops). The only reads of the target's memory are the first word of
//! each candidate malloc heap, through /proc/PID/mem. With `--watch`, the regions that grew most since the first
//! sample, refreshed each interval, and at the end a plot of Rss+Swap by class.
//!
//! `--json`: one `{"type":"mem","data":{...}}` line per sample. `data`: `pid`, `name`, `time` (s since the first
//! sample), `total` and `classes[]` (`class`, `regions`, `size_kb`, `rss_kb`, `swap_kb`, `pss_kb`, `rss_swap_kb`),
//! `arenas` (`heaps`, `count`, `addrs` (hex), `rss_swap_kb`, `unread_heaps`, `rejected`), `threads` (`count`,
//! `located`, `stack_regions`), `allocator` (`name`, `library`, `config[]`: `from`, `value`), `env`, `advice[]`, `heap` (glibc malloc's
//! arenas: see `crate::app::heap`; not with `--watch`); with `--watch` also `sample`
//! (1-based) and `growth[]` (`start`, `end` (hex), `perms`, `path`, `class`, `rss_swap_kb`, `growth_kb`, `new`).

use crate::analysis::memclass::{self, Allocator, ArenaSummary, Class};
use crate::cli::MemArgs;
use crate::live::memory::{Sample, read_sample};
use crate::model::smaps::SmapsRegion;
use crate::os::{Tid, mem::ProcMem, procfs, signals};
use crate::report::json::{hex, line};
use crate::report::memplot::{self, Series};
use anyhow::{Context, Result};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// Regions shown in the growth table.
const TOP_REGIONS: usize = 20;

/// One look at the process.
pub fn run(args: &MemArgs) -> Result<i32> {
    if args.watch.is_none() && (args.duration.is_some() || args.plot.is_some()) {
        return Err(crate::app::trace::usage("--for and --plot go with --watch INTERVAL (e.g. --watch 2s)"));
    }
    let chosen = crate::app::choose::choose(&args.select)?;
    let ([one], false) = (chosen.processes.as_slice(), args.select.tree) else {
        return super::mem_many::run(args, chosen);
    };
    let pid = one.pid;
    let name = crate::app::trace::check_process(pid)?.name;
    // Without /proc/PID/mem (not root, or a hardened kernel) the arena heaps are still counted by layout.
    let mem = ProcMem::open(pid).ok();
    let start = Instant::now();
    let first = read_sample(pid, mem.as_ref(), 0.0)?;
    let env = procfs::read_environ(pid).map(|raw| memclass::parse_environ(&raw)).unwrap_or_default();
    let mut alloc = memclass::detect_allocator(&first.regions);
    crate::live::facts::read_allocator_config(pid, &mut alloc);
    let ucx = memclass::ucx_hooks_mapped(&first.regions);
    let advice = advice_for(pid, &alloc, &env, &first, &first, ucx);
    let out = std::io::stdout();
    let mut out = out.lock();

    let Some(interval) = args.watch else {
        let heap = crate::live::heap::read(pid, mem.as_ref(), &first, &alloc, Some(&[]));
        if args.json {
            let mut v = mem_json(pid, &name, &first, &alloc, &env, &advice, None);
            if let Some(h) = &heap {
                v["heap"] = crate::app::heap::json(h);
            }
            line(&mut out, "mem", v)?;
        } else {
            write_report(&mut out, pid, &name, &first, &alloc, &env, &advice)?;
            for l in heap.as_ref().map(crate::app::heap::lines).unwrap_or_default() {
                writeln!(out, "{l}")?;
            }
        }
        out.flush()?;
        return Ok(chosen.status());
    };

    // Ctrl-C, SIGTERM and SIGHUP end the watch (the plot is still written); the tick timer is not needed.
    signals::install_handlers(1000);
    signals::stop_timer();
    let tty = !args.json && std::io::stdout().is_terminal();
    let mut samples = vec![first];
    let mut ended = None;
    emit_watch(&mut out, args.json, tty, pid, &name, &samples, &alloc, &env, &advice)?;
    loop {
        // Samples fall on multiples of the interval; with --for, the last one at the end of the duration.
        let mut at = interval.saturating_mul(u32::try_from(samples.len()).unwrap_or(u32::MAX));
        let last_one = args.duration.is_some_and(|d| at >= d);
        if last_one {
            at = args.duration.unwrap_or(at);
        }
        if !sleep_until(start, at) {
            break;
        }
        match read_sample(pid, mem.as_ref(), start.elapsed().as_secs_f64()) {
            Ok(s) => samples.push(s),
            Err(_) => {
                ended = Some(format!("process {pid} exited"));
                break;
            }
        }
        let advice = samples.last().map(|s| advice_for(pid, &alloc, &env, &samples[0], s, ucx)).unwrap_or_default();
        emit_watch(&mut out, args.json, tty, pid, &name, &samples, &alloc, &env, &advice)?;
        if last_one {
            break;
        }
    }
    out.flush()?;
    if let Some(e) = ended {
        eprintln!("syscatch: {e}; {} samples taken", samples.len());
    }
    if let Some(path) = &args.plot {
        let svg = plot(pid, &name, &samples);
        std::fs::write(path, svg).with_context(|| format!("cannot write the plot to {}", path.display()))?;
        eprintln!("syscatch: plot of {} samples written to {}", samples.len(), path.display());
    }
    Ok(chosen.status())
}

fn class_kb(s: &Sample) -> BTreeMap<String, i64> {
    s.by_class.iter().map(|(c, t)| (c.name().to_string(), t.rss_swap() as i64)).collect()
}

/// The findings rules' advice (the same rules as `--leaks`) and the patterns that are not rules.
pub(super) fn advice_for(
    pid: Tid,
    alloc: &Allocator,
    env: &BTreeMap<String, String>,
    first: &Sample,
    now: &Sample,
    ucx: bool,
) -> Vec<String> {
    let (before, kb) = (class_kb(first), class_kb(now));
    let growth = kb.iter().map(|(c, &v)| (c.clone(), v - before.get(c).copied().unwrap_or(0))).collect();
    let arenas = now.arenas.arenas.len().max(usize::from(now.arenas.unread > 0));
    let mut out = crate::app::findings::rule_advice(pid, kb, growth, arenas, alloc.name);
    out.extend(memclass::advice(alloc, env, &now.arenas, &now.total, ucx));
    out
}

/// Sleeps until `start + at`; false when a stop signal arrived first.
pub(super) fn sleep_until(start: Instant, at: Duration) -> bool {
    loop {
        if signals::stop_requested() != 0 {
            return false;
        }
        let left = at.saturating_sub(start.elapsed());
        if left.is_zero() {
            return true;
        }
        std::thread::sleep(left.min(Duration::from_millis(50)));
    }
}

/// `12.3 MiB` from kB.
pub(crate) fn human(kb: u64) -> String {
    if kb < 1024 {
        format!("{kb} kB")
    } else if kb < 1024 * 1024 {
        format!("{:.1} MiB", kb as f64 / 1024.0)
    } else {
        format!("{:.2} GiB", kb as f64 / (1024.0 * 1024.0))
    }
}

fn arena_line(a: &ArenaSummary) -> String {
    if a.heaps == 0 {
        return "no thread arena heaps".to_string();
    }
    let arenas = if a.unread == a.heaps {
        "arenas not counted: their heaps could not be read".to_string()
    } else if a.unread > 0 {
        format!("{} arenas ({} heaps unreadable)", a.arenas.len(), a.unread)
    } else {
        format!("{} arenas", a.arenas.len())
    };
    format!("{} heaps in {arenas}, holding {}", a.heaps, human(a.rss_swap))
}

fn write_report(
    w: &mut impl Write,
    pid: Tid,
    name: &str,
    s: &Sample,
    alloc: &Allocator,
    env: &BTreeMap<String, String>,
    advice: &[String],
) -> std::io::Result<()> {
    writeln!(
        w,
        "pid {pid} ({name}): Rss+Swap {} (Rss {}, Swap {}), {} regions",
        human(s.total.rss_swap()),
        human(s.total.rss),
        human(s.total.swap),
        s.total.regions
    )?;
    writeln!(w, "{:<40} {:>7} {:>11} {:>11} {:>11}", "class", "regions", "Rss", "Swap", "Rss+Swap")?;
    for c in Class::ALL {
        let t = s.by_class.get(&c).copied().unwrap_or_default();
        if t.regions == 0 {
            continue;
        }
        writeln!(
            w,
            "{:<40} {:>7} {:>11} {:>11} {:>11}",
            c.describe(),
            t.regions,
            human(t.rss),
            human(t.swap),
            human(t.rss_swap())
        )?;
    }
    match alloc.name {
        "musl" => writeln!(
            w,
            "malloc arenas: none (musl's malloc has no arenas: its memory is in [heap] and anonymous regions)"
        )?,
        _ => writeln!(w, "malloc arenas: {}", arena_line(&s.arenas))?,
    }
    let stacks = s.by_class.get(&Class::Stack).map(|t| t.regions).unwrap_or(0);
    writeln!(
        w,
        "thread stacks: {} threads, {} located by stack pointer, {stacks} stack regions",
        s.threads.count,
        s.threads.sps.len()
    )?;
    let config: String = alloc.config.iter().map(|(k, v)| format!("; {k}: \"{v}\"")).collect();
    match &alloc.library {
        Some(l) => writeln!(w, "allocator: {} ({l}){config}", alloc.name)?,
        None => writeln!(w, "allocator: {} (no libc mapped: statically linked?){config}", alloc.name)?,
    }
    if env.is_empty() {
        let prefixes: Vec<String> = memclass::ENV_PREFIXES.iter().map(|p| format!("{p}*")).collect();
        writeln!(w, "environment: none of {}, {} set", memclass::ENV_VARS.join(", "), prefixes.join(", "))?;
    } else {
        let vars: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        writeln!(w, "environment (at exec): {}", vars.join(" "))?;
    }
    for a in advice {
        writeln!(w, "advice: {a}")?;
    }
    Ok(())
}

fn region_name(r: &SmapsRegion) -> String {
    if r.map.path.is_empty() { "[anon]".to_string() } else { r.map.path.clone() }
}

/// A region's growth since the first sample, in kB (the whole region when it is new).
pub(super) struct Growth<'a> {
    region: &'a SmapsRegion,
    class: Class,
    growth: i128,
    new: bool,
}

/// Regions of the last sample that grew since the first, largest growth first.
pub(super) fn growth<'a>(first: &Sample, last: &'a Sample) -> Vec<Growth<'a>> {
    use crate::model::smaps::{Span, previous_rss_swap};
    let spans = |s: &Sample| s.regions.iter().map(Span::of).collect::<Vec<Span>>();
    let before = previous_rss_swap(&spans(first), &spans(last));
    let mut g: Vec<Growth> = last
        .regions
        .iter()
        .zip(&last.classes)
        .zip(before)
        .map(|((r, &class), old)| Growth {
            region: r,
            class,
            growth: i128::from(r.rss_swap()) - i128::from(old.unwrap_or(0)),
            new: old.is_none(),
        })
        .filter(|x| x.growth > 0)
        .collect();
    g.sort_by(|a, b| b.growth.cmp(&a.growth).then(a.region.map.start.cmp(&b.region.map.start)));
    g
}

pub(super) fn signed_kb(kb: i128) -> String {
    let h = human(kb.unsigned_abs().min(u128::from(u64::MAX)) as u64);
    if kb < 0 { format!("-{h}") } else { format!("+{h}") }
}

#[allow(clippy::too_many_arguments)]
fn emit_watch(
    w: &mut impl Write,
    json: bool,
    tty: bool,
    pid: Tid,
    name: &str,
    samples: &[Sample],
    alloc: &Allocator,
    env: &BTreeMap<String, String>,
    advice: &[String],
) -> std::io::Result<()> {
    let (Some(first), Some(last)) = (samples.first(), samples.last()) else {
        return Ok(());
    };
    let g = growth(first, last);
    if json {
        let top: Vec<Value> = g.iter().take(TOP_REGIONS).map(growth_json).collect();
        line(w, "mem", mem_json(pid, name, last, alloc, env, advice, Some((samples.len(), top))))?;
        return w.flush();
    }
    if tty {
        // Clear the screen and home the cursor: the `watch` view.
        write!(w, "\x1b[H\x1b[2J")?;
    } else {
        writeln!(w, "--- sample {} at {:.1}s", samples.len(), last.time)?;
    }
    write_report(w, pid, name, last, alloc, env, advice)?;
    writeln!(w, "regions by growth since the first sample ({:.1}s ago):", last.time - first.time)?;
    writeln!(w, "{:>12} {:>11}  {:<33} {:<4} {:<14} path", "growth", "Rss+Swap", "range", "perm", "class")?;
    if g.is_empty() {
        writeln!(w, "(no region grew)")?;
    }
    for x in g.iter().take(TOP_REGIONS) {
        let m = &x.region.map;
        writeln!(
            w,
            "{:>12} {:>11}  {:<33} {:<4} {:<14} {}{}",
            signed_kb(x.growth),
            human(x.region.rss_swap()),
            format!("{:x}-{:x}", m.start, m.end),
            m.perms,
            x.class.name(),
            region_name(x.region),
            if x.new { " (new)" } else { "" }
        )?;
    }
    w.flush()
}

pub(super) fn growth_json(x: &Growth) -> Value {
    let m = &x.region.map;
    json!({
        "start": hex(m.start),
        "end": hex(m.end),
        "perms": m.perms,
        "path": m.path,
        "class": x.class.name(),
        "rss_swap_kb": x.region.rss_swap(),
        "growth_kb": i64::try_from(x.growth).unwrap_or(i64::MAX),
        "new": x.new,
    })
}

pub(super) fn mem_json(
    pid: Tid,
    name: &str,
    s: &Sample,
    alloc: &Allocator,
    env: &BTreeMap<String, String>,
    advice: &[String],
    watch: Option<(usize, Vec<Value>)>,
) -> Value {
    let classes: Vec<Value> = Class::ALL
        .iter()
        .map(|&c| {
            let t = s.by_class.get(&c).copied().unwrap_or_default();
            json!({
                "class": c.name(),
                "regions": t.regions,
                "size_kb": t.size,
                "rss_kb": t.rss,
                "swap_kb": t.swap,
                "pss_kb": t.pss,
                "rss_swap_kb": t.rss_swap(),
            })
        })
        .collect();
    let mut v = json!({
        "pid": pid,
        "name": name,
        "time": s.time,
        "total": {
            "regions": s.total.regions,
            "size_kb": s.total.size,
            "rss_kb": s.total.rss,
            "swap_kb": s.total.swap,
            "pss_kb": s.total.pss,
            "rss_swap_kb": s.total.rss_swap(),
        },
        "classes": classes,
        "anon_large_min_kb": memclass::ANON_LARGE / 1024,
        "arenas": {
            "heaps": s.arenas.heaps,
            "rss_swap_kb": s.arenas.rss_swap,
            "count": s.arenas.arenas.len(),
            "addrs": s.arenas.arenas.iter().map(|&a| hex(a)).collect::<Vec<_>>(),
            "unread_heaps": s.arenas.unread,
            "rejected": s.arenas.rejected,
        },
        "threads": {
            "count": s.threads.count,
            "located": s.threads.sps.len(),
            "stack_regions": s.by_class.get(&Class::Stack).map(|t| t.regions).unwrap_or(0),
        },
        "allocator": {
            "name": alloc.name,
            "library": alloc.library,
            "config": alloc.config.iter().map(|(k, v)| json!({"from": k, "value": v})).collect::<Vec<_>>(),
        },
        "env": env,
        "advice": advice,
    });
    if let Some((n, top)) = watch {
        v["sample"] = json!(n);
        v["growth"] = Value::Array(top);
    }
    v
}

fn plot(pid: Tid, name: &str, samples: &[Sample]) -> String {
    let t0 = samples.first().map(|s| s.time).unwrap_or(0.0);
    let times: Vec<f64> = samples.iter().map(|s| s.time - t0).collect();
    let series: Vec<Series> = Class::ALL
        .iter()
        .map(|&c| Series {
            label: c.describe(),
            values: samples.iter().map(|s| s.by_class.get(&c).map(|t| t.rss_swap()).unwrap_or(0)).collect(),
        })
        .collect();
    memplot::plot_svg(&format!("pid {pid} ({name}): Rss+Swap by class"), &times, &series)
}
