//! The face: one file per subcommand, each the pipeline written out top to bottom (check the target, resolve,
//! attach, arm, trace, detach, analyse, report), returning the exit status. `trace` is the main one; `analyze` is
//! its analysis thread.

pub mod analyze;
pub mod crash;
pub mod demo;
pub mod findings;
pub mod hooks;
pub mod mem;
pub mod probe;
pub mod record;
pub mod report;
pub mod shell;
pub mod stack;
pub mod trace;
