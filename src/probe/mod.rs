//! Probe scripts (`syscatch run FILE`, `syscatch check FILE`): a small declarative language naming where to
//! stop (a syscall through libc's `syscall()`, a function, an address), when a hit counts (a condition over
//! registers and arguments), and what to collect. `parse` turns text into an [`ast::Script`], `print` turns it
//! back, `check` applies the rules and resolves locations in a live process; the tracer consumes the AST and
//! evaluates conditions with [`eval`]. The language is documented in docs/probes.md.

pub mod ast;
pub mod check;
pub mod error;
pub mod parse;
pub mod print;
pub mod run;

pub use ast::*;
pub use check::{check_script, resolve_locations};
pub use error::Error;
pub use parse::{ParseError, parse, parse_str};
pub use print::print;

#[cfg(test)]
mod tests;
