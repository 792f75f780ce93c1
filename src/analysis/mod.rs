//! Everything after capture, over plain data: the DWARF CFI unwinder, the symbolizer, the address-space model
//! that correlates calls with smaps samples, the leak report, memory classes. Never opens `/proc`: what it needs
//! of the target comes in as values or through traits. Uses `model` only.

pub mod correlate;
pub mod faults;
pub mod findings;
pub mod growth;
pub mod known;
pub mod leaks;
pub mod memclass;
pub mod modules;
pub mod mstate;
pub mod rules;
pub mod samples;
pub mod symbolize;
pub mod trend;
pub mod unwind;
