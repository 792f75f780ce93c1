#!/usr/bin/env bash
# The long torture run of #11, not in CI: scripts/torture.sh ROUNDS SEED [interrupt|sigkill] [fast]
#
# Each round starts a fresh self-checking target (testprogs/torture.c) running the storm: three threads calling
# syscall() in a loop, thread churn, a thread alternating fork and posix_spawn, and ~200 queued real-time
# signals per second from the harness; syscatch is attached and stopped at a seeded random moment (while it
# starts, seizes, just attached, mid-trace among steps and forks, a second signal during detach). Counted: target
# deaths, hangs (syscatch not gone 15 s after the signal), rounds with lost signals (handled < queued), other
# harm (still traced, bytes left, threads left stopped, a panic). Interrupt rounds (SIGINT/SIGTERM) must all be
# clean: the script exits non-zero otherwise. SIGKILL rounds are reported apart: saving the target from a
# SIGKILLed syscatch is the guardian's job (#11 item 3). `fast`: syscatch runs with --fast (the trampoline, its
# ring and the known-stack matcher in the target).
#
# The rounds live in tests/it/torture/storm.rs (`torture_script`, ignored by a plain `cargo test`; CI runs three rounds
# as `storm_rounds_interrupted_at_random_moments`). The same SEED replays the same choices (timing still varies).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:?usage: scripts/torture.sh ROUNDS SEED [interrupt|sigkill]}
seed=${2:?usage: scripts/torture.sh ROUNDS SEED [interrupt|sigkill]}
mode=${3:-interrupt}
case "$mode" in interrupt | sigkill) ;; *) echo "torture.sh: mode is interrupt or sigkill, not $mode" >&2; exit 2 ;; esac
fast=
case "${4:-}" in "") ;; fast) fast=1 ;; *) echo "torture.sh: the fourth argument is fast or nothing, not $4" >&2; exit 2 ;; esac
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
env TORTURE_ROUNDS="$rounds" TORTURE_SEED="$seed" TORTURE_KILL="$mode" ${fast:+TORTURE_FAST=1} \
    nice cargo test --quiet --test it torture_script -- --ignored --nocapture --test-threads=1 >"$log" 2>&1 || status=$?
grep -E '^round [0-9]+:' "$log" | cut -c1-400 || true
if ! grep -E '^TORTURE ' "$log"; then
    tail -40 "$log"
    echo "torture.sh: the run ended before its summary (status $status)" >&2
    exit 1
fi
exit "$status"
