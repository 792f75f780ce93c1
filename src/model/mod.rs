//! Plain data and pure parsers of text and bytes, shared by every layer: registers, events and stacks,
//! `/proc` maps, smaps and status text, ELF modules, syscall and mmap constants. No I/O, and no knowledge of the
//! live process or of any layer above.

pub mod addrmap;
pub mod bytes;
pub mod cgroup;
pub mod consts;
pub mod duration;
pub mod event;
pub mod known;
pub mod maps;
pub mod modules;
pub mod proctree;
pub mod regs;
pub mod schedstat;
pub mod sigframe;
pub mod smaps;
pub mod stack;
pub mod status;
pub mod syscalls;
pub mod watch;
pub mod window;

/// A thread id (or process id: the id of a thread group's leader).
pub type Tid = i32;
