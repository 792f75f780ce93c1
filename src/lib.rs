//! syscatch: find who makes a process's memory grow outside the malloc heap.
//!
//! Data flow: `cli` -> `app` (the pipeline) -> `os` (the only code touching the kernel) -> `tracer` (event loop)
//! -> [`event::Event`]s -> `report` renderers. Everything after capture works on plain data.

pub mod analysis;
pub mod app;
pub mod breakpoints;
pub mod cli;
pub mod commands;
pub mod correlate;
pub mod crash;
pub mod event;
pub mod findings;
pub mod guardian;
pub mod hooks;
pub mod leaks;
pub mod mappaths;
pub mod memclass;
pub mod memplot;
pub mod model;
pub mod modules;
pub mod os;
pub mod probe;
pub mod procinfo;
pub mod procmaps;
pub mod python;
pub mod report;
pub mod resolve;
pub mod rules;
pub mod smaps;
pub mod snapshot;
pub mod stack;
pub mod symbolize;
pub mod syscalls;
pub mod tracer;
pub mod trampoline;
pub mod trappad;
pub mod unwind;
pub mod unwind_modules;
