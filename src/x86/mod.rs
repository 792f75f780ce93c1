//! x86_64 instructions: the displaced instruction at a breakpoint decoded (capstone) and emulated, and the
//! `--fast` trampoline planned and assembled. Pure: memory comes through a trait. Uses `model` only.

pub mod alloc;
pub mod breakpoints;
pub mod fixed;
pub mod gate;
pub mod known;
pub mod trampoline;
pub mod trappad;
