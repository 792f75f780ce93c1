//! Command-line definitions (clap) and their conversion into the configuration the library takes.
//! Nothing here touches a process.

use crate::analysis::leaks::Weight;
use crate::model::duration::{parse_duration, parse_offset, parse_rate, parse_size};
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::time::Duration;

/// `--version`: the crate version, the git commit and how the binary was built (build.rs).
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("SYSCATCH_BUILD_INFO"), ")");

/// The common tasks, shown after `--help` and in the man page's EXAMPLES: (command, what it does).
pub const EXAMPLES: &[(&str, &str)] = &[
    ("syscatch --pid 1234 --for 10s", "every mmap made through syscall(), with its stack"),
    ("syscatch --pid 1234 --leaks --for 1m", "which stacks mapped the memory that grew, and still hold it"),
    ("syscatch --pid 1234 --leaks --flamegraph leaks.svg", "the same as a flame graph of still-mapped bytes"),
    ("syscatch --syscall mmap,munmap --json -o ev.jsonl -- ./prog", "start a program under the tracer"),
    ("syscatch --pid 1234 --leaks --for 1m --record trace.rec", "the same, and keep everything captured"),
    ("syscatch report trace.rec --leaks", "the report again, later or elsewhere, from the recording"),
    ("syscatch mem --pid 1234", "memory by class from /proc, with advice (the target never stops)"),
    ("syscatch watch --pid 1234 --tree", "which process of a server grows, how fast, and its time to the limit"),
    ("syscatch stack --pid 1234", "every thread's stack once, like pstack"),
    ("syscatch hooks --pid 1234", "who intercepted mmap, munmap, malloc..."),
    ("syscatch demo", "try it on a bundled program that leaks"),
    ("syscatch completions bash > /etc/bash_completion.d/syscatch", "shell completion (bash, zsh, fish)"),
];

/// Tracing needs ptrace rights over the target.
pub const PERMISSIONS: &str =
    "Tracing needs root or CAP_SYS_PTRACE (in a container: --cap-add SYS_PTRACE); see docs/guide.md.";

fn examples_help() -> String {
    let mut s = String::from("Examples:\n");
    for (cmd, what) in EXAMPLES {
        s.push_str(&format!("  {what}:\n      {cmd}\n"));
    }
    s.push('\n');
    s.push_str(PERMISSIONS);
    s
}

#[derive(Parser, Debug)]
#[command(
    name = "syscatch",
    version = VERSION,
    after_help = examples_help(),
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
    /// Watch processes for hours from /proc alone (no ptrace): which grows, how fast, and when it meets its limit.
    Watch(WatchArgs),
    /// Analyse a recording (--record FILE) offline, as the live trace would have: events, --leaks report, files.
    Report(ReportArgs),
    /// Start a bundled program that leaks mappings through syscall(), and trace it.
    Demo(DemoArgs),
    /// Print a shell completion script (e.g. `syscatch completions bash > /etc/bash_completion.d/syscatch`).
    Completions(CompletionsArgs),
    /// Write man pages (syscatch.1 and one per subcommand) into DIR; used by scripts/dist.sh.
    #[command(hide = true)]
    Manpage(ManpageArgs),
}

#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    pub shell: clap_complete::Shell,
}

#[derive(Args, Debug)]
pub struct ManpageArgs {
    /// Directory to write the pages into (created if missing).
    pub dir: PathBuf,
}

/// The processes a command works on: the same options in every subcommand that takes `--pid`.
#[derive(Args, Debug, Clone)]
pub struct Select {
    /// Processes to look at, each with all of its threads and none of its siblings: pids, comma-separated or
    /// repeated (--pid 10,11 --pid 12). One that is not there is said in a line and the others go on (exit
    /// status 4).
    #[arg(short, long, value_delimiter = ',', value_name = "PID")]
    pub pid: Vec<i32>,
    /// Also every descendant of the --pid processes (children, grandchildren...) found in /proc, without stopping
    /// anyone; zombies are skipped.
    #[arg(long, requires = "pid")]
    pub tree: bool,
    /// Refuse a selection of more processes than this.
    #[arg(long, default_value_t = crate::live::selection::MAX_PROCESSES, value_name = "N")]
    pub max_processes: usize,
}

impl Default for Select {
    fn default() -> Select {
        Select { pid: Vec::new(), tree: false, max_processes: crate::live::selection::MAX_PROCESSES }
    }
}

#[derive(Args, Debug, Default, Clone)]
pub struct TraceArgs {
    #[command(flatten)]
    pub select: Select,
    /// Syscalls to catch: names or numbers, comma-separated. Caught through libc's syscall() and, for mmap,
    /// munmap and mremap, at libc's own mmap(), munmap() and mremap() too.
    #[arg(short, long, default_value = "mmap", value_delimiter = ',')]
    pub syscall: Vec<String>,
    /// Catch the --syscall calls only where they go through libc's syscall() wrapper (raw syscall(SYS_mmap, ...)),
    /// not at libc's own mmap(), munmap(), mremap().
    #[arg(long, conflicts_with = "leaks")]
    pub only_syscall_wrapper: bool,
    /// Stop after this long (500ms, 10s, 2m); default: until Ctrl-C or the target exits. A command started
    /// with `-- CMD` is then detached and left running (syscatch returns 0).
    #[arg(long = "for", value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// JSON Lines output (schema in docs/guide.md).
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
    /// Also sample the allocations of malloc, calloc, realloc, posix_memalign, aligned_alloc and the others, about
    /// one per --malloc-every bytes allocated, and report the stacks that hold the most heap (implies --leaks).
    #[arg(long, conflicts_with = "no_fast")]
    pub malloc: bool,
    /// With --malloc: the mean bytes allocated between two samples (each byte is sampled with probability 1/BYTES).
    #[arg(long, value_parser = parse_size, value_name = "BYTES", default_value = "512KiB")]
    pub malloc_every: u64,
    /// Also sample page faults, one in --fault-every of each thread, with their stacks, and charge the growth no
    /// call explains (pages first touched in memory mapped or committed before the trace) to them (implies
    /// --leaks).
    #[arg(long)]
    pub faults: bool,
    /// With --faults: sample one page fault in this many, per thread (each sample stops its thread once).
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..))]
    pub fault_every: u64,
    /// With --leaks: how often to sample the target's regions (/proc/PID/maps, and pagemap for the regions that
    /// changed or hold traced calls; the whole /proc/PID/smaps is read before and after the trace).
    #[arg(long, value_parser = parse_duration, default_value = "1s")]
    pub smaps_every: Duration,
    /// Write collapsed stacks weighted by growth (or --weight) for flame graph tools to FILE (implies --leaks).
    #[arg(long)]
    pub folded: Option<PathBuf>,
    /// Write a flame graph SVG of growth (or --weight) by stack to FILE (implies --leaks).
    #[arg(long)]
    pub flamegraph: Option<PathBuf>,
    /// What --folded and --flamegraph weigh stacks by: growth (bytes mapped and kept in the middle of the trace,
    /// steadily), still-mapped, resident, mapped or calls.
    #[arg(long, value_enum, default_value_t = Weight::Growth)]
    pub weight: Weight,
    /// With --leaks: exit with status 3 and one line when the traced stacks grow faster than RATE (10MiB/min,
    /// 500KiB/s, 1GB/h), after the report (a CI gate).
    #[arg(long, value_parser = parse_rate, value_name = "RATE")]
    pub fail_over: Option<f64>,
    /// With --leaks: more findings rules (JSON, format in docs/guide.md), added to the shipped ones; a rule with a
    /// shipped rule's id replaces it.
    #[arg(long)]
    pub rules: Option<PathBuf>,
    /// Write a gzipped pprof profile (profile.proto: growth, still-mapped, resident and mapped bytes, mmap
    /// calls and all calls by stack; growth the default) to FILE (implies --leaks).
    #[arg(long)]
    pub pprof: Option<PathBuf>,
    /// Write --malloc's sampled allocations as a gzipped pprof heap profile to FILE (inuse_space, inuse_objects,
    /// alloc_space, alloc_objects by stack, estimated; implies --malloc).
    #[arg(long, value_name = "FILE", conflicts_with = "no_fast")]
    pub heap_pprof: Option<PathBuf>,
    /// Write the report as one self-contained HTML page to FILE: findings, a timeline, a flame graph to zoom
    /// and search, the tables of stacks and regions (implies --leaks).
    #[arg(long)]
    pub html: Option<PathBuf>,
    /// In-process filter, the default: non-matching calls never stop, nor a matching call whose stack was
    /// unwound before (a trampoline page near libc; where it cannot go, a breakpoint, said at attach).
    #[arg(long, conflicts_with = "no_fast")]
    pub fast: bool,
    /// Breakpoints only, no trampoline: every watched call stops (as gdb's conditional breakpoints do).
    #[arg(long)]
    pub no_fast: bool,
    /// With --fast: stop at every matching call, even one whose stack (native and Python) was unwound before;
    /// by default such a call is written down without a stop and reported with that stack.
    #[arg(long)]
    pub no_known_stacks: bool,
    /// Also write everything captured to FILE (gzipped), to analyse later with `syscatch report FILE`.
    #[arg(long)]
    pub record: Option<PathBuf>,
    /// With --leaks: every DURATION, write the report's files (--html, --pprof, --folded, --flamegraph) of the
    /// trace so far, each replacing the last, so a long trace has its evidence before it ends.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub every: Option<Duration>,
    /// With --leaks: serve the trace's figures (anonymous memory, its growth rate, the top stacks' rates and
    /// bytes) at http://ADDR/metrics in the Prometheus text format, and the trace so far's pprof profile at
    /// /debug/pprof/allocs, refreshed every 5 s (ADDR: IP:PORT, such as 127.0.0.1:9464).
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
    /// Program to start under the tracer (instead of --pid).
    #[arg(last = true)]
    pub cmd: Vec<String>,
}

impl TraceArgs {
    /// Whether allocations are sampled: `--malloc`, or `--heap-pprof`, which implies it.
    pub fn samples_allocations(&self) -> bool {
        self.malloc || self.heap_pprof.is_some()
    }
}

#[derive(Args, Debug)]
pub struct StackArgs {
    #[command(flatten)]
    pub select: Select,
    #[arg(long)]
    pub json: bool,
    #[arg(long, default_value_t = 128)]
    pub stack_depth: usize,
    #[arg(long, default_value_t = 65536)]
    pub stack_bytes: usize,
}

#[derive(Args, Debug)]
pub struct MemArgs {
    #[command(flatten)]
    pub select: Select,
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
pub struct WatchArgs {
    #[command(flatten)]
    pub select: Select,
    /// How often to sample each process (its smaps_rollup; the whole smaps about once a minute).
    #[arg(long, value_parser = parse_duration, default_value = "5s")]
    pub every: Duration,
    /// The growth rate is the trend over this much of the latest samples.
    #[arg(long, value_parser = parse_duration, default_value = "10m")]
    pub window: Duration,
    /// Stop after this long; default: until Ctrl-C, or until every process watched has exited.
    #[arg(long = "for", value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// JSON Lines (the default when the output is not a terminal; schema in docs/guide.md).
    #[arg(long)]
    pub json: bool,
    /// Capture a process (the --leaks trace, files into --out) once its growth rate is surely over RATE
    /// (20MiB/min: the lower end of its interval).
    #[arg(long, value_parser = parse_rate, value_name = "RATE", requires = "out")]
    pub trigger: Option<f64>,
    /// Capture a process once, at its rate, it meets its memory limit within DURATION (30m).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", requires = "out")]
    pub trigger_oom: Option<Duration>,
    /// How long a capture traces.
    #[arg(long, value_parser = parse_duration, default_value = "2m")]
    pub capture: Duration,
    /// The directory the captures write their files into (syscatch-PID-UTCTIME.txt, .html, .rec, .pb.gz, .jsonl).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// At most one capture of a process in this long.
    #[arg(long, value_parser = parse_duration, default_value = "30m")]
    pub cooldown: Duration,
    /// Serve the figures at http://ADDR/metrics in the Prometheus text format, and the latest capture's pprof at
    /// /debug/pprof/allocs (ADDR: 127.0.0.1:9464; port 0 takes a free one, said on stderr).
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
}

#[derive(Args, Debug)]
pub struct HooksArgs {
    #[command(flatten)]
    pub select: Select,
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
    /// Also write everything captured to FILE, for `syscatch report FILE`.
    #[arg(long)]
    pub record: Option<PathBuf>,
    /// Breakpoints only, no trampoline: every call at a probe's location stops (by default a probe that decides
    /// from the call's number and arguments alone goes through --fast's in-process filter).
    #[arg(long)]
    pub no_fast: bool,
    /// Stop at every matching call, even one whose stack was unwound before.
    #[arg(long)]
    pub no_known_stacks: bool,
}

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// A recording made with --record FILE.
    pub file: PathBuf,
    /// JSON Lines output (schema in docs/guide.md).
    #[arg(long)]
    pub json: bool,
    /// Write events to FILE instead of stdout.
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Most frames per stack.
    #[arg(long, default_value_t = 128)]
    pub stack_depth: usize,
    /// The leak report with its findings (the recording samples smaps whether or not the trace had --leaks).
    #[arg(long)]
    pub leaks: bool,
    /// Write collapsed stacks weighted by growth (or --weight) to FILE (implies --leaks).
    #[arg(long)]
    pub folded: Option<PathBuf>,
    /// Write a flame graph SVG of growth (or --weight) by stack to FILE (implies --leaks).
    #[arg(long)]
    pub flamegraph: Option<PathBuf>,
    /// What --folded and --flamegraph weigh stacks by.
    #[arg(long, value_enum, default_value_t = Weight::Growth)]
    pub weight: Weight,
    /// Exit with status 3 and one line when the traced stacks grow faster than RATE (10MiB/min) (implies --leaks).
    #[arg(long, value_parser = parse_rate, value_name = "RATE")]
    pub fail_over: Option<f64>,
    /// Report only from this far into the trace (5s; implies --leaks).
    #[arg(long, value_parser = parse_offset, value_name = "OFFSET")]
    pub from: Option<Duration>,
    /// Report only up to this far into the trace (15s; implies --leaks).
    #[arg(long, value_parser = parse_offset, value_name = "OFFSET")]
    pub to: Option<Duration>,
    /// Compare with the recording BASE: per stack (matched by its symbolized frames), growth in each and the
    /// change, largest first (`syscatch report --diff BASE.rec NEW.rec`).
    #[arg(long, value_name = "BASE")]
    pub diff: Option<PathBuf>,
    /// Write a gzipped pprof profile to FILE (implies --leaks).
    #[arg(long)]
    pub pprof: Option<PathBuf>,
    /// Write the report as one self-contained HTML page to FILE (implies --leaks).
    #[arg(long)]
    pub html: Option<PathBuf>,
    /// With --leaks: more findings rules (JSON, format in docs/guide.md).
    #[arg(long)]
    pub rules: Option<PathBuf>,
    /// Of a recording of several processes, report only process PID.
    #[arg(short, long, value_name = "PID")]
    pub pid: Option<i32>,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_and_subcommands() {
        let c = Cli::try_parse_from(["syscatch", "--pid", "5", "--syscall", "mmap,munmap", "--for", "1s"]).unwrap();
        assert_eq!(c.trace.select.pid, [5]);
        assert_eq!(c.trace.syscall, ["mmap", "munmap"]);
        let c = Cli::try_parse_from(["syscatch", "--json", "--", "ls", "-l"]).unwrap();
        assert_eq!(c.trace.cmd, ["ls", "-l"]);
        let c = Cli::try_parse_from(["syscatch", "stack", "--pid", "7"]).unwrap();
        assert!(matches!(c.command, Some(Command::Stack(StackArgs { ref select, .. })) if select.pid == [7]));
        let c = Cli::try_parse_from(["syscatch", "mem", "--pid", "7,8", "-p", "9", "--pid", "7", "--tree"]).unwrap();
        assert!(matches!(c.command, Some(Command::Mem(MemArgs { ref select, .. }))
            if select.pid == [7, 8, 9, 7] && select.tree && select.max_processes == 64));
        assert!(Cli::try_parse_from(["syscatch", "hooks", "--tree"]).is_err(), "--tree needs --pid");
        assert!(Cli::try_parse_from(["syscatch", "stack", "--pid", "7,x"]).is_err());
        assert!(Cli::try_parse_from(["syscatch", "--for", "soon"]).is_err());
        let c = Cli::try_parse_from(["syscatch", "completions", "zsh"]).unwrap();
        assert!(matches!(c.command, Some(Command::Completions(CompletionsArgs { shell: clap_complete::Shell::Zsh }))));
        assert!(Cli::try_parse_from(["syscatch", "completions", "tcsh"]).is_err());
        let c = Cli::try_parse_from(["syscatch", "--pid", "5", "--leaks", "--no-fast"]).unwrap();
        assert!(c.trace.no_fast && !c.trace.fast);
        assert!(Cli::try_parse_from(["syscatch", "--pid", "5", "--leaks", "--fast", "--no-fast"]).is_err());
    }

    #[test]
    fn definitions_are_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
        assert!(VERSION.starts_with(env!("CARGO_PKG_VERSION")) && VERSION.contains("commit "), "{VERSION}");
    }
}
