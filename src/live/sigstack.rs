//! The stacks a capture must copy besides its own: a handler running on an alternate signal stack
//! (`sigaltstack`) was called on another stack than the code it interrupted, and the unwind crosses from one to
//! the other at the signal frame. While the thread is stopped, the signal frames in the copy just taken say
//! where the interrupted stacks are (their saved rsp); each is copied too, up to the same length.

use crate::model::sigframe::{MAX_STACKS, interrupted_stacks};
use crate::model::window::Window;
use crate::os::Tid;

/// The signal restorers of process `pid`'s libc (glibc's `__restore_rt`); empty when libc cannot be read (then
/// only the thread's own stack is copied, as before).
pub fn read_restorers(pid: Tid) -> Vec<u64> {
    let Ok(maps) = crate::live::resolve::read_maps(pid) else { return Vec::new() };
    let Some(libc) = crate::live::resolve::find_libc(&maps) else { return Vec::new() };
    crate::live::resolve::read_module(pid, &libc, None).map(|m| m.restorers()).unwrap_or_default()
}

/// Copies of the stacks interrupted by the signal frames found in `stack` (copied at `sp`), and in those copies in
/// turn, each read by `read(addr, len, buf)` (the thread is stopped: the copies are of one moment). A cheap scan
/// when there is no such frame, which is almost always.
pub fn read_interrupted(
    read: impl Fn(u64, usize, &mut Vec<u8>),
    restorers: &[u64],
    sp: u64,
    stack: &[u8],
    len: usize,
) -> Vec<(u64, Window)> {
    let mut more = Vec::new();
    if restorers.is_empty() || stack.is_empty() || len == 0 {
        return more;
    }
    let mut copied = vec![(sp, stack.len())];
    let mut todo = interrupted_stacks(sp, stack, restorers, &copied);
    let mut next = 0;
    while let Some(&at) = todo.get(next) {
        next += 1;
        if copied.len() >= MAX_STACKS {
            break;
        }
        if copied.iter().any(|&(s, n)| at >= s && at - s < n as u64) {
            continue;
        }
        let mut b = Vec::new();
        read(at, len, &mut b);
        if b.is_empty() {
            continue;
        }
        copied.push((at, b.len()));
        todo.extend(interrupted_stacks(at, &b, restorers, &copied));
        more.push((at, Window::from(b)));
    }
    more
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::sigframe::{MC_RSP, MCONTEXT};

    #[test]
    fn copies_each_interrupted_stack_once_and_no_more_than_the_limit() {
        const R: u64 = 0x7777_0000;
        let rsp_at = 8 + (MCONTEXT + MC_RSP) as usize;
        // Stack i (at 0x1000 * (i + 1)) holds a signal frame interrupting stack i + 1; stack 1 also one
        // interrupting itself.
        let stack_at = |i: u64| 0x1000 * (i + 1);
        let image = |i: u64| {
            let mut b = vec![0u8; 0x200];
            b[0x10..0x18].copy_from_slice(&R.to_le_bytes());
            b[0x10 + rsp_at..0x18 + rsp_at].copy_from_slice(&stack_at(i + 1).to_le_bytes());
            b[0x100..0x108].copy_from_slice(&R.to_le_bytes());
            b[0x100 + rsp_at..0x108 + rsp_at].copy_from_slice(&(stack_at(i) + 8).to_le_bytes());
            b
        };
        let reads = std::cell::RefCell::new(Vec::new());
        let read = |at: u64, len: usize, buf: &mut Vec<u8>| {
            reads.borrow_mut().push(at);
            buf.extend_from_slice(&image(at / 0x1000 - 1)[..len.min(0x200)]);
        };
        let more = read_interrupted(read, &[R], stack_at(0), &image(0), 0x200);
        let at: Vec<u64> = more.iter().map(|(a, _)| *a).collect();
        assert_eq!(at, [stack_at(1), stack_at(2), stack_at(3)]);
        assert_eq!(*reads.borrow(), at);
        assert!(more.iter().all(|(_, w)| w.len() == 0x200));
        assert!(read_interrupted(read, &[], stack_at(0), &image(0), 0x200).is_empty());
        // A frame pointing at unreadable memory copies nothing.
        assert!(read_interrupted(|_, _, _| {}, &[R], stack_at(0), &image(0), 0x200).is_empty());
    }
}
