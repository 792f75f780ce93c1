//! Parses `/proc/PID/task/TID/schedstat` and adds up what a thread group waited for a CPU between two readings.
//! Pure: the caller reads the files (`os::procfs::read_run_delays`).
//!
//! The file is three numbers: time on a CPU (ns), time runnable but waiting on a runqueue (ns: the "run delay"),
//! and the number of time slices run. A thread held in a ptrace stop is not runnable, so its run delay counts
//! only what it waited for a CPU once resumed (and while computing): the delay the scheduler added, which the
//! tracer's own clock never sees.

use super::Tid;
use std::collections::BTreeMap;

/// One thread's `schedstat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedStat {
    pub run_ns: u64,
    /// Time spent runnable, waiting on a runqueue for a CPU.
    pub wait_ns: u64,
    pub slices: u64,
}

/// `None` when the text is not three numbers (a kernel without CONFIG_SCHED_INFO has no such file at all).
pub fn parse_schedstat(text: &str) -> Option<SchedStat> {
    let mut it = text.split_ascii_whitespace().map(|f| f.parse::<u64>().ok());
    let s = SchedStat { run_ns: it.next()??, wait_ns: it.next()??, slices: it.next()?? };
    it.next().is_none().then_some(s)
}

/// What a thread group waited for a CPU between two readings of its threads' run delays.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RunDelay {
    /// Summed over the threads counted.
    pub wait_ns: u64,
    /// Threads present at both readings (their difference), and threads that appeared in between (their whole
    /// run delay: they were born during the trace).
    pub threads: u64,
    /// Of those, the threads born in between.
    pub born: u64,
    /// Threads present at the first reading but gone at the second: what they waited is lost with them.
    pub gone: u64,
}

/// The run delay between `before` and `after` (run delays by thread id, in ns). A counter that went backwards
/// (a thread id reused by a newer thread) counts as a thread born in between.
pub fn run_delay(before: &BTreeMap<Tid, u64>, after: &BTreeMap<Tid, u64>) -> RunDelay {
    let mut d =
        RunDelay { gone: before.keys().filter(|t| !after.contains_key(t)).count() as u64, ..RunDelay::default() };
    for (tid, &now) in after {
        d.threads += 1;
        match before.get(tid) {
            Some(&then) if then <= now => d.wait_ns = d.wait_ns.saturating_add(now - then),
            _ => {
                d.born += 1;
                d.wait_ns = d.wait_ns.saturating_add(now);
            }
        }
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_three_fields() {
        // From this machine's /proc/1/schedstat.
        let s = parse_schedstat("181587694 13311075 367\n").unwrap();
        assert_eq!(s, SchedStat { run_ns: 181_587_694, wait_ns: 13_311_075, slices: 367 });
        assert_eq!(parse_schedstat("0 0 1"), Some(SchedStat { run_ns: 0, wait_ns: 0, slices: 1 }));
        for bad in ["", "1 2", "1 2 3 4", "1 -2 3", "a b c", "18446744073709551616 0 0"] {
            assert_eq!(parse_schedstat(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn adds_up_threads_that_stayed_came_and_went() {
        let before = BTreeMap::from([(10, 1_000), (11, 5_000), (12, 7_000), (13, 9_000)]);
        // 10 and 11 stayed; 12 went; 13 was reused by a new thread (its counter went back); 14 was born.
        let after = BTreeMap::from([(10, 1_500), (11, 5_000), (13, 300), (14, 2_000)]);
        let d = run_delay(&before, &after);
        assert_eq!(d, RunDelay { wait_ns: 500 + 300 + 2_000, threads: 4, born: 2, gone: 1 });
        assert_eq!(run_delay(&BTreeMap::new(), &BTreeMap::new()), RunDelay::default());
    }
}
