//! Copies of a thread's stack taken at a stop ([`Window`]), in buffers recycled through a [`Windows`] pool.
//!
//! A matching hit copies up to `--stack-bytes` (64 KiB) of stack while the thread is stopped, and the copy lives
//! until the analysis has unwound it, on another thread. Allocating a fresh buffer per event made the allocator
//! grow its heap and trim it again as the copies were freed, so every capture faulted its pages in anew (about 10
//! us of a stopped thread's time per 64 KiB, and the first event paid for growing the heap). A pool keeps a few
//! buffers, already touched, and a window goes back to its pool wherever it is dropped.

use std::ops::Deref;
use std::sync::{Arc, Mutex};

/// Bytes copied from a thread's stack. Dereferences to the bytes; returns its buffer to its pool when dropped.
#[derive(Default)]
pub struct Window {
    bytes: Vec<u8>,
    /// Where the window's bytes begin in `bytes` (what was read before them was taken by [`Window::advance`]).
    start: usize,
    home: Option<Windows>,
}

impl Window {
    /// A window filled by `fill` in a buffer from `pool` (cleared, with room for the pool's size).
    pub fn filled_from(pool: &Windows, fill: impl FnOnce(&mut Vec<u8>)) -> Window {
        let mut bytes = pool.take();
        fill(&mut bytes);
        Window { bytes, start: 0, home: Some(pool.clone()) }
    }

    /// Drops the first `n` bytes (all of them if fewer), without moving the rest.
    pub fn advance(&mut self, n: usize) {
        self.start = self.start.saturating_add(n).min(self.bytes.len());
    }
}

impl From<Vec<u8>> for Window {
    fn from(bytes: Vec<u8>) -> Window {
        Window { bytes, start: 0, home: None }
    }
}

impl Deref for Window {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes[self.start..]
    }
}

impl AsRef<[u8]> for Window {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl Clone for Window {
    /// A copy owns a buffer of its own, outside the pool.
    fn clone(&self) -> Window {
        Window { bytes: self.to_vec(), start: 0, home: None }
    }
}

impl Drop for Window {
    fn drop(&mut self) {
        if let Some(home) = self.home.take() {
            home.give(std::mem::take(&mut self.bytes));
        }
    }
}

impl std::fmt::Debug for Window {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Window({} bytes)", self.len())
    }
}

/// A pool of stack buffers of one size, shared by the thread that fills them and the threads that drop them.
#[derive(Clone)]
pub struct Windows {
    free: Arc<Mutex<Vec<Vec<u8>>>>,
    size: usize,
    keep: usize,
}

impl Windows {
    /// How many bytes of idle buffers a pool keeps at most (at least [`Self::MIN_KEEP`] buffers).
    const KEEP_BYTES: usize = 4 << 20;
    const MIN_KEEP: usize = 4;

    /// A pool of `size`-byte buffers with `ready` of them allocated and touched now, so the first captures
    /// fault no page in.
    pub fn new(size: usize, ready: usize) -> Windows {
        let keep = (Self::KEEP_BYTES / size.max(1)).max(Self::MIN_KEEP);
        let free = (0..ready.min(keep))
            .map(|_| {
                let mut b = vec![0u8; size];
                // Written, not only allocated: calloc'd memory may be untouched zero pages.
                b.iter_mut().step_by(4096).for_each(|x| *x = 1);
                b.clear();
                b
            })
            .collect();
        Windows { free: Arc::new(Mutex::new(free)), size, keep }
    }

    /// An empty buffer with room for `size` bytes: a pooled one when there is one. Never waits for the lock (the
    /// tracer calls this with a thread of the target stopped, and the thread returning buffers runs at a low
    /// priority): a busy pool means a fresh buffer.
    fn take(&self) -> Vec<u8> {
        let pooled = self.free.try_lock().ok().and_then(|mut f| f.pop());
        let mut b = pooled.unwrap_or_default();
        b.clear();
        b.reserve(self.size);
        b
    }

    fn give(&self, b: Vec<u8>) {
        if b.capacity() < self.size {
            return;
        }
        if let Ok(mut f) = self.free.try_lock()
            && f.len() < self.keep
        {
            f.push(b);
        }
    }

    /// Idle buffers in the pool.
    pub fn idle(&self) -> usize {
        self.free.lock().map(|f| f.len()).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_window_goes_back_to_its_pool_and_is_reused() {
        let pool = Windows::new(4096, 2);
        assert_eq!(pool.idle(), 2);
        let mut w = Window::filled_from(&pool, |b| b.extend_from_slice(&[9, 1, 2, 3]));
        w.advance(1);
        assert_eq!((&w[..], pool.idle()), (&[1u8, 2, 3][..], 1));
        assert_eq!(&w.clone()[..], &[1, 2, 3]);
        let ptr = w.as_ptr().wrapping_sub(1);
        drop(w);
        assert_eq!(pool.idle(), 2);
        // The pool is a stack: the buffer just returned is the next one out, emptied.
        let again = Window::filled_from(&pool, |b| assert!(b.is_empty() && b.capacity() >= 4096));
        assert_eq!(again.as_ptr(), ptr);
    }

    #[test]
    fn a_pool_keeps_a_bounded_number_of_idle_buffers_and_copies_stay_outside() {
        let pool = Windows::new(1 << 20, 0);
        let ws: Vec<Window> = (0..10).map(|_| Window::filled_from(&pool, |b| b.push(7))).collect();
        let mut copy = ws[0].clone();
        copy.advance(5);
        assert!(copy.is_empty());
        drop(ws);
        assert_eq!(pool.idle(), Windows::MIN_KEEP);
        drop(copy);
        assert_eq!(pool.idle(), Windows::MIN_KEEP);
    }
}
