//! The tracer's side of the queue to the analysis: events go on without making the target wait (see
//! [`ChannelSink`]).

use crate::app::analyze as analysis;
use crate::model::event::{Event, Sink};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

/// Sends events to the analysis thread without making the target wait on it. While the analysis keeps up, each
/// event goes with its stack window; when [`Self::WINDOWS`] windows are already queued, the record goes without
/// its window (counted, and the event says so): a burst never waits on unwinding and rendering. (A call of a
/// known stack keeps its capture: a few KiB, never unwound again.) Only when
/// [`Self::RECORDS`] records are queued (nobody reads our output: a pager not scrolled, a stopped consumer) does
/// the tracer wait, a second at most; then events are dropped and counted: blocking on would leave every thread
/// of the target stopped at its next hit, and Ctrl-C unheard.
pub struct ChannelSink {
    tx: crossbeam_channel::Sender<analysis::Queued>,
    dropped: u64,
    /// Events sent without their stack window.
    windows_dropped: u64,
    /// The queue stayed full for [`Self::STALL`]: the output is stuck; don't wait again until it moves.
    stalled: bool,
    /// Stack windows queued and not yet taken by the unwinding (which counts them down).
    windows: Arc<AtomicUsize>,
}

impl ChannelSink {
    pub fn new(tx: crossbeam_channel::Sender<analysis::Queued>, windows: Arc<AtomicUsize>) -> ChannelSink {
        ChannelSink { tx, dropped: 0, windows_dropped: 0, stalled: false, windows }
    }

    /// What was dropped, for the summary's warnings.
    pub fn say_drops(&self, warnings: &mut Vec<String>) {
        if self.dropped > 0 {
            warnings.push(format!(
                "{} events were dropped: the output was not read for over a second (they are counted in the totals \
                 above)",
                self.dropped
            ));
        }
        if self.windows_dropped > 0 {
            warnings.push(format!(
                "{} events were reported without their stack: the analysis was behind, so their stack windows were \
                 dropped to keep the target running (their calls, arguments and results are complete)",
                self.windows_dropped
            ));
        }
    }

    /// How long the tracer waits for a full queue before it stops waiting.
    const STALL: Duration = Duration::from_secs(1);
    /// Queued events that may carry a stack window (each up to --stack-bytes): bounds syscatch's memory.
    const WINDOWS: usize = 256;
    /// Queued records (a few hundred bytes each, without a window).
    pub const RECORDS: usize = analysis::QUEUED_RECORDS;
}

impl Sink for ChannelSink {
    fn behind(&self) -> bool {
        self.tx.len() * 2 >= Self::RECORDS
    }

    fn event(&mut self, mut ev: Event) {
        // A known stack's capture is cut to what its unwind read, and the unwinding has that unwind already: kept,
        // and not counted.
        let window = ev.capture.as_ref().is_some_and(|c| c.known_id.is_none());
        let stack_dropped = window && self.windows.load(Relaxed) >= Self::WINDOWS;
        if stack_dropped {
            ev.capture = None;
            self.windows_dropped += 1;
        } else if window {
            self.windows.fetch_add(1, Relaxed);
        }
        let q = analysis::Queued::Call { ev, stack_dropped, numbered: analysis::Numbered::No };
        let sent = if self.stalled {
            match self.tx.try_send(q) {
                Ok(()) => {
                    self.stalled = false;
                    true
                }
                Err(crossbeam_channel::TrySendError::Full(_)) => {
                    self.dropped += 1;
                    false
                }
                Err(crossbeam_channel::TrySendError::Disconnected(_)) => false,
            }
        } else {
            match self.tx.send_timeout(q, Self::STALL) {
                Ok(()) => true,
                Err(crossbeam_channel::SendTimeoutError::Timeout(_)) => {
                    self.dropped += 1;
                    self.stalled = true;
                    false
                }
                Err(crossbeam_channel::SendTimeoutError::Disconnected(_)) => false,
            }
        };
        if window && !stack_dropped && !sent {
            self.windows.fetch_sub(1, Relaxed);
        }
    }
}
