//! One report model, several renderers over `Write`: text for people, JSON Lines for programs.

pub mod decode;
pub mod diff;
pub mod findings;
pub mod html;
pub mod json;
pub mod leaks;
pub mod memplot;
pub mod pprof;
pub mod text;

#[cfg(test)]
mod golden;

use crate::model::event::{Event, Summary};
use crate::model::stack::Stack;

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
    fn leaks(&mut self, report: &crate::analysis::leaks::LeakReport) -> std::io::Result<()>;
    /// Writes out what is buffered (the event file of report mode, before the report goes elsewhere).
    fn flush(&mut self) -> std::io::Result<()>;
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
    crate::model::syscalls::name(nr).map(str::to_string).unwrap_or_else(|| format!("syscall_{nr}"))
}

#[cfg(test)]
mod tests {
    use super::Renderer;
    use super::json::Json;
    use super::text::Text;
    use crate::model::event::Event;
    use crate::model::stack::{Frame, Stack};

    fn ev(ret: u64) -> Event {
        Event {
            time: 0.5,
            tid: 7,
            probe: None,
            func: None,
            nr: 9,
            args: [0, 4096, 3, 0x22, u64::MAX, 0],
            regs: Vec::new(),
            ret: Some(ret),
            ret_missing: None,
            capture: None,
            also: Vec::new(),
        }
    }

    fn stacks() -> [Stack; 2] {
        let f = |addr, function: &str| Frame {
            addr,
            module: Some("libc.so.6".into()),
            function: Some(function.into()),
            offset: Some(4),
            file: Some("a.c".into()),
            line: Some(3),
            inlined: false,
            ..Frame::default()
        };
        [
            Stack { frames: vec![f(0x1000, "syscall"), f(0x2000, "main")], truncated: None },
            Stack { frames: vec![f(0x3000, "g")], truncated: Some("the stack window ended".into()) },
        ]
    }

    /// Rendering a stack once per id and reusing it gives the bytes rendering every event in full gives.
    fn same_output(full: &mut dyn Renderer, interned: &mut dyn Renderer) {
        let st = stacks();
        for (i, id) in [0usize, 1, 0, 0, 1].into_iter().enumerate() {
            let e = ev(0x7f00_0000_0000 + i as u64 * 0x1000);
            full.event(&e, Some(&st[id])).unwrap();
            interned.event_interned(&e, Some((id, &st[id]))).unwrap();
        }
        full.event(&ev(u64::MAX - 11), None).unwrap();
        interned.event_interned(&ev(u64::MAX - 11), None).unwrap();
    }

    #[test]
    fn interned_stacks_render_as_full_ones() {
        let (mut a, mut b) = (Text::new(Vec::new(), std::io::sink()), Text::new(Vec::new(), std::io::sink()));
        same_output(&mut a, &mut b);
        assert!(String::from_utf8_lossy(&a.out).contains("#1  0x0000000000002000 main+0x4 (libc.so.6) at a.c:3"));
        assert_eq!(String::from_utf8_lossy(&a.out), String::from_utf8_lossy(&b.out));
        assert_eq!(b.cache.iter().flatten().count(), 2);
        let (mut a, mut b) = (Json::new(Vec::new()), Json::new(Vec::new()));
        same_output(&mut a, &mut b);
        assert!(String::from_utf8_lossy(&a.out).contains(r#""function":"main""#));
        assert_eq!(String::from_utf8_lossy(&a.out), String::from_utf8_lossy(&b.out));
        assert_eq!(b.cache.iter().flatten().count(), 2);
    }
}
