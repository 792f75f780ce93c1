//! The processes a command works on, chosen the same way for every subcommand that takes `--pid`: the pids
//! named, each once, and with `--tree` their descendants. What was left out is said here, one line each, before
//! the command starts; the command's exit status says whether any pid named was missing.

use crate::app::trace::usage;
use crate::cli::Select;
use crate::live::selection::{self, SelectError, Selection};
use anyhow::Result;

/// The selection of `s`, its notes said on stderr; usage errors (nothing named, too many) exit with status 2.
pub fn choose(s: &Select) -> Result<Selection> {
    let sel = selection::select(&s.pid, s.tree, s.max_processes).map_err(|e| match e {
        SelectError::Empty | SelectError::TooMany { .. } => usage(e.to_string()),
        e => anyhow::Error::new(e),
    })?;
    for n in &sel.notes {
        eprintln!("syscatch: {n}");
    }
    Ok(sel)
}
