#!/usr/bin/env bash
# syscatch's benchmark: the cost of one breakpoint hit for the ptrace floor, syscatch and gdb, measured in the
# same run on the same small C targets; a 30-frame stack's capture, unwind and symbolization next to gdb's `bt`;
# attach/arm/detach times; syscatch's peak RSS over many 64-frame events; --leaks on 30,000 mappings. See
# docs/bench.md.
#
# Usage: scripts/bench.sh [--quick] [--json] [--runs N] [--no-build] [--python] [--only ID,...]
#   --quick     about 2.5 min instead of about 5 min (fewer runs, smaller loops, 100k events for the RSS row)
#   --python    only the Python rows: a matching hit from 30 nested Python calls on each pyenv CPython, and the
#               time syscatch spends reading the Python frames per event (goal: 3.11+ <= 5 us, 3.9/3.10 <= 40 us)
#   --json      print the table as one JSON document (stable row ids) instead of text
#   --runs N    measured runs per row (default 5, 3 with --quick); each row reports the median
#   --no-build  do not run `cargo build --release` first
#   --only IDS  run only these rows (comma-separated ids, as --json names them; ratios whose inputs ran)
# Environment: BENCH_RSS_CAP_MIB (default 2048): the RSS row stops sending events once syscatch's RSS reaches it.
#   BENCH_SYSCATCH: the syscatch binary to measure (default target/release/syscatch), e.g. an older build to compare
#   BENCH_PYTHON: the interpreter of the worker rows (default python3), e.g. a pyenv 3.13
#
# Every target prints its pid and waits on stdin; every tracer is waited for until it says it is armed (a line
# on its output), never by sleeping. Targets time their own loops with CLOCK_MONOTONIC, so process start-up and
# attaching never count in a per-hit figure.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
QUICK=0
PYTHON_ONLY=0
JSON=0
RUNS=""
BUILD=1
ONLY=""
while (($#)); do
    case $1 in
    --quick) QUICK=1 ;;
    --json) JSON=1 ;;
    --runs)
        RUNS=${2:-}
        shift
        ;;
    --no-build) BUILD=0 ;;
    --only)
        ONLY=${2:-}
        shift
        ;;
    --python) PYTHON_ONLY=1 ;;
    -h | --help)
        sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
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
    N_STACK_SC=500 N_STACK_GDB=30 N_STACK_BASE=20000 N_PY=300 N_PY_BASE=3000
    MEM_EVENTS=100000 MEM_BUDGET_S=60
    ATTACH_THREADS=(1 64 512) ATTACH_RUNS=2
    N_SPARSE10=1500 N_SPARSE100=300 WORKER_SECS=1 N_RING=1000
else
    RUNS=${RUNS:-5}
    N_FLOOR=20000 N_FLOOR_UNPINNED=5000 N_SC=5000 N_SC_MATCH=2000 N_GDB=1000 N_GDB_BT=200 N_BASE=300000
    N_STACK_SC=1000 N_STACK_GDB=80 N_STACK_BASE=50000 N_PY=1000 N_PY_BASE=10000
    # The memory row sends chunks of events until MEM_EVENTS, the time budget or the RSS cap is reached.
    MEM_EVENTS=1000000 MEM_BUDGET_S=45
    ATTACH_THREADS=(1 64 512) ATTACH_RUNS=$RUNS
    N_SPARSE10=3000 N_SPARSE100=600 WORKER_SECS=2 N_RING=2000
fi
READ_TIMEOUT=600 # a guard against a hung tool, not a synchronisation
# syscatch's RSS above which the memory row stops sending events: a bench must not push the machine into swap.
RSS_CAP_MIB=${BENCH_RSS_CAP_MIB:-2048}
MEM_CHUNK=10000 # events per round of the memory row: the RSS cap and the time budget are checked between rounds
PIN_CPU=$(($(nproc) - 1))

say() { echo "bench: $*" >&2; }
die() {
    say "$*"
    exit 1
}
[[ $RSS_CAP_MIB =~ ^[1-9][0-9]*$ ]] || die "BENCH_RSS_CAP_MIB must be a positive integer"

# ---------------------------------------------------------------- build
if ((BUILD)); then
    say "cargo build --release"
    cargo build --release --quiet --manifest-path "$ROOT/Cargo.toml" || die "cargo build --release failed"
fi
SC=${BENCH_SYSCATCH:-$ROOT/target/release/syscatch}
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
# Without frame pointers, with debug info: the stack rows need the CFI, and gdb's `bt` reads the same DWARF.
gcc -O2 -fomit-frame-pointer -g -Wall -o "$TMP/deep" "$ROOT/scripts/bench/deep.c" ||
    die "cannot compile scripts/bench/deep.c"
# The target command of a mode: loop's modes, or deep's (chain: 30 nested functions; sites: 50 call sites).
target_cmd() { # mode -> TCMD
    case $1 in
    chain | sites) TCMD=("$TMP/deep" "$1") ;;
    py3.*) TCMD=("${PYTHONS[$1]}" "$ROOT/testprogs/py_frames.py" bench) ;;
    *) TCMD=("$TMP/loop" "$1") ;;
    esac
}

# Numbers, rows, processes and the table's printing: scripts/bench/lib.sh.
source "$ROOT/scripts/bench/lib.sh"
# Sparse hits and the Python worker's throughput (what the target pays): scripts/bench/target_pays.sh.
source "$ROOT/scripts/bench/target_pays.sh"
# shellcheck source=scripts/bench/tree.sh
source "$ROOT/scripts/bench/tree.sh"
# What --malloc costs a malloc-heavy loop, against bcc's memleak and heaptrack: scripts/bench/heap.sh.
# shellcheck source=scripts/bench/heap.sh
source "$ROOT/scripts/bench/heap.sh"

# ---------------------------------------------------------------- per-hit rows
bench_floor() { # id name pin n
    local id=$1 name=$2 pin=$3 n=$4 hits
    want "$id" || {
        skip "$id" "$name" us/hit
        return
    }
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
    hits=$(floor_hits "$TR_LOG")
    if ((ok != 0)) || [[ $hits != "$EXPECT" ]]; then
        row "$id" "$name" us/hit failed "floor counted ${hits:-?} hits, expected $EXPECT"
        return
    fi
    row_values "$id" "$name" us/hit "$n" "$5" "${VALS[@]}"
}

# Starts a target of `mode` (pinned to `pin` if given) and syscatch on it, armed (started on `tpin` if given).
# OUTPUT=text: text events on stdout, read through a pipe (with the diagnostics), instead of JSON to a file.
# Sets SC_EVENTS (where the events go) and the target's and tracer's variables (target_start, tracer_start).
sc_start() { # pin tpin mode stack-bytes [extra syscatch flags]
    local pin=$1 tpin=$2 mode=$3 sb=$4 extra=${5:-}
    SC_EVENTS=$TMP/events$((SEQ += 1)).jsonl
    target_cmd "$mode"
    target_start "$pin" "${TCMD[@]}" || die "cannot start the $mode target"
    local -a out=(--json -o "$SC_EVENTS") stream=err
    [[ ${OUTPUT:-json} == text ]] && out=() stream=out
    # The stop rows measure breakpoints: --no-fast unless the row asks for --fast (the default of syscatch).
    [[ $extra == *--fast* ]] || extra="--no-fast $extra"
    tracer_start "$tpin" $stream '^syscatch: attached' "$SC" --pid "$T_PID" --syscall mmap --stack-bytes "$sb" \
        "${out[@]}" $extra
}

# After syscatch has ended: whether it counted the hits and matching calls of `mode` a run of EXPECT iterations
# makes (else SC_WHY says what it counted). Sets SC_EVENTS to the events (the log, for text) and SC_HITS.
sc_counted() { # mode [extra syscatch flags]
    local mode=$1 extra=${2:-} hits matching want_matching want_hits
    if [[ ${OUTPUT:-json} == text ]]; then
        SC_EVENTS=$TR_LOG
        # The text summary: "...; H hits, M matching, ..."
        hits=$(grep -o '[0-9]* hits, [0-9]* matching' "$SC_EVENTS" | tail -1)
        matching=${hits#*, } matching=${matching% matching} hits=${hits%% hits*}
    else
        hits=$(summary_field "$SC_EVENTS" hits)
        matching=$(summary_field "$SC_EVENTS" matching)
    fi
    want_matching=0
    [[ $mode == mmap || $mode == chain || $mode == py3.* ]] && want_matching=$EXPECT
    # With --fast a call that does not match never stops, so it is not a hit.
    want_hits=$EXPECT
    [[ $extra == *--fast* ]] && want_hits=$want_matching
    # The Python target unmaps through syscall() too: one non-matching hit per iteration.
    [[ $mode == py3.* && $extra != *--fast* ]] && want_hits=$((EXPECT * 2))
    SC_HITS=$hits
    SC_WHY="syscatch counted ${hits:-?} hits/${matching:-?} matching, expected $want_hits/$want_matching"
    [[ $hits == "$want_hits" && $matching == "$want_matching" ]]
}

bench_syscatch() { # id name pin mode n stack-bytes note [extra syscatch flags]
    local id=$1 name=$2 pin=$3 mode=$4 n=$5 sb=$6 note=$7 extra=${8:-} ev
    # TRACER_FREE=1: only the target is pinned; syscatch starts free to place itself (it moves its tracer there).
    local tpin=$pin
    [[ -n ${TRACER_FREE:-} ]] && tpin=""
    want "$id" || {
        skip "$id" "$name" us/hit
        return
    }
    say "$name"
    if ! sc_start "$pin" "$tpin" "$mode" "$sb" "$extra"; then
        target_quit
        row "$id" "$name" us/hit failed "syscatch did not attach"
        return
    fi
    measure_rounds "$mode" "$n"
    local ok=$?
    kill -INT "$TR_PROC"
    tracer_wait
    target_quit
    if ((ok != 0)); then
        row "$id" "$name" us/hit failed "a round failed (syscatch: $(tail -1 "$TR_LOG"))"
        return
    fi
    if ! sc_counted "$mode" "$extra"; then
        row "$id" "$name" us/hit failed "$SC_WHY"
        return
    fi
    ev=$SC_EVENTS
    if [[ $mode == chain && $sb != 0 ]]; then
        # The figures are only worth something if the stacks are whole: every chainNN function in the first event.
        local chain
        chain=$(grep -m1 '"type":"event"' "$ev" | grep -o '"function":"chain[0-9]*"' | sort -u | wc -l)
        if [[ $chain != 30 ]]; then
            row "$id" "$name" us/hit failed "syscatch's first stack has $chain of the 30 chain functions"
            return
        fi
    fi
    row_values "$id" "$name" us/hit "$n" "$note" "${VALS[@]}"
    LAST_EVENTS=$ev
    # The tracer's own time between seeing each stop and resuming the thread, averaged over every hit.
    LAST_STOPPED_US=$(summary_field "$ev" stopped_ms)
    [[ -n $LAST_STOPPED_US ]] && LAST_STOPPED_US=$(calc "$LAST_STOPPED_US * 1000 / $SC_HITS")
}

# The goals' ratios measured pair by pair. This machine's speed can drift by a third within minutes, and a row
# measured minutes after the floor inherits the drift in its ratio. Here the floor, the untraced loop and the
# traced loop run at once, all pinned to CPU $PIN_CPU (syscatch started free: it moves its tracer there), and take
# turns round after round; each turn gives (traced - untraced) / (floor - untraced getpid) per hit, and the row is
# the median of the turns' ratios (min and max beside it): 2 * RUNS + 1 turns, as each is short.
bench_paired() { # id name mode n stack-bytes [extra syscatch flags]
    local id=$1 name=$2 mode=$3 n=$4 sb=$5 extra=${6:-} nf=$(($4 > 2000 ? $4 : 2000)) i f b s warm=$(($4 / 10 > 10 ? $4 / 10 : 10))
    local u_in u_out u_proc ok=0 ratios=()
    want "$id" || {
        skip "$id" "$name" x
        return
    }
    say "$name"
    if ! paired_floor_start; then
        paired_floor_end
        row "$id" "$name" x failed "the floor tracer did not attach"
        return
    fi
    target_cmd "$mode"
    target_start "$PIN_CPU" "${TCMD[@]}" || die "cannot start the $mode target"
    u_in=$T_IN u_out=$T_OUT u_proc=$T_PROC
    sc_start "$PIN_CPU" "" "$mode" "$sb" "$extra" || ok=1
    if ((ok == 0)); then
        # In subshells, as every round: a target that died ends its round (SIGPIPE), not the bench.
        (round_on "$P_IN" "$P_OUT" "$nf" && round_on "$u_in" "$u_out" "$warm" && target_round "$warm") >/dev/null ||
            ok=1
    fi
    for ((i = 0; i < 2 * RUNS + 1 && ok == 0; i++)); do
        # The order turns around every other turn, so neither the floor nor syscatch always follows the other.
        if ((i % 2 == 0)); then
            f=$(round_on "$P_IN" "$P_OUT" "$nf") && b=$(round_on "$u_in" "$u_out" "$n") && s=$(target_round "$n")
        else
            s=$(target_round "$n") && b=$(round_on "$u_in" "$u_out" "$n") && f=$(round_on "$P_IN" "$P_OUT" "$nf")
        fi || {
            ok=1
            break
        }
        ratios+=("$(calc "(($s - $b) / $n) / ($f / $nf - ${BASE[getpid]})")")
    done
    [[ -n ${TR_PROC:-} ]] && kill -INT "$TR_PROC" 2>/dev/null
    tracer_wait
    target_quit
    T_IN=$u_in T_OUT=$u_out T_PROC=$u_proc target_quit
    paired_floor_end
    EXPECT=$((warm + (2 * RUNS + 1) * n))
    if ((ok != 0)); then
        row "$id" "$name" x failed "a round failed (syscatch: $(tail -1 "$TR_LOG"))"
        return
    fi
    if ! sc_counted "$mode" "$extra"; then
        row "$id" "$name" x failed "$SC_WHY"
        return
    fi
    if [[ $P_HITS != $((nf * (2 * RUNS + 2))) ]]; then
        row "$id" "$name" x failed "floor counted ${P_HITS:-?} hits, expected $((nf * (2 * RUNS + 2)))"
        return
    fi
    row_values "$id" "$name" x "$n" "paired with the floor, round by round" "${ratios[@]}"
}

# The floor against itself with `floor -c`, in turns as bench_paired: what `--fast`'s stop costs in any tracer (wait4,
# one process_vm_readv of the record below the stack pointer and of the stack, CONT) against waitpid, GETREGS, CONT.
bench_paired_design() { # id name stack-bytes
    local id=$1 name=$2 sb=$3 n=2000 i f g hits ok=0 ratios=()
    want "$id" || {
        skip "$id" "$name" x
        return
    }
    say "$name"
    paired_floor_start || ok=1
    target_start "$PIN_CPU" "$TMP/loop" int3 || die "cannot start the int3 target"
    ((ok == 0)) && { tracer_start "$PIN_CPU" err '^floor: attached' "$TMP/floor" -c "$sb" "$T_PID" || ok=1; }
    for ((i = 0; i < 2 * RUNS + 2 && ok == 0; i++)); do
        if ((i % 2 == 0)); then
            f=$(round_on "$P_IN" "$P_OUT" "$n") && g=$(target_round "$n")
        else
            g=$(target_round "$n") && f=$(round_on "$P_IN" "$P_OUT" "$n")
        fi || ok=1
        # The first turn is a warm-up (and the copying floor's first hit reads the registers).
        ((i > 0 && ok == 0)) && ratios+=("$(calc "($g / $n - ${BASE[getpid]}) / ($f / $n - ${BASE[getpid]})")")
    done
    target_quit
    tracer_wait
    hits=$(floor_hits "$TR_LOG")
    paired_floor_end
    if ((ok != 0)) || [[ $hits != $((n * (2 * RUNS + 2))) || $P_HITS != "$hits" ]]; then
        row "$id" "$name" x failed "a floor tracer did not attach, or a turn failed or missed hits"
        return
    fi
    row_values "$id" "$name" x "$n" "floor -c $sb against floor, round by round" "${ratios[@]}"
}

# The hits a floor tracer counted (the line it prints when its target exits).
floor_hits() { # log
    grep -o '^floor: [0-9]* hits' "$1" | grep -o '[0-9]*'
}

# The floor of a paired row: pinned, on its own int3 loop, kept aside while the row starts its other loops. Its
# target's fifos and process go to P_IN, P_OUT, P_PROC, its tracer to P_TR, P_DRAIN, P_LOG.
paired_floor_start() {
    target_start "$PIN_CPU" "$TMP/loop" int3 || die "cannot start the int3 target"
    P_IN=$T_IN P_OUT=$T_OUT P_PROC=$T_PROC
    tracer_start "$PIN_CPU" err '^floor: attached' "$TMP/floor" "$T_PID"
    local rc=$?
    P_TR=$TR_PROC P_DRAIN=$TR_DRAIN P_LOG=$TR_LOG
    return $rc
}
# Ends it (not in a subshell: it waits for its own children); P_HITS: the hits it counted.
paired_floor_end() {
    T_IN=$P_IN T_OUT=$P_OUT T_PROC=$P_PROC target_quit
    TR_PROC=$P_TR TR_DRAIN=$P_DRAIN tracer_wait
    P_HITS=$(floor_hits "$P_LOG")
}

bench_gdb() { # id name mode n with-bt note
    local id=$1 name=$2 mode=$3 n=$4 bt=$5 note=$6 script frames
    want "$id" || {
        skip "$id" "$name" us/hit
        return
    }
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
    target_cmd "$mode"
    target_start "" "${TCMD[@]}" || die "cannot start the $mode target"
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
        # Frames per backtrace (gdb stops at main; an inlined frame counts, as in syscatch's stacks).
        LAST_GDB_FRAMES=$(calc "$(grep -c '^#[0-9]' "$TR_LOG") / $EXPECT")
        if [[ $mode == chain ]] && (($(grep -c '^#[0-9].* chain[0-9]* (' "$TR_LOG") != 30 * EXPECT)); then
            row "$id" "$name" us/hit failed "gdb's backtraces do not show the 30 chain functions each"
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
    if ! want "attach_$id" && ! want "detach_$id"; then
        skip "attach_$id" "attach + arm, $n threads $kind" ms
        skip "detach_$id" "detach, $n threads $kind" ms
        return
    fi
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

# ---------------------------------------------------------------- stack and memory rows
diff_row() { # id name unit a-id b-id note: a - b
    if [[ ${R_STATUS[$4]:-skipped} == skipped || ${R_STATUS[$5]:-skipped} == skipped ]]; then
        skip "$1" "$2" "$3"
        return
    fi
    if [[ ${R_STATUS[$4]} == ok && ${R_STATUS[$5]} == ok ]]; then
        row "$1" "$2" "$3" ok "$6" "$(calc "${R_MED[$4]} - ${R_MED[$5]}")"
    else
        row "$1" "$2" "$3" failed "needs $4 and $5"
    fi
}

# Per-frame figures from syscatch's JSON summary; `pending` while the summary does not carry them.
summary_row() { # id name events-file field
    local v=""
    [[ -n $3 ]] && v=$(summary_field "$3" "$4")
    if [[ -n $v ]]; then
        row "$1" "$2" ns/frame ok "from syscatch's summary ($4), sc_stack30 run" "$v" "" "" "" 1
    elif [[ -z $3 ]]; then
        row "$1" "$2" ns/frame failed "the sc_stack30 run failed"
    else
        row "$1" "$2" ns/frame pending "syscatch's summary has no $4 yet"
    fi
}

# syscatch's peak RSS over a trace of many matching events with 64-frame stacks from 50 call sites (issue 4).
# Sends rounds of MEM_CHUNK events until MEM_EVENTS, the time budget or the RSS cap; records VmHWM after each
# round (growth between two N's), and the peak over the whole run including the drain after the target exits.
bench_memory() {
    local how sc_pid sent=0 c t0 t1 kib peak stop=events i a b matching growth extra
    local -a pre=() pts_n=() pts_kib=()
    want rss_peak_mib || {
        skip rss_peak_mib "syscatch peak RSS" MiB
        return
    }
    say "syscatch's peak RSS: up to $MEM_EVENTS events, 64-frame stacks from 50 call sites"
    if /usr/bin/time -v true >/dev/null 2>&1; then
        pre=(/usr/bin/time -v)
        how="peak: GNU time -v (ru_maxrss)"
    else
        how="peak: last VmHWM read before syscatch exited"
    fi
    target_cmd sites
    target_start "" "${TCMD[@]}" || die "cannot start the sites target"
    if ! tracer_start "" err '^syscatch: attached' "${pre[@]}" "$SC" --pid "$T_PID" --syscall mmap --json \
        -o /dev/null; then
        target_quit
        row rss_peak_mib "syscatch peak RSS" MiB failed "syscatch did not attach"
        return
    fi
    sc_pid=$TR_PROC
    if ((${#pre[@]})); then
        read -r sc_pid _ <"/proc/$TR_PROC/task/$TR_PROC/children"
        STARTED+=("$sc_pid")
    fi
    hwm() { awk '/^VmHWM:/ {print $2}' "/proc/$sc_pid/status" 2>/dev/null; }
    pts_n=(0) pts_kib=("$(hwm)")
    t0=$EPOCHREALTIME
    while ((sent < MEM_EVENTS)); do
        c=$((MEM_EVENTS - sent < MEM_CHUNK ? MEM_EVENTS - sent : MEM_CHUNK))
        if ! target_round "$c" >/dev/null; then
            stop=failed
            break
        fi
        sent=$((sent + c))
        kib=$(hwm)
        pts_n+=("$sent") pts_kib+=("$kib")
        if ((${kib:-0} / 1024 >= RSS_CAP_MIB)); then
            stop="RSS cap ($RSS_CAP_MIB MiB, BENCH_RSS_CAP_MIB)"
            break
        fi
        if awk "BEGIN {exit !($EPOCHREALTIME - $t0 > $MEM_BUDGET_S)}"; then
            stop="time budget (${MEM_BUDGET_S}s of events)"
            break
        fi
    done
    # The target exits; syscatch drains what it has queued, writes its summary and exits too. (Not target_quit
    # after the polling: writing to a target that has exited would kill the bench with SIGPIPE.)
    (echo quit >&"$T_IN") 2>/dev/null
    exec {T_IN}>&-
    if ((${#pre[@]} == 0)); then
        peak=${pts_kib[-1]}
        while kib=$(hwm) && [[ -n $kib ]]; do
            ((kib > peak)) && peak=$kib
            sleep 0.05 # sampling, not synchronisation: the largest VmHWM read before syscatch exits
        done
    fi
    exec {T_OUT}<&-
    wait "$T_PROC" 2>/dev/null
    tracer_wait
    t1=$EPOCHREALTIME
    ((${#pre[@]})) && peak=$(grep -o 'Maximum resident set size (kbytes): [0-9]*' "$TR_LOG" | grep -o '[0-9]*$')
    matching=$(grep -o '[0-9]* matching' "$TR_LOG" | grep -o '^[0-9]*')
    if [[ $stop == failed || -z $peak || $matching != "$sent" ]]; then
        row rss_peak_mib "syscatch peak RSS" MiB failed \
            "syscatch counted ${matching:-?} matching, expected $sent; peak ${peak:-?} kB"
        return
    fi
    local secs
    secs=$(calc "$t1 - $t0")
    row rss_peak_mib "syscatch peak RSS, $sent events (64 frames, 50 sites)" MiB ok \
        "$how; $sent events to /dev/null in $(fmt "$secs") s incl. drain; stopped by: $stop" \
        "$(calc "$peak / 1024")" "" "" "$sent" 1
    # After 10k and after 100k events of the same 50 stacks: it must not grow with events.
    local k10="" k100=""
    for i in "${!pts_n[@]}"; do
        ((pts_n[i] == 10000)) && k10=${pts_kib[i]}
        ((pts_n[i] == 100000)) && k100=${pts_kib[i]}
    done
    if [[ -n $k10 && -n $k100 ]]; then
        row rss_10k_mib "syscatch RSS (VmHWM) after 10k events, 50 stacks" MiB ok "same run" "$(calc "$k10 / 1024")" \
            "" "" 10000 1
        row rss_100k_mib "syscatch RSS (VmHWM) after 100k events, 50 stacks" MiB ok "same run" \
            "$(calc "$k100 / 1024")" "" "" 100000 1
    else
        row rss_10k_mib "syscatch RSS after 10k and 100k events" MiB failed "the run stopped before 100k events: $stop"
    fi
    # Growth between the middle and the last round (VmHWM: includes events queued for analysis).
    i=$((${#pts_n[@]} - 1))
    a=$((i / 2)) b=$i
    if ((b > a)); then
        growth=$(calc "(${pts_kib[b]} - ${pts_kib[a]}) / 1024 * 100000 / (${pts_n[b]} - ${pts_n[a]})")
        row rss_growth_mib_per_100k "syscatch RSS growth per 100k events" MiB ok \
            "VmHWM $(fmt "$(calc "${pts_kib[a]} / 1024")") MiB at N=${pts_n[a]}, $(fmt \
                "$(calc "${pts_kib[b]} / 1024")") MiB at N=${pts_n[b]}" \
            "$growth" "" "" "${pts_n[b]}" 1
        if ((sent >= 1000000)); then
            row rss_peak_mib_per_1m_events "syscatch peak RSS per 1M events (goal < 150)" MiB ok \
                "measured at N=$sent" "$(calc "$peak / 1024 * 1000000 / $sent")" "" "" "$sent" 1
        else
            extra=$(calc "$growth * (1000000 - $sent) / 100000")
            row rss_peak_mib_per_1m_events "syscatch peak RSS per 1M events (goal < 150)" MiB ok \
                "EXTRAPOLATED: peak at N=$sent + growth x $(((1000000 - sent) / 1000))k events" \
                "$(calc "$peak / 1024 + $extra")" "" "" "$sent" 1
        fi
    else
        row rss_growth_mib_per_100k "syscatch RSS growth per 100k events" MiB failed "fewer than two rounds"
        row rss_peak_mib_per_1m_events "syscatch peak RSS per 1M events (goal < 150)" MiB failed \
            "fewer than two rounds"
    fi
}

# ---------------------------------------------------------------- run
# ---------------------------------------------------------------- Python frames
# Each pyenv CPython 3.9-3.13 installed: a matching hit from 30 nested Python calls (target clock, the untraced
# loop subtracted), and the time syscatch spent reading the Python frames per event while the thread was stopped
# (its summary's python_us_per_event).
declare -A PYTHONS
for v in 9 10 11 12 13; do
    for d in "$HOME"/.pyenv/versions/3.$v.*/; do
        if [[ -x ${d}bin/python3 ]]; then
            PYTHONS[py3.$v]=${d}bin/python3
            break
        fi
    done
done
bench_python() {
    local v mode id goal per
    for v in 9 10 11 12 13; do
        mode=py3.$v id=py3_$v goal=5
        ((v < 11)) && goal=40
        if [[ -z ${PYTHONS[$mode]:-} ]]; then
            row "sc_${id}_stack30" "syscatch matching hit, 30 Python frames, CPython 3.$v" us/hit not_installed \
                "no ~/.pyenv/versions/3.$v.*"
            continue
        fi
        want "sc_${id}_stack30" || continue
        say "baseline (untraced CPython 3.$v, 30 nested calls)"
        baseline "$mode" "$N_PY_BASE"
        LAST_EVENTS=""
        bench_syscatch "sc_${id}_stack30" "syscatch matching hit, 30 Python frames, CPython 3.$v" "" "$mode" \
            "$N_PY" 65536 "--stack-bytes 65536; untraced loop subtracted"
        per=""
        [[ -n $LAST_EVENTS ]] && per=$(summary_field "$LAST_EVENTS" python_us_per_event)
        # The same call with --fast: its stack, native and Python, is known after the first calls (3.9 and 3.10
        # through the thread's bound thread state, 3.11 and 3.12 from the eval loop's frame on the C stack).
        bench_syscatch "sc_${id}_known30" "  with --fast: a matching call of a known stack, CPython 3.$v" "" "$mode" \
            "$N_PY" 65536 "--fast: no stop once known; untraced loop subtracted" --fast
        if [[ -n $per ]]; then
            row "sc_${id}_read" "  of which reading the Python frames (goal <= $goal us)" us/event ok \
                "summary python_us_per_event (thread stopped meanwhile)" "$per" "" "" "" 1
        else
            row "sc_${id}_read" "  of which reading the Python frames (goal <= $goal us)" us/event failed \
                "no python_us_per_event in syscatch's summary"
        fi
    done
}

START=$EPOCHREALTIME
# The full run; `--python` runs only the Python rows (the block below is left unindented to keep it readable).
if ((PYTHON_ONLY)); then
    bench_python
else
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
TRACER_FREE=1 bench_syscatch sc_nonmatch_target_pinned "syscatch non-matching hit, target pinned to 1 CPU" \
    "$PIN_CPU" getpid "$N_SC" 65536 "target on CPU $PIN_CPU, syscatch started free"
bench_syscatch sc_match_stack "syscatch matching hit, rax + 64 KiB stack" "" mmap "$N_SC_MATCH" 65536 \
    "--stack-bytes 65536"
bench_syscatch sc_match_nostack "syscatch matching hit, rax only" "" mmap "$N_SC_MATCH" 0 "--stack-bytes 0"
bench_syscatch sc_fast_nonmatch "syscatch --fast, non-matching call" "" getpid "$N_SC" 65536 \
    "--fast: no stop, a jump and a compare" --fast
bench_syscatch sc_fast_match "syscatch --fast, matching hit, rax + 64 KiB stack" "" mmap "$N_SC_MATCH" 65536 \
    "--fast --no-known-stacks: one stop after the kernel returned" "--fast --no-known-stacks"
bench_syscatch sc_known_match "syscatch --fast, matching call of a known stack" "" mmap "$N_SC_MATCH" 65536 \
    "--fast: the loop's stack is known after its first calls; no stop" --fast
TRACER_FREE=1 bench_syscatch sc_fast_match_target_pinned "syscatch --fast, matching hit, target pinned to 1 CPU" \
    "$PIN_CPU" mmap "$N_SC_MATCH" 65536 "target on CPU $PIN_CPU, syscatch started free" "--fast --no-known-stacks"
# Bursts (issue 13): rounds of N back-to-back matching calls, no pause; the first round follows the attach, so it
# includes the first event's costs. As the issue measured them: the target pinned, syscatch started free. The note
# counts events whose stack window was dropped under pressure.
bench_burst() { # id n [text]
    local how="JSON to a file"
    [[ ${3:-} == text ]] && how="text to a read pipe"
    OUTPUT=${3:-json} TRACER_FREE=1 bench_syscatch "$1" "syscatch burst of $2 matching calls, 64 KiB stack, $how" \
        "$PIN_CPU" mmap "$2" 65536 "target on CPU $PIN_CPU, back to back"
    if [[ ${R_STATUS[$1]} == ok ]]; then
        R_NOTE[$1]="target on CPU $PIN_CPU, back to back; $(grep -c 'stack window dropped' "$LAST_EVENTS") of the events without their stack"
    fi
}
bench_burst sc_burst300_json 300
bench_burst sc_burst10k_json $((QUICK ? 3000 : 10000))
# The analysis threads' own throughput in that run: events over the busier stage's busy time (summary).
if [[ ${R_STATUS[sc_burst10k_json]} == ok ]] && v=$(summary_field "$LAST_EVENTS" analysis_events_per_s) && [[ -n $v ]]; then
    row analysis_events_per_s "analysis throughput, repeating stacks (goal >= 50,000)" events/s ok \
        "summary analysis_events_per_s of sc_burst10k_json: events / the busier analysis thread's busy time" \
        "$v" "" "" "" 1
elif want sc_burst10k_json; then
    row analysis_events_per_s "analysis throughput, repeating stacks (goal >= 50,000)" events/s failed \
        "no analysis_events_per_s in sc_burst10k_json's summary"
else
    skip analysis_events_per_s "analysis throughput" events/s
fi
bench_burst sc_burst300_text 300 text
bench_burst sc_burst10k_text $((QUICK ? 3000 : 10000)) text
# Issue 13's goals, each measured pair by pair with the floor (see bench_paired): target pinned, syscatch free.
bench_paired paired_nonmatch "paired: non-matching hit / floor (goal 1.3)" getpid "$N_SC" 65536
bench_paired paired_fast_match "paired: --fast matching hit / floor (goal 1.5)" mmap "$N_SC_MATCH" 65536 \
    "--fast --no-known-stacks"
bench_paired_design paired_fast_design "paired: --fast's three system calls in a C tracer / floor" 65536
bench_paired paired_burst300_json "paired: burst of 300, JSON to a file / floor (goal 4)" mmap 300 65536
bench_paired paired_burst10k_json "paired: burst of 10k (3k with --quick), JSON / floor (goal 4)" mmap \
    $((QUICK ? 3000 : 10000)) 65536
OUTPUT=text bench_paired paired_burst300_text "paired: burst of 300, text to a read pipe / floor (goal 4)" mmap 300 \
    65536
OUTPUT=text bench_paired paired_burst10k_text "paired: burst of 10k (3k with --quick), text / floor (goal 4)" mmap \
    $((QUICK ? 3000 : 10000)) 65536
# The first matching call after attaching against the 1000th, each timed alone by the target (a fresh syscatch per
# run, untraced call subtracted): the first must not pay for loading symbols or DWARF.
bench_first() {
    local f=() t=() a=() i line
    if ! want sc_first_event; then
        skip sc_first_event "first matching call after attach" us
        skip sc_1000th_event "1000th matching call" us
        skip sc_again_event "a matching call alone, 100 ms after the 1000th" us
        return
    fi
    say "first vs 1000th matching call"
    for ((i = 0; i < RUNS; i++)); do
        target_cmd mmap
        target_start "" "${TCMD[@]}" || die "cannot start the mmap target"
        # --no-fast: every call stops (with --fast the 1000th call's stack is known and it does not stop at all).
        if ! tracer_start "" err '^syscatch: attached' "$SC" --pid "$T_PID" --syscall mmap --no-fast --json \
            -o /dev/null; then
            target_quit
            row sc_first_event "first matching call after attach" us failed "syscatch did not attach"
            return
        fi
        echo "each 1000" >&"$T_IN"
        read -r -t "$READ_TIMEOUT" -u "$T_OUT" line
        kill -INT "$TR_PROC"
        tracer_wait
        target_quit
        [[ $line =~ ^first\ ([0-9]+)\ nth\ ([0-9]+)\ again\ ([0-9]+)$ ]] || {
            row sc_first_event "first matching call after attach" us failed "the target said: $line"
            return
        }
        f+=("$(calc "(${BASH_REMATCH[1]} - ${BASE[mmap]}) / 1000")")
        t+=("$(calc "(${BASH_REMATCH[2]} - ${BASE[mmap]}) / 1000")")
        a+=("$(calc "(${BASH_REMATCH[3]} - ${BASE[mmap]}) / 1000")")
    done
    row_values sc_first_event "first matching call after attach (64 KiB stack)" us "" "fresh syscatch per run" "${f[@]}"
    row_values sc_1000th_event "1000th matching call, same runs" us "" "back to back after the first" "${t[@]}"
    row_values sc_again_event "a matching call alone, 100 ms after the 1000th" us "" "same runs; from idle, as the first" \
        "${a[@]}"
    # The kernel's own first stop, for reference: the floor tracer's first hit against its 1000th, measured the
    # same way (a fresh floor and target per run). A first trap costs more than a warm one even with nothing to
    # load (cold caches and TLBs, a wake-up after a long sleep); syscatch should add nothing to that.
    f=() t=() a=()
    for ((i = 0; i < RUNS; i++)); do
        target_start "" "$TMP/loop" int3 || die "cannot start the int3 target"
        if ! tracer_start "" err '^floor: attached' "$TMP/floor" "$T_PID"; then
            target_quit
            row floor_first_event "floor: first hit after attach" us failed "the floor tracer did not attach"
            return
        fi
        echo "each 1000" >&"$T_IN"
        read -r -t "$READ_TIMEOUT" -u "$T_OUT" line
        target_quit
        tracer_wait
        [[ $line =~ ^first\ ([0-9]+)\ nth\ ([0-9]+)\ again\ ([0-9]+)$ ]] || {
            row floor_first_event "floor: first hit after attach" us failed "the target said: $line"
            return
        }
        f+=("$(calc "(${BASH_REMATCH[1]} - ${BASE[getpid]}) / 1000")")
        t+=("$(calc "(${BASH_REMATCH[2]} - ${BASE[getpid]}) / 1000")")
        a+=("$(calc "(${BASH_REMATCH[3]} - ${BASE[getpid]}) / 1000")")
    done
    row_values floor_first_event "floor: first hit after attach" us "" "fresh floor tracer per run" "${f[@]}"
    row_values floor_1000th_event "floor: 1000th hit, same runs" us "" "back to back after the first" "${t[@]}"
    row_values floor_again_event "floor: a hit alone, 100 ms after the 1000th" us "" "same runs" "${a[@]}"
}
bench_first
# What the target pays (issue 26): sparse hits, unpinned, quiet and beside one CPU-bound process.
bench_sparse 10 "$N_SPARSE10"
bench_sparse 100 "$N_SPARSE100"
# A Python worker's throughput under each tool (issue 26): the share of its untraced steps/s it keeps.
bench_worker
bench_mallocs
# Several processes in one trace (issue 36): four workers traced together against one alone; syscatch's RSS and CPU
# with 1, 4 and 16 processes.
bench_tree_workers
bench_tree_cost
bench_watch_cost
# A munmap written to --fast's ring without a stop, per call (issue 26), and a pinned target's work rate in the first
# second after syscatch --leaks attaches and in the next (the analysis threads and the prefetch stay off its CPU).
bench_ring_munmap "$N_RING"
bench_pinned_attach
bench_gdb gdb_nonmatch "gdb: break syscall if \$rdi == 9, non-matching" getpid "$N_GDB" 0 "commands: silent, continue"
bench_gdb gdb_match_bt "gdb: matching hit with bt" mmap "$N_GDB_BT" 1 "commands: silent, bt, continue"
if command -v bpftrace >/dev/null; then
    row bpftrace_nonmatch "bpftrace uprobe on syscall, arg0 == 9" us/hit pending "installed, but not measured by this script yet"
else
    row bpftrace_nonmatch "bpftrace uprobe on syscall, arg0 == 9" us/hit not_installed "not installed"
fi

# Stacks (issue 3): a 30-frame stack (deep chain: chain01 -> ... -> chain30 -> syscall, -O2 -fomit-frame-pointer).
# With --only, this block runs when one of its rows is asked for.
if [[ -z $ONLY || ,$ONLY, =~ ,(sc_stack30|gdb_stack30|unwind|symbolize|sc_frame_cached|ratio_gdb_sc_) ]]; then
say "baseline (untraced 30-function chain)"
baseline chain "$N_STACK_BASE"
row base_chain "untraced chain01..chain30 -> mmap + munmap" us/iter ok "subtracted from the stack30 rows" \
    "$(calc "${BASE[chain]} / 1000")" "" "" "$N_STACK_BASE" "$RUNS"
LAST_EVENTS="" LAST_STOPPED_US=""
bench_syscatch sc_stack30 "syscatch matching hit, 30-frame stack, 64 KiB copy" "" chain "$N_STACK_SC" 65536 \
    "--stack-bytes 65536; stacks checked whole"
STACK30_EVENTS=$LAST_EVENTS STOPPED_STACK=$LAST_STOPPED_US
LAST_STOPPED_US=""
bench_syscatch sc_stack30_nostack "syscatch matching hit, 30-frame stack, no copy" "" chain "$N_STACK_SC" 0 \
    "--stack-bytes 0"
STOPPED_NOSTACK=$LAST_STOPPED_US
# The capture cost is what the copy adds to the time the thread is held stopped, from syscatch's own clock: on
# the target's clock, wake-up latencies (an idle vCPU when the analysis thread has nothing to do) swamp it.
if [[ -n $STOPPED_STACK && -n $STOPPED_NOSTACK ]]; then
    row sc_stack30_capture "syscatch 64 KiB stack copy: added stopped time/hit" us/hit ok \
        "summary stopped_ms/hits: $(fmt "$STOPPED_STACK") with the copy - $(fmt "$STOPPED_NOSTACK") without" \
        "$(calc "$STOPPED_STACK - $STOPPED_NOSTACK")" "" "" "" 1
else
    row sc_stack30_capture "syscatch 64 KiB stack copy: added stopped time/hit" us/hit failed \
        "needs sc_stack30 and sc_stack30_nostack"
fi
diff_row sc_stack30_capture_target "the same on the target's clock (noisy)" us/hit sc_stack30 sc_stack30_nostack \
    "sc_stack30 - sc_stack30_nostack; wake-up latency dominates, can be < 0"
LAST_GDB_FRAMES=""
bench_gdb gdb_stack30_nobt "gdb: break syscall if \$rdi == 9, 30-frame stack" chain "$N_STACK_GDB" 0 \
    "commands: silent, continue"
bench_gdb gdb_stack30_bt "gdb: the same with bt, 30-frame stack" chain "$N_STACK_GDB" 1 \
    "commands: silent, bt, continue"
diff_row gdb_stack30_bt_cost "gdb's bt of a 30-frame stack, per hit" us/hit gdb_stack30_bt gdb_stack30_nobt \
    "gdb_stack30_bt - gdb_stack30_nobt (target clock)"
if [[ ${R_STATUS[gdb_stack30_bt_cost]} == ok && -n $LAST_GDB_FRAMES ]]; then
    row gdb_stack30_bt_frame "gdb's bt per frame (unwind + symbolize + print)" ns/frame ok \
        "gdb_stack30_bt_cost / $(fmt "$LAST_GDB_FRAMES") frames per bt (down to main)" \
        "$(calc "${R_MED[gdb_stack30_bt_cost]} * 1000 / $LAST_GDB_FRAMES")" "" "" "" 1
else
    row gdb_stack30_bt_frame "gdb's bt per frame (unwind + symbolize + print)" ns/frame failed \
        "needs gdb_stack30_bt_cost"
fi
summary_row unwind "syscatch unwind per frame (cached CFI)" "$STACK30_EVENTS" unwind_ns_per_frame
summary_row symbolize_first "syscatch symbolize per new address" "$STACK30_EVENTS" symbolize_first_ns_per_frame
summary_row symbolize_cached "syscatch symbolize per cached address" "$STACK30_EVENTS" symbolize_cached_ns_per_frame
if [[ ${R_STATUS[unwind]} == ok && ${R_STATUS[symbolize_cached]} == ok ]]; then
    row sc_frame_cached "syscatch unwind + cached symbolize per frame" ns/frame ok "unwind + symbolize_cached" \
        "$(calc "${R_MED[unwind]} + ${R_MED[symbolize_cached]}")" "" "" "" 1
else
    row sc_frame_cached "syscatch unwind + cached symbolize per frame" ns/frame \
        "$([[ ${R_STATUS[unwind]} == failed ]] && echo failed || echo pending)" "needs unwind and symbolize_cached"
fi

fi # the stack block

for n in "${ATTACH_THREADS[@]}"; do
    for kind in idle busy; do
        bench_attach "$n" "$kind"
    done
done

bench_memory

# `syscatch stack` against eu-stack and gdb (issue 13): one dump of every thread of a 34-thread Python process
# (testprogs/py_threads.py: workers parked in accept, select, a condition, a queue, a lock, sleep and read under
# a few Python calls). The three tools alternate, at least 7 runs each; wall time from the bench's clock, peak
# RSS from /usr/bin/time. A run counts only if it shows all 34 threads.
bench_stack_dump() {
    local ids=(stack34_sc stack34_eu stack34_gdb stack34_sc_rss stack34_eu_rss stack34_gdb_rss)
    local id want_any=0 runs=$((RUNS < 7 ? 7 : RUNS)) i tool t0 n rss out
    for id in "${ids[@]}"; do want "$id" && want_any=1; done
    if ((!want_any)); then
        for id in "${ids[@]}"; do skip "$id" "stack dump" ms; done
        return
    fi
    say "stack dump of 34 threads: syscatch stack, eu-stack, gdb"
    local py
    py=$(command -v python3) || {
        for id in "${ids[@]}"; do row "$id" "stack dump, 34 Python threads" ms not_installed "no python3"; done
        return
    }
    target_start "" "$py" "$ROOT/testprogs/py_threads.py" 33 || die "cannot start the py_threads target"
    declare -A T RSS BAD
    local -A cmd=(
        [sc]="$SC stack --pid $T_PID"
        [eu]="eu-stack -i -s -p $T_PID"
        [gdb]="gdb -batch -p $T_PID -ex 'thread apply all bt'"
    )
    local -A count=([sc]='^thread [0-9]' [eu]='^TID [0-9]' [gdb]='^Thread [0-9]')
    local -A have=([sc]=1 [eu]=0 [gdb]=0)
    command -v eu-stack >/dev/null && have[eu]=1
    command -v gdb >/dev/null && have[gdb]=1
    for ((i = 0; i < runs; i++)); do
        for tool in sc eu gdb; do
            ((have[$tool])) || continue
            out=$TMP/stack_$tool.out
            t0=$EPOCHREALTIME
            eval "/usr/bin/time -f %M -o $TMP/stack_$tool.rss ${cmd[$tool]}" >"$out" 2>"$TMP/stack_$tool.err"
            t=$(calc "($EPOCHREALTIME - $t0) * 1000")
            n=$(grep -c "${count[$tool]}" "$out")
            rss=$(tail -1 "$TMP/stack_$tool.rss")
            if [[ $n != 34 || ! $rss =~ ^[0-9]+$ ]]; then
                BAD[$tool]="a run showed ${n:-0} of 34 threads: $(tail -1 "$TMP/stack_$tool.err")"
                continue
            fi
            T[$tool]+="$t " RSS[$tool]+="$(calc "$rss / 1024") "
        done
    done
    target_quit
    local -A label=([sc]="syscatch stack" [eu]="eu-stack -i -s" [gdb]="gdb thread apply all bt")
    local -A note=([sc]="native + Python frames, file:line, inlined" [eu]="file:line, inlined"
        [gdb]="file:line, inlined")
    for tool in sc eu gdb; do
        if ((!have[$tool])); then
            row "stack34_$tool" "${label[$tool]}, 34 threads" ms not_installed "not installed"
            row "stack34_${tool}_rss" "  its peak RSS" MiB not_installed "not installed"
        elif [[ -n ${BAD[$tool]:-} ]]; then
            row "stack34_$tool" "${label[$tool]}, 34 threads" ms failed "${BAD[$tool]}"
            row "stack34_${tool}_rss" "  its peak RSS" MiB failed "${BAD[$tool]}"
        else
            # shellcheck disable=SC2086 # the values are space-separated numbers
            row_values "stack34_$tool" "${label[$tool]}, 34 threads" ms "" "${note[$tool]}" ${T[$tool]}
            # shellcheck disable=SC2086
            row_values "stack34_${tool}_rss" "  its peak RSS" MiB "" "/usr/bin/time Maximum resident set size" \
                ${RSS[$tool]}
        fi
    done
}
bench_stack_dump

# `--leaks --for 1s` on a process with 30,000 mappings (testprogs/many_maps.c: one-page mappings with alternating
# protections, 21 MB of smaps text; issue 26): syscatch's wall time on the bench's clock and its peak RSS from
# /usr/bin/time, the target idle. Then the same trace while the target maps and unmaps a page every 200 us with a
# bare `syscall` instruction (untraced) and times each pair itself: the longest pair is how long its own mmap calls
# waited for syscatch (for the mmap lock an smaps reader holds); the same window untraced first, for reference.
# One window of many_maps' own timing around a command (its output discarded): prints "longest_ms over_1ms".
many_maps_window() { # cmd...
    local line max over
    echo time >&"$T_IN"
    "$@" >/dev/null 2>&1
    echo stop >&"$T_IN"
    read -r -t "$READ_TIMEOUT" -u "$T_OUT" line || return 1
    [[ $line == wait\ * ]] || return 1
    read -r _ _ _ max over <<<"$line"
    echo "$(calc "$max / 1000") $over"
}
bench_many_maps() {
    local ids=(sc_many_maps sc_many_maps_rss sc_many_maps_wait) id want_any=0 i t0 rss line
    for id in "${ids[@]}"; do want "$id" && want_any=1; done
    if ((!want_any)); then
        for id in "${ids[@]}"; do skip "$id" "--leaks on 30,000 mappings" s; done
        return
    fi
    say "--leaks --for 1s on 30,000 mappings"
    gcc -O2 -Wall -o "$TMP/many_maps" "$ROOT/testprogs/many_maps.c" || die "cannot compile testprogs/many_maps.c"
    local walls=() rsss=() waits=() over=() bad="" untraced=""
    for ((i = 0; i < RUNS; i++)); do
        target_start "" "$TMP/many_maps" || die "cannot start the many_maps target"
        read -r -t "$READ_TIMEOUT" -u "$T_OUT" line && [[ $line == maps\ 30000\ * ]] ||
            die "many_maps did not map its pages: $line"
        if [[ -z $untraced ]]; then
            # The untraced window lasts as long as a trace would.
            untraced=$(many_maps_window sleep 1.5) || die "many_maps failed to time its calls"
        fi
        t0=$EPOCHREALTIME
        /usr/bin/time -f %M -o "$TMP/many_maps.rss" "$SC" --pid "$T_PID" --leaks --for 1s >"$TMP/many_maps.out" \
            2>"$TMP/many_maps.err"
        walls+=("$(calc "$EPOCHREALTIME - $t0")")
        rss=$(tail -1 "$TMP/many_maps.rss")
        if ! grep -q '^Findings' "$TMP/many_maps.out" || [[ ! $rss =~ ^[0-9]+$ ]]; then
            bad="no leak report: $(tail -1 "$TMP/many_maps.err")"
        fi
        rsss+=("$(calc "$rss / 1024")")
        line=$(many_maps_window "$SC" --pid "$T_PID" --leaks --for 1s) || die "many_maps failed to time its calls"
        waits+=("${line% *}") over+=("${line#* }")
        target_quit
    done
    if [[ -n $bad ]]; then
        for id in "${ids[@]}"; do row "$id" "--leaks on 30,000 mappings" s failed "$bad"; done
        return
    fi
    row_values sc_many_maps "syscatch --leaks --for 1s, 30,000 mappings (goal <= 1.5)" s "" "the target idle" \
        "${walls[@]}"
    row_values sc_many_maps_rss "  its peak RSS (goal <= 60)" MiB "" "/usr/bin/time Maximum resident set size" \
        "${rsss[@]}"
    row_values sc_many_maps_wait "  longest wait of the target's own mmap + munmap meanwhile" ms "" \
        "pairs over 1 ms: ${over[*]}; untraced: ${untraced% *} ms, ${untraced#* } over 1 ms" "${waits[@]}"
}
bench_many_maps

ratio() { # id name numerator-id denominator-id
    if [[ ${R_STATUS[$3]:-skipped} == skipped || ${R_STATUS[$4]:-skipped} == skipped ]]; then
        skip "$1" "$2" x
        return
    fi
    if [[ ${R_STATUS[$3]} == ok && ${R_STATUS[$4]} == ok ]] && awk "BEGIN {exit !(${R_MED[$4]} > 0)}"; then
        row "$1" "$2" x ok "$3 / $4" "$(calc "${R_MED[$3]} / ${R_MED[$4]}")"
    elif [[ ${R_STATUS[$3]} == pending || ${R_STATUS[$4]} == pending ]]; then
        row "$1" "$2" x pending "needs $3 and $4"
    elif [[ ${R_STATUS[$3]} == ok && ${R_STATUS[$4]} == ok ]]; then
        row "$1" "$2" x failed "$4 is not positive (noise larger than the cost?)"
    else
        row "$1" "$2" x failed "needs $3 and $4"
    fi
}
ratio ratio_sc_floor "syscatch / floor, non-matching" sc_nonmatch floor_pinned
ratio ratio_sc_floor_pinned "syscatch / floor, non-matching, both pinned" sc_nonmatch_pinned floor_pinned
ratio ratio_sc_floor_target_pinned "syscatch / floor, non-matching, target pinned (goal 1.3)" \
    sc_nonmatch_target_pinned floor_pinned
ratio ratio_sc_floor_match "syscatch matching (64 KiB stack) / floor" sc_match_stack floor_pinned
ratio ratio_burst300_floor "syscatch burst of 300 matching / floor" sc_burst300_json floor_pinned
ratio ratio_burst10k_floor "syscatch burst of 10k matching (3k with --quick) / floor" sc_burst10k_json floor_pinned
ratio ratio_fast_floor_match "syscatch --fast matching (64 KiB stack) / floor" sc_fast_match floor_pinned
ratio ratio_fast_floor_match_target_pinned "syscatch --fast matching, target pinned / floor (goal 1.5)" \
    sc_fast_match_target_pinned floor_pinned
ratio ratio_fast_floor_unpinned "syscatch --fast matching / floor placed by the scheduler alike" sc_fast_match \
    floor_unpinned
ratio ratio_burst300_text_floor "syscatch burst of 300, text to a pipe / floor" sc_burst300_text floor_pinned
ratio ratio_burst10k_text_floor "syscatch burst of 10k (3k with --quick), text to a pipe / floor" sc_burst10k_text \
    floor_pinned
ratio ratio_first_1000th "first matching call / 1000th (goal: no more than the floor's)" sc_first_event sc_1000th_event
ratio ratio_floor_first_1000th "floor: first hit / 1000th (the kernel's own first-stop cost)" floor_first_event \
    floor_1000th_event
ratio ratio_first_again "first matching call / one alone after 100 ms idle (first-time costs only)" sc_first_event \
    sc_again_event
ratio ratio_floor_first_again "floor: first hit / one alone after 100 ms idle" floor_first_event floor_again_event
ratio ratio_gdb_sc "gdb / syscatch, non-matching" gdb_nonmatch sc_nonmatch
ratio ratio_stack34_sc_eu "syscatch stack / eu-stack, 34 threads, time (goal <= 1)" stack34_sc stack34_eu
ratio ratio_stack34_sc_eu_rss "syscatch stack / eu-stack, 34 threads, peak RSS (goal <= 1)" stack34_sc_rss \
    stack34_eu_rss
ratio ratio_stack34_gdb_sc "gdb / syscatch stack, 34 threads, time" stack34_gdb stack34_sc
ratio ratio_gdb_sc_match "gdb (bt) / syscatch (64 KiB stack), matching" gdb_match_bt sc_match_stack
ratio ratio_gdb_sc_capture30 "gdb bt / syscatch 64 KiB copy, 30 frames, per hit" gdb_stack30_bt_cost sc_stack30_capture
ratio ratio_gdb_sc_unwind "gdb bt per frame / syscatch unwind per frame" gdb_stack30_bt_frame unwind
ratio ratio_gdb_sc_symbolize_first "gdb bt per frame / syscatch symbolize, new address" gdb_stack30_bt_frame \
    symbolize_first
ratio ratio_gdb_sc_symbolize_cached "gdb bt per frame / syscatch symbolize, cached" gdb_stack30_bt_frame \
    symbolize_cached
ratio ratio_gdb_sc_frame "gdb bt per frame / syscatch unwind + cached symbolize" gdb_stack30_bt_frame sc_frame_cached
bench_python
fi # --python
ELAPSED=$(calc "$EPOCHREALTIME - $START")

print_table
