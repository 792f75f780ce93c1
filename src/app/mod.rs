//! The face: one file per subcommand, each the pipeline written out top to bottom (check the target, resolve,
//! attach, arm, trace, detach, analyse, report), returning the exit status. `trace` is the main one; `analyze` is
//! its analysis thread.

pub mod analyze;
pub mod capture;
pub mod choose;
pub mod crash;
pub mod demo;
pub mod findings;
pub mod heap;
pub mod hooks;
pub mod mem;
pub mod mem_many;
pub mod metrics;
pub mod outputs;
pub mod placement;
pub mod plans;
pub mod probe;
pub mod record;
pub mod report;
pub mod session;
pub mod session_files;
pub mod session_report;
pub mod shell;
pub mod sink;
pub mod stack;
pub mod trace;
pub mod watch;

use crate::app::trace::{GateFailed, UsageError};
use crate::cli::{Cli, Command};
use clap::Parser;

fn run(cli: Cli) -> anyhow::Result<i32> {
    match cli.command {
        None => trace::trace(&cli.trace),
        Some(Command::Stack(a)) => stack::run(&a),
        Some(Command::Mem(a)) => mem::run(&a),
        Some(Command::Hooks(a)) => hooks::run(&a),
        Some(Command::Run(a)) => probe::run(&a),
        Some(Command::Check(a)) => probe::check(&a),
        Some(Command::Report(a)) => report::run(&a),
        Some(Command::Watch(a)) => watch::run(&a),
        Some(Command::Demo(a)) => demo::run(&a),
        Some(Command::Completions(a)) => shell::completions(&a),
        Some(Command::Manpage(a)) => shell::manpage(&a),
    }
}

/// The `syscatch` command: parse the command line, run, and map errors to exit codes.
pub fn main() {
    // Before anything large is freed (see there).
    crate::os::return_large_blocks();
    if std::env::args_os().nth(1).is_some_and(|a| a == crate::live::guardian::SUBCOMMAND) {
        let args: Vec<String> = std::env::args_os().skip(2).map(|a| a.to_string_lossy().into_owned()).collect();
        std::process::exit(crate::live::guardian::main(&args));
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if e.use_stderr() => {
            // One line naming the problem (clap's own text adds a usage block and a hint).
            let text = e.to_string();
            let first = text.lines().next().unwrap_or("bad usage").trim_start_matches("error: ");
            eprintln!("syscatch: {first} (see --help)");
            std::process::exit(2);
        }
        Err(e) => e.exit(),
    };
    // Any panic becomes one line and exit status 1 (a trace contains its own first, detaching cleanly).
    crash::contain();
    let result = std::panic::catch_unwind(|| run(cli)).unwrap_or_else(|_| {
        let what = crash::take().unwrap_or_else(|| "a panic".into());
        Err(anyhow::anyhow!("internal error: {what}"))
    });
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("syscatch: {e:#}");
            let code = if e.downcast_ref::<UsageError>().is_some() {
                2
            } else if e.downcast_ref::<GateFailed>().is_some() {
                3
            } else {
                1
            };
            std::process::exit(code);
        }
    }
}
