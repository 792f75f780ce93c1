//! Where syscatch's threads run beside a target pinned to some CPUs: the tracer where the target runs, the
//! analysis where it does not.

use crate::model::status;
use crate::os::{Tid, procfs};

/// When every thread of the target may run only on one set of CPUs that is not all of ours, moves the tracer
/// thread (this one) onto that set: a stop then wakes the tracer where the target runs (measured: a non-matching
/// hit on a target pinned to one CPU cost 4.7x the floor with the tracer elsewhere, 1.07x beside it). The analysis
/// threads go elsewhere ([`cpus_away_from`]). Says what it did, or why it could not (a debug container may
/// refuse); `None` when the target is not pinned.
pub fn sit_with_pinned_target(pid: Tid) -> Option<String> {
    let target = pinned_cpus(pid)?;
    let analysis = cpus_away_from(pid).map(|a| format!("; the analysis on CPUs {a:?}")).unwrap_or_default();
    Some(match crate::os::sched::set_affinity(&target) {
        Ok(()) => format!("the target's threads are pinned to CPUs {target:?}: the tracer runs there too{analysis}"),
        Err(e) => format!(
            "the target's threads are pinned to CPUs {target:?}, but the tracer cannot move there ({e}): \
             every stop wakes it on another CPU, which costs the target more"
        ),
    })
}

/// The CPUs every thread of `pid` is pinned to, if they share one set that is a part of ours (taskset, numactl, a
/// cpuset narrower than syscatch's).
fn pinned_cpus(pid: Tid) -> Option<Vec<usize>> {
    let mut shared: Option<Vec<usize>> = None;
    for tid in procfs::list_tasks(pid).ok()? {
        let cpus = procfs::read_task_status(pid, tid).ok().and_then(|s| status::parse_cpus_allowed(&s))?;
        match &shared {
            Some(s) if *s != cpus => return None,
            _ => shared = Some(cpus),
        }
    }
    let target = shared?;
    let ours = crate::os::sched::affinity().ok()?;
    (!target.is_empty() && target != ours && target.iter().all(|c| ours.contains(c))).then_some(target)
}

/// The CPUs of ours that a pinned target does not use: the analysis threads (unwinding, symbolizing, the symbol
/// prefetch, smaps samples) run there, so they take no CPU time from it. `None`: the target is not pinned, or
/// uses all of them (the analysis then runs beside it at SCHED_BATCH, never preempting it).
pub fn cpus_away_from(pid: Tid) -> Option<Vec<usize>> {
    let target = pinned_cpus(pid)?;
    let free: Vec<usize> = crate::os::sched::affinity().ok()?.into_iter().filter(|c| !target.contains(c)).collect();
    (!free.is_empty()).then_some(free)
}
