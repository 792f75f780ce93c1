#!/usr/bin/env bash
# Where the time of a ptrace stop goes (issue 26): records sched_switch, sched_waking, sched_wakeup and
# sched_migrate_task with tracefs (in an instance of its own) while `loop` makes sparse calls under a tracer, then
# splits each stop with stop_sched.py. Needs root and tracefs (mounted at /sys/kernel/tracing if it is not).
# Usage: scripts/bench/stop_sched.sh floor|sc|fast quiet|busy [GAP_US] [CALLS]   (default 100 us, 1000 calls)
#   floor: scripts/bench/floor.c on `loop int3`; sc: target/release/syscatch --syscall mmap on `loop getpid`
#   (non-matching hits); fast: the same with --fast on `loop mmap` (matching stops); busy: beside `loop spin`.
# Keeps the trace in $TMPDIR (printed) for a closer look.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TRACER=${1:?floor, sc or fast} LOAD=${2:?quiet or busy} GAP=${3:-100} N=${4:-1000}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/stop-sched.XXXXXX")
TR=/sys/kernel/tracing
[[ -e $TR/instances ]] || mount -t tracefs nodev $TR
I=$TR/instances/stop-sched-$$
mkdir "$I"
EVENTS=(sched_switch sched_waking sched_wakeup sched_migrate_task)
PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    echo 0 >"$I/tracing_on" 2>/dev/null || true
    rmdir "$I" 2>/dev/null || true
}
trap cleanup EXIT
gcc -O2 -Wall -o "$TMP/loop" "$ROOT/scripts/bench/loop.c"
gcc -O2 -Wall -o "$TMP/floor" "$ROOT/scripts/bench/floor.c"
mode=getpid
[[ $TRACER == floor ]] && mode=int3
[[ $TRACER == fast ]] && mode=mmap
mkfifo "$TMP/in" "$TMP/out"
"$TMP/loop" "$mode" <"$TMP/in" >"$TMP/out" &
PIDS+=($!)
exec 3>"$TMP/in" 4<"$TMP/out"
read -r line <&4
P=${line#pid }
# The tracer prints a line once armed; wait for it (its stderr through a fifo).
mkfifo "$TMP/err"
case $TRACER in
floor) "$TMP/floor" "$P" 2>"$TMP/err" & ;;
sc) "$ROOT/target/release/syscatch" --pid "$P" --syscall mmap -o /dev/null 2>"$TMP/err" & ;;
fast) "$ROOT/target/release/syscatch" --pid "$P" --syscall mmap --fast -o /dev/null 2>"$TMP/err" & ;;
*) echo "stop_sched: tracer floor, sc or fast" >&2 && exit 2 ;;
esac
TRP=$!
PIDS+=("$TRP")
exec 5<"$TMP/err"
while read -r line <&5; do [[ $line == *attached* ]] && break; done
cat <&5 >"$TMP/tracer.log" &
# A warm-up (syscatch's symbol prefetch), then the neighbour, then the recorded round.
echo "sparse $((N / 5)) $GAP" >&3
read -r line <&4
if [[ $LOAD == busy ]]; then
    "$TMP/loop" spin &
    PIDS+=($!)
    sleep 0.2 # the scheduler mixes the new process with the traced pair
fi
echo 0 >"$I/tracing_on"
echo mono >"$I/trace_clock"
echo 16384 >"$I/buffer_size_kb"
for e in "${EVENTS[@]}"; do echo 1 >"$I/events/sched/$e/enable"; done
echo 1 >"$I/tracing_on"
echo "sparse $N $GAP" >&3
read -r line <&4
echo 0 >"$I/tracing_on"
cat "$I/trace" >"$TMP/trace.txt"
echo "target: $line (ns around the $N calls, ns computing); trace in $TMP/trace.txt"
echo "target $P, tracer threads $(ls /proc/"$TRP"/task | tr '\n' ' ')"
python3 "$ROOT/scripts/bench/stop_sched.py" "$TMP/trace.txt" "$P" "$(ls /proc/"$TRP"/task | paste -sd,)"
