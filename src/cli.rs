//! Command-line definitions (clap) and their conversion into the configuration the library takes.
//! Nothing here touches a process.

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(
    name = "syscatch",
    version,
    about = "Find who makes a process's memory grow outside the malloc heap: catch syscall() calls with their \
             returned addresses and full stacks, on a live process, without stopping it.",
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub trace: TraceArgs,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Dump every thread's stack once (like eu-stack or pstack), stopping each thread only for its own copy.
    Stack(StackArgs),
    /// Break down a process's memory by class from /proc alone (no ptrace).
    Mem(MemArgs),
    /// Find GOT entries and function entries of memory functions that were intercepted.
    Hooks(HooksArgs),
    /// Run the probes of a probe script.
    Run(RunArgs),
    /// Check a probe script (and with --pid, resolve its locations) without attaching.
    Check(CheckArgs),
    /// Start a bundled program that leaks mappings through syscall(), and trace it.
    Demo(DemoArgs),
}

#[derive(Args, Debug, Default, Clone)]
pub struct TraceArgs {
    /// Process to attach to (all of its threads, none of its sibling processes).
    #[arg(short, long)]
    pub pid: Option<i32>,
    /// Syscalls to catch through libc's syscall(): names or numbers, comma-separated.
    #[arg(short, long, default_value = "mmap", value_delimiter = ',')]
    pub syscall: Vec<String>,
    /// Stop after this long (500ms, 10s, 2m); default: until Ctrl-C or the target exits.
    #[arg(long = "for", value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// JSON Lines output (schema in README.md).
    #[arg(long)]
    pub json: bool,
    /// Write events to FILE instead of stdout.
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Most frames per stack.
    #[arg(long, default_value_t = 128)]
    pub stack_depth: usize,
    /// Bytes of stack copied per captured call (0: no stacks).
    #[arg(long, default_value_t = 65536)]
    pub stack_bytes: usize,
    /// Trace mmap, munmap and mremap together, sample /proc/PID/smaps, and report which stacks made the memory
    /// that grew and how much of it is still mapped.
    #[arg(long)]
    pub leaks: bool,
    /// With --leaks: how often to sample /proc/PID/smaps.
    #[arg(long, value_parser = parse_duration, default_value = "1s")]
    pub smaps_every: Duration,
    /// Write collapsed stacks weighted by still-mapped bytes (for flame graph tools) to FILE (implies --leaks).
    #[arg(long)]
    pub folded: Option<PathBuf>,
    /// Write a flame graph SVG of still-mapped bytes by stack to FILE (implies --leaks).
    #[arg(long)]
    pub flamegraph: Option<PathBuf>,
    /// With --leaks: more findings rules (JSON, format in README.md), added to the shipped ones; a rule with a
    /// shipped rule's id replaces it.
    #[arg(long)]
    pub rules: Option<PathBuf>,
    /// Write a gzipped pprof profile (profile.proto: still-mapped bytes, resident bytes, calls by stack) to FILE
    /// (implies --leaks).
    #[arg(long)]
    pub pprof: Option<PathBuf>,
    /// In-process filter: non-matching calls never stop (a trampoline page near libc; falls back to int3).
    #[arg(long)]
    pub fast: bool,
    /// Program to start under the tracer (instead of --pid).
    #[arg(last = true)]
    pub cmd: Vec<String>,
}

#[derive(Args, Debug)]
pub struct StackArgs {
    #[arg(short, long)]
    pub pid: i32,
    #[arg(long)]
    pub json: bool,
    #[arg(long, default_value_t = 128)]
    pub stack_depth: usize,
    #[arg(long, default_value_t = 65536)]
    pub stack_bytes: usize,
}

#[derive(Args, Debug)]
pub struct MemArgs {
    #[arg(short, long)]
    pub pid: i32,
    #[arg(long)]
    pub json: bool,
    /// Refresh every interval, showing regions sorted by growth.
    #[arg(long, value_parser = parse_duration)]
    pub watch: Option<Duration>,
    #[arg(long = "for", value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Write a plot of Rss+Swap over time by class to FILE (SVG), with --watch.
    #[arg(long)]
    pub plot: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct HooksArgs {
    #[arg(short, long)]
    pub pid: i32,
    #[arg(long)]
    pub json: bool,
    /// More functions to check, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub symbols: Vec<String>,
    /// More modules whose function entries are compared with the file.
    #[arg(long)]
    pub module: Vec<String>,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// The probe script.
    pub file: PathBuf,
    #[arg(short, long)]
    pub pid: i32,
    /// Overrides the script's `set duration`.
    #[arg(long = "for", value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Overrides the script's `set format`.
    #[arg(long)]
    pub json: bool,
    /// Write events to FILE instead of stdout.
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Bytes of stack copied per captured call.
    #[arg(long, default_value_t = 65536)]
    pub stack_bytes: usize,
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    pub file: PathBuf,
    #[arg(short, long)]
    pub pid: Option<i32>,
}

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// How long to trace the demo.
    #[arg(long = "for", value_parser = parse_duration, default_value = "5s")]
    pub duration: Duration,
    #[arg(long)]
    pub json: bool,
}

/// Parses `500ms`, `10s`, `2m`, `1h`, or a plain number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num.parse().map_err(|_| format!("bad duration `{s}`: expected e.g. 500ms, 10s, 2m"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "" | "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => {
            return Err(format!("bad duration `{s}`: unknown unit `{unit}` (use ms, s, m or h)"));
        }
    };
    if !secs.is_finite() || secs <= 0.0 || secs > 1e9 {
        return Err(format!("bad duration `{s}`: must be positive"));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert!(parse_duration("10x").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("-1s").is_err());
    }

    #[test]
    fn trace_and_subcommands() {
        let c = Cli::try_parse_from(["syscatch", "--pid", "5", "--syscall", "mmap,munmap", "--for", "1s"]).unwrap();
        assert_eq!(c.trace.pid, Some(5));
        assert_eq!(c.trace.syscall, ["mmap", "munmap"]);
        let c = Cli::try_parse_from(["syscatch", "--json", "--", "ls", "-l"]).unwrap();
        assert_eq!(c.trace.cmd, ["ls", "-l"]);
        let c = Cli::try_parse_from(["syscatch", "stack", "--pid", "7"]).unwrap();
        assert!(matches!(c.command, Some(Command::Stack(StackArgs { pid: 7, .. }))));
        assert!(Cli::try_parse_from(["syscatch", "--for", "soon"]).is_err());
    }
}
