#!/usr/bin/env bash
# syscatch's benchmark: the cost of one breakpoint hit for the ptrace floor, syscatch and gdb, measured in the
# same run on the same small C targets, plus attach/arm/detach times. See docs/bench.md.
#
# Usage: scripts/bench.sh [--quick] [--json] [--runs N] [--no-build]
#   --quick     about 30 s instead of about 2-3 min (fewer runs, smaller loops)
#   --json      print the table as one JSON document (stable row ids) instead of text
#   --runs N    measured runs per row (default 5, 3 with --quick); each row reports the median
#   --no-build  do not run `cargo build --release` first
#
# Every target prints its pid and waits on stdin; every tracer is waited for until it says it is armed (a line
# on its output), never by sleeping. Targets time their own loops with CLOCK_MONOTONIC, so process start-up and
# attaching never count in a per-hit figure.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
QUICK=0
JSON=0
RUNS=""
BUILD=1
while (($#)); do
    case $1 in
    --quick) QUICK=1 ;;
    --json) JSON=1 ;;
    --runs)
        RUNS=${2:-}
        shift
        ;;
    --no-build) BUILD=0 ;;
    -h | --help)
        sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    *)
        echo "bench: unknown option $1 (try --help)" >&2
        exit 2
        ;;
    esac
    shift
done
if [[ -n $RUNS && ! $RUNS =~ ^[1-9][0-9]*$ ]]; then
    echo "bench: --runs needs a positive integer" >&2
    exit 2
fi

# Loop sizes: enough hits that a run lasts ~0.1-0.3 s. gdb is ~20x slower per hit, so it gets smaller loops;
# per-hit figures stay comparable.
if ((QUICK)); then
    RUNS=${RUNS:-3}
    N_FLOOR=8000 N_FLOOR_UNPINNED=2000 N_SC=2000 N_SC_MATCH=1000 N_GDB=300 N_GDB_BT=60 N_BASE=100000
    ATTACH_THREADS=(1 64 512) ATTACH_RUNS=2
else
    RUNS=${RUNS:-5}
    N_FLOOR=20000 N_FLOOR_UNPINNED=5000 N_SC=5000 N_SC_MATCH=2000 N_GDB=1000 N_GDB_BT=200 N_BASE=300000
    ATTACH_THREADS=(1 64 512) ATTACH_RUNS=$RUNS
fi
READ_TIMEOUT=600 # a guard against a hung tool, not a synchronisation
PIN_CPU=$(($(nproc) - 1))

say() { echo "bench: $*" >&2; }
die() {
    say "$*"
    exit 1
}

# ---------------------------------------------------------------- build
if ((BUILD)); then
    say "cargo build --release"
    cargo build --release --quiet --manifest-path "$ROOT/Cargo.toml" || die "cargo build --release failed"
fi
SC=$ROOT/target/release/syscatch
[[ -x $SC ]] || die "$SC not found: run without --no-build"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/syscatch-bench.XXXXXX")
STARTED=() # every process we start, so an interrupted bench leaves nothing behind
cleanup() {
    local p
    for p in "${STARTED[@]}"; do
        kill -0 "$p" 2>/dev/null && kill -KILL "$p" 2>/dev/null
    done
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for prog in loop floor threads; do
    gcc -O2 -Wall -pthread -o "$TMP/$prog" "$ROOT/scripts/bench/$prog.c" || die "cannot compile scripts/bench/$prog.c"
done

# ---------------------------------------------------------------- numbers
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
minof() { printf '%s\n' "$@" | sort -g | head -1; }
maxof() { printf '%s\n' "$@" | sort -g | tail -1; }
calc() { awk "BEGIN {printf \"%.3f\", $1}"; }

# Rows, in table order. status: ok | failed | not_installed | pending
ROW_IDS=()
declare -A R_NAME R_UNIT R_MED R_MIN R_MAX R_N R_RUNS R_STATUS R_NOTE
row() { # id name unit status note [median min max n runs]
    ROW_IDS+=("$1")
    R_NAME[$1]=$2 R_UNIT[$1]=$3 R_STATUS[$1]=$4 R_NOTE[$1]=$5
    R_MED[$1]=${6:-} R_MIN[$1]=${7:-} R_MAX[$1]=${8:-} R_N[$1]=${9:-} R_RUNS[$1]=${10:-}
}
row_values() { # id name unit n note values...
    local id=$1 name=$2 unit=$3 n=$4 note=$5
    shift 5
    row "$id" "$name" "$unit" ok "$note" "$(median "$@")" "$(minof "$@")" "$(maxof "$@")" "$n" $#
}

# ---------------------------------------------------------------- processes
SEQ=0
# Starts a target (optionally pinned to one CPU) on two fifos; sets T_PROC, T_PID, T_IN, T_OUT.
target_start() { # pin-cpu-or-empty cmd...
    local pin=$1 d line
    shift
    d=$TMP/fifo$((SEQ += 1))
    mkfifo "$d.in" "$d.out"
    if [[ -n $pin ]]; then
        taskset -c "$pin" "$@" <"$d.in" >"$d.out" &
    else
        "$@" <"$d.in" >"$d.out" &
    fi
    T_PROC=$!
    STARTED+=("$T_PROC")
    exec {T_IN}>"$d.in" {T_OUT}<"$d.out"
    read -r -t "$READ_TIMEOUT" -u "$T_OUT" line || return 1
    T_PID=${line#pid }
    [[ $T_PID =~ ^[0-9]+$ ]]
}
# One loop of N iterations; prints the loop's own time in ns.
target_round() {
    local line
    echo "go $1" >&"$T_IN"
    read -r -t "$READ_TIMEOUT" -u "$T_OUT" line || return 1
    [[ $line == ns\ * ]] || return 1
    echo "${line#ns }"
}
target_quit() {
    echo quit >&"$T_IN" 2>/dev/null
    exec {T_IN}>&- {T_OUT}<&-
    wait "$T_PROC" 2>/dev/null
}

# Starts a tracer whose `stream` (err: stderr, with stdout to /dev/null; out: stdout and stderr) goes to a log;
# returns once a line matches `ready`. Sets TR_PROC, TR_LOG, TR_DRAIN.
tracer_start() { # pin-cpu-or-empty stream ready-regex cmd...
    local pin=$1 stream=$2 ready=$3 d fd line ok=0
    shift 3
    d=$TMP/fifo$((SEQ += 1))
    mkfifo "$d.fifo"
    TR_LOG=$d.log
    : >"$TR_LOG"
    local -a pre=()
    [[ -n $pin ]] && pre=(taskset -c "$pin")
    if [[ $stream == err ]]; then
        "${pre[@]}" "$@" >/dev/null 2>"$d.fifo" &
    else
        "${pre[@]}" "$@" >"$d.fifo" 2>&1 &
    fi
    TR_PROC=$!
    STARTED+=("$TR_PROC")
    exec {fd}<"$d.fifo"
    while read -r -t "$READ_TIMEOUT" -u "$fd" line; do
        echo "$line" >>"$TR_LOG"
        if [[ $line =~ $ready ]]; then
            ok=1
            break
        fi
    done
    # Keep draining: a tracer blocked on a full pipe would stall the target.
    cat <&"$fd" >>"$TR_LOG" &
    TR_DRAIN=$!
    exec {fd}<&-
    ((ok)) || {
        say "tracer did not arm: $*: $(tail -3 "$TR_LOG")"
        return 1
    }
}
tracer_wait() {
    wait "$TR_PROC" 2>/dev/null
    local rc=$?
    wait "$TR_DRAIN" 2>/dev/null
    return $rc
}

# Per-iteration time of a loop without any tracer, in ns (median of RUNS).
BASE_NS=()
declare -A BASE
baseline() { # mode
    local t i v=()
    target_start "" "$TMP/loop" "$1" || die "cannot start the $1 target"
    target_round $((N_BASE / 10)) >/dev/null
    for ((i = 0; i < RUNS; i++)); do
        t=$(target_round "$N_BASE") || die "the $1 target failed"
        v+=("$(calc "$t / $N_BASE")")
    done
    target_quit
    BASE[$1]=$(median "${v[@]}")
}

# Runs the target's loop under a tracer that is already armed; fills VALS with µs per hit per run.
# Expected hits (warm-up included) go to EXPECT.
measure_rounds() { # mode n
    local mode=$1 n=$2 t i warm=$(($2 / 10 > 10 ? $2 / 10 : 10))
    VALS=()
    target_round "$warm" >/dev/null || return 1
    for ((i = 0; i < RUNS; i++)); do
        t=$(target_round "$n") || return 1
        VALS+=("$(calc "($t / $n - ${BASE[$mode]}) / 1000")")
    done
    EXPECT=$((warm + RUNS * n))
}

summary_field() { # file field -> number from syscatch's JSON summary line, or nothing
    grep '"type":"summary"' "$1" 2>/dev/null | grep -o "\"$2\":[-0-9.e+]*" | head -1 | cut -d: -f2
}

# ---------------------------------------------------------------- per-hit rows
bench_floor() { # id name pin n
    local id=$1 name=$2 pin=$3 n=$4 hits
    say "$name"
    target_start "$pin" "$TMP/loop" int3 || die "cannot start the int3 target"
    if ! tracer_start "$pin" err '^floor: attached' "$TMP/floor" "$T_PID"; then
        target_quit
        row "$id" "$name" us/hit failed "the floor tracer did not attach"
        return
    fi
    measure_rounds getpid "$n"
    local ok=$?
    target_quit
    tracer_wait
    hits=$(grep -o '^floor: [0-9]* hits' "$TR_LOG" | grep -o '[0-9]*')
    if ((ok != 0)) || [[ $hits != "$EXPECT" ]]; then
        row "$id" "$name" us/hit failed "floor counted ${hits:-?} hits, expected $EXPECT"
        return
    fi
    row_values "$id" "$name" us/hit "$n" "$5" "${VALS[@]}"
}

bench_syscatch() { # id name pin mode n stack-bytes note
    local id=$1 name=$2 pin=$3 mode=$4 n=$5 sb=$6 note=$7 ev hits matching want_matching
    say "$name"
    ev=$TMP/events$((SEQ += 1)).jsonl
    target_start "$pin" "$TMP/loop" "$mode" || die "cannot start the $mode target"
    if ! tracer_start "$pin" err '^syscatch: attached' "$SC" --pid "$T_PID" --syscall mmap --stack-bytes "$sb" \
        --json -o "$ev"; then
        target_quit
        row "$id" "$name" us/hit failed "syscatch did not attach"
        return
    fi
    measure_rounds "$mode" "$n"
    local ok=$?
    kill -INT "$TR_PROC"
    tracer_wait
    target_quit
    hits=$(summary_field "$ev" hits)
    matching=$(summary_field "$ev" matching)
    want_matching=0
    [[ $mode == mmap ]] && want_matching=$EXPECT
    if ((ok != 0)) || [[ $hits != "$EXPECT" || $matching != "$want_matching" ]]; then
        row "$id" "$name" us/hit failed "syscatch counted ${hits:-?} hits/${matching:-?} matching, expected $EXPECT/$want_matching"
        return
    fi
    row_values "$id" "$name" us/hit "$n" "$note" "${VALS[@]}"
    LAST_EVENTS=$ev
}

bench_gdb() { # id name mode n with-bt note
    local id=$1 name=$2 mode=$3 n=$4 bt=$5 note=$6 script frames
    say "$name"
    if ! command -v gdb >/dev/null; then
        row "$id" "$name" us/hit not_installed "gdb not installed"
        return
    fi
    script=$TMP/gdb$((SEQ += 1)).gdb
    {
        echo "set pagination off"
        echo "set confirm off"
        echo 'break syscall if $rdi == 9'
        echo "commands"
        echo "silent"
        ((bt)) && echo "bt"
        echo "continue"
        echo "end"
        # The breakpoint goes in when gdb resumes the target, and the target cannot read "go" before that.
        echo 'echo bench: armed\n'
        echo "continue"
    } >"$script"
    target_start "" "$TMP/loop" "$mode" || die "cannot start the $mode target"
    if ! tracer_start "" out '^bench: armed' gdb -batch -nx -p "$T_PID" -x "$script"; then
        target_quit
        row "$id" "$name" us/hit failed "gdb did not attach"
        return
    fi
    measure_rounds "$mode" "$n"
    local ok=$?
    target_quit
    tracer_wait
    if ((bt)); then
        frames=$(grep -c '^#0 ' "$TR_LOG")
        if [[ $frames != "$EXPECT" ]]; then
            row "$id" "$name" us/hit failed "gdb printed $frames backtraces, expected $EXPECT"
            return
        fi
    fi
    ((ok == 0)) || {
        row "$id" "$name" us/hit failed "the target did not finish under gdb"
        return
    }
    row_values "$id" "$name" us/hit "$n" "$note" "${VALS[@]}"
}

# ---------------------------------------------------------------- attach rows
# Harness-side times (EPOCHREALTIME): start -> "attached" line (process start, libc resolve, seize, arm), and
# SIGINT -> exit (stop all, restore, detach, summary). Figures syscatch reports itself replace them when present.
bench_attach() { # threads idle|busy
    local n=$1 kind=$2 id="${2}_${1}" t0 t1 t2 t3 ev a=() d=() v
    say "attach + arm + detach, $n thread(s), $kind"
    target_start "" "$TMP/threads" "$n" "$kind" || die "cannot start the threads target"
    local self=1 i runs=$ATTACH_RUNS
    # 511 spinning threads take seconds per attach on 2 CPUs (syscatch waits for its turn on a CPU).
    if ((n >= 512)) && [[ $kind == busy ]]; then
        ((runs > 3)) && runs=3
        ((QUICK)) && runs=1
    fi
    for ((i = 0; i < runs; i++)); do
        ev=$TMP/attach$((SEQ += 1)).jsonl
        t0=$EPOCHREALTIME
        if ! tracer_start "" err '^syscatch: attached' "$SC" --pid "$T_PID" --syscall mmap --json -o "$ev"; then
            target_quit
            row "attach_$id" "attach + arm, $n threads $kind" ms failed "syscatch did not attach"
            row "detach_$id" "detach, $n threads $kind" ms failed "syscatch did not attach"
            return
        fi
        t1=$EPOCHREALTIME
        kill -INT "$TR_PROC"
        t2=$EPOCHREALTIME
        tracer_wait
        t3=$EPOCHREALTIME
        v=$(summary_field "$ev" attach_ms)
        if [[ -n $v ]]; then
            a+=("$(calc "$v + $(summary_field "$ev" arm_ms)+0")")
            d+=("$(summary_field "$ev" detach_ms)")
        else
            self=0
            a+=("$(calc "($t1 - $t0) * 1000")")
            d+=("$(calc "($t3 - $t2) * 1000")")
        fi
    done
    target_quit
    local note="harness clock: includes exec + libc resolve"
    ((self)) && note="reported by syscatch (attach_ms + arm_ms)"
    row_values "attach_$id" "attach + arm, $n threads $kind" ms "" "$note" "${a[@]}"
    note="harness clock: SIGINT to exit"
    ((self)) && note="reported by syscatch (detach_ms)"
    row_values "detach_$id" "detach, $n threads $kind" ms "" "$note" "${d[@]}"
}

# ---------------------------------------------------------------- run
START=$EPOCHREALTIME
say "baselines (untraced loops)"
baseline getpid
baseline mmap
row base_getpid "untraced syscall(SYS_getpid)" us/iter ok "subtracted from getpid rows" \
    "$(calc "${BASE[getpid]} / 1000")" "" "" "$N_BASE" "$RUNS"
row base_mmap "untraced syscall(SYS_mmap) + munmap" us/iter ok "subtracted from mmap rows" \
    "$(calc "${BASE[mmap]} / 1000")" "" "" "$N_BASE" "$RUNS"

bench_floor floor_pinned "floor: int3 + waitpid/GETREGS/CONT, pinned to 1 CPU" "$PIN_CPU" "$N_FLOOR" \
    "tracer and target on CPU $PIN_CPU"
bench_floor floor_unpinned "floor: int3 + waitpid/GETREGS/CONT, unpinned" "" "$N_FLOOR_UNPINNED" \
    "cross-CPU wake-ups"
bench_syscatch sc_nonmatch "syscatch non-matching hit (getpid)" "" getpid "$N_SC" 65536 "--syscall mmap"
bench_syscatch sc_nonmatch_pinned "syscatch non-matching hit, pinned to 1 CPU" "$PIN_CPU" getpid "$N_SC" 65536 \
    "syscatch and target on CPU $PIN_CPU"
LAST_EVENTS=""
bench_syscatch sc_match_stack "syscatch matching hit, rax + 64 KiB stack" "" mmap "$N_SC_MATCH" 65536 \
    "--stack-bytes 65536"
STACK_EVENTS=$LAST_EVENTS
bench_syscatch sc_match_nostack "syscatch matching hit, rax only" "" mmap "$N_SC_MATCH" 0 "--stack-bytes 0"
bench_gdb gdb_nonmatch "gdb: break syscall if \$rdi == 9, non-matching" getpid "$N_GDB" 0 "commands: silent, continue"
bench_gdb gdb_match_bt "gdb: matching hit with bt" mmap "$N_GDB_BT" 1 "commands: silent, bt, continue"
if command -v bpftrace >/dev/null; then
    row bpftrace_nonmatch "bpftrace uprobe on syscall, arg0 == 9" us/hit pending "installed, but not measured by this script yet"
else
    row bpftrace_nonmatch "bpftrace uprobe on syscall, arg0 == 9" us/hit not_installed "not installed"
fi

# Unwind and symbolize costs: filled from syscatch's summary once it reports them (see docs/bench.md).
for f in unwind_ns_per_frame:"unwind per frame (cached CFI)" \
    symbolize_first_ns_per_frame:"symbolize per frame, first time" \
    symbolize_cached_ns_per_frame:"symbolize per frame, cached"; do
    field=${f%%:*}
    v=$([[ -n $STACK_EVENTS ]] && summary_field "$STACK_EVENTS" "$field")
    if [[ -n $v ]]; then
        row "${field%_ns_per_frame}" "${f#*:}" ns/frame ok "from syscatch's summary ($field)" "$v" "" "" "" 1
    else
        row "${field%_ns_per_frame}" "${f#*:}" ns/frame pending "n/a until stacks land"
    fi
done

for n in "${ATTACH_THREADS[@]}"; do
    for kind in idle busy; do
        bench_attach "$n" "$kind"
    done
done

ratio() { # id name numerator-id denominator-id
    if [[ ${R_STATUS[$3]} == ok && ${R_STATUS[$4]} == ok ]] && awk "BEGIN {exit !(${R_MED[$4]} > 0)}"; then
        row "$1" "$2" x ok "$3 / $4" "$(calc "${R_MED[$3]} / ${R_MED[$4]}")"
    else
        row "$1" "$2" x failed "needs $3 and $4"
    fi
}
ratio ratio_sc_floor "syscatch / floor, non-matching" sc_nonmatch floor_pinned
ratio ratio_sc_floor_pinned "syscatch / floor, non-matching, both pinned" sc_nonmatch_pinned floor_pinned
ratio ratio_sc_floor_match "syscatch matching (64 KiB stack) / floor" sc_match_stack floor_pinned
ratio ratio_gdb_sc "gdb / syscatch, non-matching" gdb_nonmatch sc_nonmatch
ratio ratio_gdb_sc_match "gdb (bt) / syscatch (64 KiB stack), matching" gdb_match_bt sc_match_stack
ELAPSED=$(calc "$EPOCHREALTIME - $START")

# ---------------------------------------------------------------- output
fmt() { [[ -z $1 ]] && echo "-" || awk "BEGIN {v=$1; printf (v >= 100 || v <= -100) ? \"%.0f\" : (v >= 10 || v <= -10) ? \"%.1f\" : \"%.2f\", v}"; }
json_str() { local s=${1//\\/\\\\}; s=${s//\"/\\\"}; printf '"%s"' "$s"; }
json_num() { [[ -z $1 ]] && printf null || printf '%s' "$1"; }

GIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
git -C "$ROOT" diff --quiet HEAD 2>/dev/null || GIT="$GIT+dirty"
if ((JSON)); then
    printf '{"bench":"syscatch","schema":1,"git":%s,"kernel":%s,"cpus":%s,"quick":%s,"runs":%s,"seconds":%s,"rows":[' \
        "$(json_str "$GIT")" "$(json_str "$(uname -r)")" "$(nproc)" "$([[ $QUICK == 1 ]] && echo true || echo false)" \
        "$RUNS" "$ELAPSED"
    sep=""
    for id in "${ROW_IDS[@]}"; do
        printf '%s\n{"id":%s,"name":%s,"unit":%s,"status":%s,"median":%s,"min":%s,"max":%s,"n":%s,"runs":%s,"note":%s}' \
            "$sep" "$(json_str "$id")" "$(json_str "${R_NAME[$id]}")" "$(json_str "${R_UNIT[$id]}")" \
            "$(json_str "${R_STATUS[$id]}")" "$(json_num "${R_MED[$id]}")" "$(json_num "${R_MIN[$id]}")" \
            "$(json_num "${R_MAX[$id]}")" "$(json_num "${R_N[$id]}")" "$(json_num "${R_RUNS[$id]}")" \
            "$(json_str "${R_NOTE[$id]}")"
        sep=,
    done
    printf '\n]}\n'
else
    printf 'syscatch bench  git %s  kernel %s  %s CPUs  %s runs per row (median)%s  %ss\n\n' "$GIT" "$(uname -r)" \
        "$(nproc)" "$RUNS" "$([[ $QUICK == 1 ]] && echo ", quick")" "$(printf '%.0f' "$ELAPSED")"
    printf '%-24s %-52s %9s %9s %9s %-8s %6s  %s\n' id row median min max unit N note
    for id in "${ROW_IDS[@]}"; do
        if [[ ${R_STATUS[$id]} == ok ]]; then
            printf '%-24s %-52s %9s %9s %9s %-8s %6s  %s\n' "$id" "${R_NAME[$id]}" "$(fmt "${R_MED[$id]}")" \
                "$(fmt "${R_MIN[$id]}")" "$(fmt "${R_MAX[$id]}")" "${R_UNIT[$id]}" "${R_N[$id]:--}" "${R_NOTE[$id]}"
        else
            printf '%-24s %-52s %9s %9s %9s %-8s %6s  %s\n' "$id" "${R_NAME[$id]}" "${R_STATUS[$id]}" - - \
                "${R_UNIT[$id]}" - "${R_NOTE[$id]}"
        fi
    done
fi
