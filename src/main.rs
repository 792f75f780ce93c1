//! The `syscatch` command: parse the command line, run, and map errors to exit codes
//! (0: done as asked, 1: runtime error, 2: bad usage; with `-- CMD`, the command's own status).

use clap::Parser;
use syscatch::app::{self, trace::UsageError};
use syscatch::cli::{Cli, Command};

fn run(cli: Cli) -> anyhow::Result<i32> {
    match cli.command {
        None => app::trace::trace(&cli.trace),
        Some(Command::Stack(a)) => app::stack::run(&a),
        Some(Command::Mem(a)) => app::mem::run(&a),
        Some(Command::Hooks(a)) => app::hooks::run(&a),
        Some(Command::Run(a)) => app::probe::run(&a),
        Some(Command::Check(a)) => app::probe::check(&a),
        Some(Command::Report(a)) => app::report::run(&a),
        Some(Command::Demo(a)) => app::demo::run(&a),
        Some(Command::Completions(a)) => app::shell::completions(&a),
        Some(Command::Manpage(a)) => app::shell::manpage(&a),
    }
}

fn main() {
    if std::env::args_os().nth(1).is_some_and(|a| a == syscatch::live::guardian::SUBCOMMAND) {
        let args: Vec<String> = std::env::args_os().skip(2).map(|a| a.to_string_lossy().into_owned()).collect();
        std::process::exit(syscatch::live::guardian::main(&args));
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
    syscatch::app::crash::contain();
    let result = std::panic::catch_unwind(|| run(cli)).unwrap_or_else(|_| {
        let what = syscatch::app::crash::take().unwrap_or_else(|| "a panic".into());
        Err(anyhow::anyhow!("internal error: {what}"))
    });
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("syscatch: {e:#}");
            std::process::exit(if e.downcast_ref::<UsageError>().is_some() { 2 } else { 1 });
        }
    }
}
