//! syscatch: find who makes a process's memory grow outside the malloc heap.
//!
//! Layers, each a folder; arrows point down this list, never up:
//! - `app`: the pipeline of each subcommand written out top to bottom, sinks, exit codes (uses everything);
//! - `probe`: the probe language, compiled to `live`'s plan; `hooks`: GOT and inline hook forensics; `python`:
//!   CPython frames (each of these two splits pure parsing from its one module of live reads);
//! - `live`: one live target: the tracer and its plan, module resolution, stack snapshots (uses `os`);
//! - `report`: every renderer, over plain data; `analysis`: unwind, symbolize, correlate, leaks, memory classes;
//! - `x86`: instruction decode and emulation, trampoline assembly;
//! - `os`: the only code with syscalls, `/proc` I/O and `unsafe`;
//! - `model`: plain data and pure parsers of text and bytes.
//!
//! Only `os`, `live`, `python::live` and `hooks::read` touch the target; everything from unwinding on works on
//! captured data, live or recorded (`--record`, `syscatch report`). The picture and the path of one event:
//! docs/architecture.md.

#![deny(unsafe_code)]

pub mod analysis;
pub mod app;
pub mod cli;
pub mod hooks;
pub mod live;
pub mod model;
#[allow(unsafe_code)]
pub mod os;
pub mod probe;
pub mod python;
pub mod report;
pub mod x86;
