#!/usr/bin/env bash
# A long --leaks trace of the bench's Python worker (scripts/bench/worker.py: 3 threads of mmap'd temporaries,
# pymalloc arena churn and a UCX-shaped munmap hook growing a pool): what syscatch keeps (its RSS), what its
# recording grows by, and what the worker keeps of its speed, at checkpoints of a trace of MINUTES (default 30).
# Not part of scripts/bench.sh (it takes half an hour); run it on a quiet machine. Figures: docs/speed.md.
#
# Usage: scripts/bench-long.sh [MINUTES] [--no-build]
# Prints one line per checkpoint (1, 5, 15, 30 minutes, and MINUTES): minutes, syscatch's RSS and peak RSS (MiB),
# the recording's size (MiB), its rate over the whole trace and since the checkpoint before (MiB/h), the worker's
# steps/s over the minute before against its untraced steps/s (measured for a minute before attaching).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MINUTES=${1:-30}
[[ ${2:-} == --no-build ]] || cargo build --release --quiet --manifest-path "$ROOT/Cargo.toml"
SC=$ROOT/target/release/syscatch
TMP=$(mktemp -d)
SC_PID="" W_PID=""
trap 'kill $SC_PID $W_PID 2>/dev/null || true; rm -rf "$TMP"' EXIT

gcc -O2 -Wall -fPIC -shared -pthread -o "$TMP/libworker.so" "$ROOT/scripts/bench/worker_lib.c" -ldl
mkfifo "$TMP/in" "$TMP/out"
python3 "$ROOT/scripts/bench/worker.py" "$TMP/libworker.so" 3 <"$TMP/in" >"$TMP/out" &
W_PID=$!
exec 3>"$TMP/in" 4<"$TMP/out"
read -r -u 4 line
[[ $line =~ ^pid\ ([0-9]+)$ ]] || { echo "bench-long: worker said: $line" >&2; exit 1; }
# The worker's steps/s over `secs` of its own clock.
rate() { # secs
    echo "rate $1" >&3
    read -r -u 4 line
    [[ $line =~ ^rate\ ([0-9.]+)\ syscalls ]] || { echo "bench-long: worker said: $line" >&2; exit 1; }
    echo "${BASH_REMATCH[1]}"
}
rate 5 >/dev/null
untraced=$(rate 60)
echo "bench-long: worker untraced: $untraced steps/s; tracing for ${MINUTES} min" >&2

"$SC" --pid "$W_PID" --leaks --for "$((MINUTES + 5))m" --record "$TMP/long.rec" >"$TMP/report.txt" 2>"$TMP/err" &
SC_PID=$!
start=$(date +%s)
mib() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }
printf '%8s %10s %10s %12s %12s %12s %12s\n' minutes rss_mib peak_mib record_mib record_mib_h since_mib_h worker_kept
prev_bytes=0 prev_el=0
for at in 1 5 15 30 "$MINUTES"; do
    ((at <= MINUTES)) || continue
    # The minute before the checkpoint is the worker's measure.
    now=$(($(date +%s) - start))
    wait_s=$((at * 60 - 60 - now))
    ((wait_s > 0)) && sleep "$wait_s"
    kept=$(rate 60)
    rss=$(awk '/^VmRSS/ { print $2 }' "/proc/$SC_PID/status" 2>/dev/null || echo 0)
    peak=$(awk '/^VmHWM/ { print $2 }' "/proc/$SC_PID/status" 2>/dev/null || echo 0)
    bytes=$(stat -c %s "$TMP/long.rec")
    el=$(($(date +%s) - start))
    printf '%8s %10s %10s %12s %12s %12s %12s\n' "$at" "$(mib "$rss")" "$(mib "$peak")" \
        "$(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1048576 }')" \
        "$(awk -v b="$bytes" -v s="$el" 'BEGIN { printf "%.0f", b / 1048576 * 3600 / s }')" \
        "$(awk -v b="$((bytes - prev_bytes))" -v s="$((el - prev_el))" 'BEGIN { printf "%.0f", b / 1048576 * 3600 / s }')" \
        "$(awk -v a="$kept" -v u="$untraced" 'BEGIN { printf "%.2f", a / u }')"
    prev_bytes=$bytes prev_el=$el
    [[ $at == "$MINUTES" ]] && break
done
kill -INT "$SC_PID"
wait "$SC_PID" || { echo "bench-long: syscatch failed: $(tail -3 "$TMP/err")" >&2; exit 1; }
echo "bench-long: $(tail -1 "$TMP/err")" >&2
echo "bench-long: $(grep -m1 '^Findings' "$TMP/report.txt")" >&2
echo quit >&3
