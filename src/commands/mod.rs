//! One file per subcommand: each takes its parsed arguments and returns the exit status.

pub mod demo;
pub mod hooks;
pub mod mem;
pub mod probe;
pub mod shell;
pub mod stack;
