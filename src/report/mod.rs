//! One report model, several renderers over `Write`: text for people, JSON Lines for programs.

pub mod decode;
pub mod json;
pub mod text;

use crate::event::{Event, Summary};
use crate::stack::Stack;

/// A destination for events and the final summary.
pub trait Renderer {
    fn event(&mut self, ev: &Event, stack: Option<&Stack>) -> std::io::Result<()>;
    /// [`Self::event`] with an interned stack: the same `id` always comes with the same stack, so a renderer
    /// may render each distinct stack once and reuse it (a burst repeats a few stacks thousands of times).
    fn event_interned(&mut self, ev: &Event, stack: Option<(usize, &Stack)>) -> std::io::Result<()> {
        self.event(ev, stack.map(|(_, s)| s))
    }
    fn summary(&mut self, s: &Summary) -> std::io::Result<()>;
    /// The leak report (`--leaks`), after the events and before the summary.
    fn leaks(&mut self, report: &crate::leaks::LeakReport) -> std::io::Result<()>;
}

/// The return value as a signed number when it is an error (`-4095..=-1`).
pub fn errno_of(ret: u64) -> Option<i32> {
    let v = ret as i64;
    (-4095..0).contains(&v).then_some(-v as i32)
}

/// `ENOMEM` for 12.
pub fn errno_name(e: i32) -> String {
    let name = format!("{:?}", nix::errno::Errno::from_raw(e));
    if name == "UnknownErrno" { format!("errno {e}") } else { name }
}

pub fn syscall_name(nr: u64) -> String {
    crate::syscalls::name(nr).map(str::to_string).unwrap_or_else(|| format!("syscall_{nr}"))
}
