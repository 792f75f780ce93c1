//! The `syscatch` command: parse the command line, run, and map errors to exit codes
//! (0: done as asked, 1: runtime error, 2: bad usage; with `-- CMD`, the command's own status).

use clap::Parser;
use syscatch::app::{self, UsageError};
use syscatch::cli::{Cli, Command};

fn run(cli: Cli) -> anyhow::Result<i32> {
    match cli.command {
        None => app::trace(&cli.trace),
        Some(Command::Demo(_))
        | Some(Command::Stack(_))
        | Some(Command::Mem(_))
        | Some(Command::Hooks(_)) => Err(app::usage("this subcommand is not available yet")),
        Some(Command::Run(_)) | Some(Command::Check(_)) => {
            Err(app::usage("probe scripts are not available yet"))
        }
    }
}

fn main() {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("syscatch: {e:#}");
            std::process::exit(if e.downcast_ref::<UsageError>().is_some() {
                2
            } else {
                1
            });
        }
    }
}
