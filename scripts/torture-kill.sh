#!/usr/bin/env bash
# SIGKILL rounds against syscatch's own death (issue #11, item 3): scripts/torture-kill.sh [ROUNDS] [SEED]
#
# Each round starts a busy self-checking target (testprogs/torture.c, three threads calling syscall(SYS_mmap) in
# a loop), attaches syscatch, and SIGKILLs syscatch at a seeded random moment (one round in eight while it
# attaches or arms, the others after 0-19 captures); the target must then finish with consistent counts and its
# files' bytes in its text. ROUNDS (default 200) run with int3 breakpoints and again with --fast; then as many
# rounds with an idle target (waiting on stdin, then calling syscall()), which must all survive. Prints one
# KILL-FIGURES line per case; not in CI (the test suite runs 5 busy rounds and 1 idle of each). Goal: busy >= 99%,
# idle 100%.
# SYSCATCH_NO_GUARDIAN=1 runs the same rounds without the guardian and the trap pad (the baseline).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-200}
seed=${2:-$(date +%s)}
export KILL_ROUNDS=$rounds KILL_SEED=$seed
status=0
for t in sigkill_of_syscatch_mid_trace_busy_target sigkill_of_syscatch_mid_trace_busy_target_with_fast \
    sigkill_of_syscatch_leaves_an_idle_target_healthy sigkill_of_syscatch_leaves_an_idle_target_healthy_with_fast; do
    # The test asserts "at most one death" for its short CI run; here the figures are what counts.
    out=$(nice cargo test --release --test it "guardian::$t" -- --exact --nocapture 2>&1) || status=1
    grep -E 'KILL-FIGURES|replay with|FAIL' <<<"$out" || { echo "$out" | tail -30; status=1; }
done
exit $status
