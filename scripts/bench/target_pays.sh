# What the target pays (issue 26, part 1), sourced by scripts/bench.sh: sparse hits on a target that computes
# between its calls, on a quiet machine and beside one CPU-bound process; a Python worker's throughput under each
# tool. Uses bench.sh's globals and lib.sh's helpers.

# ---------------------------------------------------------------- sparse hits
# The CPU-bound neighbour: `loop spin`, unpinned, started before a busy round and killed after it.
hog_start() {
    "$TMP/loop" spin &
    HOG=$!
    STARTED+=("$HOG")
    # Not a synchronisation: a fresh process is placed on the idlest CPU, away from the traced pair; the load
    # balancer mixes them within a few tens of ms, and a busy machine is that mixed state.
    sleep 0.2
}
hog_stop() {
    kill -KILL "$HOG" 2>/dev/null
    wait "$HOG" 2>/dev/null
}

# One sparse round on the target whose fifos are `in` and `out`: prints "CALLS_NS COMPUTE_NS" (loop.c).
sparse_on() { # in out n gap-us
    local line
    echo "sparse $3 $4" >&"$1"
    read -r -t "$READ_TIMEOUT" -u "$2" line || return 1
    [[ $line =~ ^ns\ ([0-9]+)\ compute\ ([0-9]+)$ ]] || return 1
    echo "${BASH_REMATCH[1]} ${BASH_REMATCH[2]}"
}

# Whether any row of a group (ids starting with one of the prefixes) is asked for.
want_prefix() { # prefix...
    local p
    [[ -z $ONLY ]] && return 0
    for p in "$@"; do
        [[ ,$ONLY, == *",$p"* ]] && return 0
    done
    return 1
}

# Sparse hits: every loop computes `gap` us (calibrated work, loop.c) before each call, nothing is pinned, and each
# figure is the caller's own time around the call, the untraced call's subtracted. Seven loops run at once, each
# on its own target, and take turns: the floor tracer on `loop int3`; the untraced getpid and mmap loops; syscatch
# `--syscall mmap` on the getpid loop (non-matching) and on the mmap loop (matching), and the same two with
# --fast. Each turn runs all seven quiet and all seven beside one CPU-bound process (`loop spin`, unpinned, started
# for the busy half and killed after it); the order of the loops and of the two halves turns around every other
# turn. A per-hit figure subtracts the untraced loop of the same turn and load; a ratio divides by the floor's
# quiet figure of the same turn; each row is the median over 2 x RUNS + 1 turns.
SPARSE_KEYS=(floor base_getpid base_mmap sc_nonmatch sc_match fast_nonmatch fast_match)
bench_sparse() { # gap-us n
    local gap=$1 n=$2 p="sparse$1" turns=$((2 * RUNS + 1)) k i j load t c ok=0 warm
    local -A IN OUT PROC TRP TRD LOG EV VAL CMP
    local -a order loads
    warm=$((n / 10 > 10 ? n / 10 : 10))
    if ! want_prefix "${p}_" "ratio_${p}_"; then
        for k in "${SPARSE_KEYS[@]}"; do
            skip "${p}_${k}_quiet" "sparse $gap us" us/hit
            skip "${p}_${k}_busy" "sparse $gap us" us/hit
        done
        return
    fi
    say "sparse hits, $gap us of computing between calls: floor, syscatch, syscatch --fast; quiet and busy"
    # The seven loops, each waiting on its fifo.
    target_start "" "$TMP/loop" int3 || die "cannot start the int3 target"
    IN[floor]=$T_IN OUT[floor]=$T_OUT PROC[floor]=$T_PROC
    tracer_start "" err '^floor: attached' "$TMP/floor" "$T_PID" || ok=1
    TRP[floor]=$TR_PROC TRD[floor]=$TR_DRAIN LOG[floor]=$TR_LOG
    for k in getpid mmap; do
        target_start "" "$TMP/loop" "$k" || die "cannot start the $k target"
        IN[base_$k]=$T_IN OUT[base_$k]=$T_OUT PROC[base_$k]=$T_PROC
    done
    local -A MODE=([sc_nonmatch]=getpid [sc_match]=mmap [fast_nonmatch]=getpid [fast_match]=mmap)
    local -A FLAGS=([sc_nonmatch]="" [sc_match]="" [fast_nonmatch]=--fast [fast_match]=--fast)
    for k in sc_nonmatch sc_match fast_nonmatch fast_match; do
        ((ok == 0)) || break
        sc_start "" "" "${MODE[$k]}" 65536 "${FLAGS[$k]}" || ok=1
        IN[$k]=$T_IN OUT[$k]=$T_OUT PROC[$k]=$T_PROC TRP[$k]=$TR_PROC TRD[$k]=$TR_DRAIN LOG[$k]=$TR_LOG EV[$k]=$SC_EVENTS
    done
    # A warm-up round each (syscatch's symbol prefetch runs meanwhile), quiet, discarded.
    for k in "${SPARSE_KEYS[@]}"; do
        ((ok == 0)) || break
        (sparse_on "${IN[$k]}" "${OUT[$k]}" "$warm" "$gap") >/dev/null || ok=1
    done
    for ((i = 0; i < turns && ok == 0; i++)); do
        order=("${SPARSE_KEYS[@]}") loads=(quiet busy)
        if ((i % 2)); then
            order=() loads=(busy quiet)
            for ((j = ${#SPARSE_KEYS[@]} - 1; j >= 0; j--)); do order+=("${SPARSE_KEYS[j]}"); done
        fi
        for load in "${loads[@]}"; do
            [[ $load == busy ]] && hog_start
            for k in "${order[@]}"; do
                t=$(sparse_on "${IN[$k]}" "${OUT[$k]}" "$n" "$gap") || {
                    ok=1
                    break
                }
                VAL[$i,$load,$k]=${t% *} CMP[$load]+="${t#* } "
            done
            [[ $load == busy ]] && hog_stop
            ((ok == 0)) || break
        done
    done
    # Tracers first (syscatch writes its summary), then the targets.
    for k in sc_nonmatch sc_match fast_nonmatch fast_match; do
        [[ -n ${TRP[$k]:-} ]] && kill -INT "${TRP[$k]}" 2>/dev/null
    done
    for k in "${SPARSE_KEYS[@]}"; do
        [[ -n ${PROC[$k]:-} ]] && T_IN=${IN[$k]} T_OUT=${OUT[$k]} T_PROC=${PROC[$k]} target_quit
        [[ -n ${TRP[$k]:-} ]] && TR_PROC=${TRP[$k]} TR_DRAIN=${TRD[$k]} tracer_wait
    done
    local fail=""
    ((ok == 0)) || fail="a tracer did not attach or a round failed"
    EXPECT=$((warm + 2 * turns * n))
    if [[ -z $fail && $(floor_hits "${LOG[floor]}") != "$EXPECT" ]]; then
        fail="floor counted $(floor_hits "${LOG[floor]}") hits, expected $EXPECT"
    fi
    for k in sc_nonmatch sc_match fast_nonmatch fast_match; do
        [[ -n $fail ]] && break
        TR_LOG=${LOG[$k]} SC_EVENTS=${EV[$k]}
        sc_counted "${MODE[$k]}" "${FLAGS[$k]}" || fail="$k: $SC_WHY"
    done
    if [[ -n $fail ]]; then
        for k in "${SPARSE_KEYS[@]}"; do
            row "${p}_${k}_quiet" "sparse $gap us: $k" us/hit failed "$fail"
        done
        return
    fi
    # What the loops computed between calls, per call, quiet and beside the busy process.
    local cq cb
    # shellcheck disable=SC2086 # space-separated numbers
    cq=$(calc "$(median ${CMP[quiet]}) / $n / 1000") cb=$(calc "$(median ${CMP[busy]}) / $n / 1000")
    local -A NAME=([floor]="floor tracer" [base_getpid]="untraced getpid" [base_mmap]="untraced mmap + munmap"
        [sc_nonmatch]="syscatch non-matching" [sc_match]="syscatch matching, 64 KiB stack"
        [fast_nonmatch]="--fast non-matching" [fast_match]="--fast matching, known stack after the first")
    local -A BASE_OF=([floor]=base_getpid [sc_nonmatch]=base_getpid [fast_nonmatch]=base_getpid
        [sc_match]=base_mmap [fast_match]=base_mmap)
    local v r b fq x
    for load in quiet busy; do
        for k in "${SPARSE_KEYS[@]}"; do
            v=()
            for ((i = 0; i < turns; i++)); do
                if [[ $k == base_* ]]; then
                    v+=("$(calc "${VAL[$i,$load,$k]} / $n / 1000")")
                else
                    b=${BASE_OF[$k]}
                    v+=("$(calc "(${VAL[$i,$load,$k]} - ${VAL[$i,$load,$b]}) / $n / 1000")")
                fi
            done
            local note="computes $(fmt "$cq") us between calls; untraced call subtracted"
            [[ $load == busy ]] && note="beside one CPU-bound process; computes $(fmt "$cb") us between calls; untraced call subtracted"
            [[ $k == base_* ]] && note="${note%; untraced*}; subtracted from the rows below"
            local unit=us/hit
            [[ $k == base_* ]] && unit=us/call
            row_values "${p}_${k}_$load" "sparse ${gap}us $load: ${NAME[$k]}" $unit "$n" "$note" "${v[@]}"
        done
    done
    # Against the quiet floor of the same turn.
    for load in quiet busy; do
        for k in floor sc_nonmatch sc_match fast_match; do
            [[ $k == floor && $load == quiet ]] && continue
            r=()
            for ((i = 0; i < turns; i++)); do
                b=${BASE_OF[$k]}
                fq=$(calc "(${VAL[$i,quiet,floor]} - ${VAL[$i,quiet,base_getpid]}) / $n")
                x=$(calc "(${VAL[$i,$load,$k]} - ${VAL[$i,$load,$b]}) / $n")
                awk "BEGIN {exit !($fq > 0)}" && r+=("$(calc "$x / $fq")")
            done
            if ((${#r[@]})); then
                row_values "ratio_${p}_${k}_$load" "sparse ${gap}us $load: $k / quiet floor" x "$n" \
                    "turn by turn against the quiet floor of the same turn" "${r[@]}"
            else
                row "ratio_${p}_${k}_$load" "sparse ${gap}us $load: $k / quiet floor" x failed \
                    "the quiet floor was not positive in any turn"
            fi
        done
    done
}

# ---------------------------------------------------------------- the Python worker
# One answer of worker.py: "STEPS_PER_S SYSCALLS_PER_S" over `secs` seconds of its own clock.
rate_on() { # in out secs
    local line
    echo "rate $3" >&"$1"
    read -r -t "$READ_TIMEOUT" -u "$2" line || return 1
    [[ $line =~ ^rate\ ([0-9.]+)\ syscalls\ ([0-9]+)$ ]] || return 1
    echo "${BASH_REMATCH[1]} ${BASH_REMATCH[2]}"
}

# The bpftrace program of the worker rows: the calls `syscatch --leaks` takes, each with its user stack and a
# uretprobe capturing rax, counted in @calls: libc's syscall() filtered on the number (mmap, munmap, mremap), and
# libc's own mmap, munmap and mremap entries (the worker's temporaries and pymalloc arenas go through these), but
# like syscatch, not an entry a hook has patched (the worker's munmap: its calls reach syscall() through the hook).
# Each function has its own pending map, so a call made inside another (a hooked munmap's syscall()) and the
# outer call are both counted.
# Sets BT_FUNCS to the functions probed besides syscall() and BT_LEFT to those left out.
bpftrace_program() { # pid libc-path
    local f clear="clear(@stacks); clear(@ret); clear(@pending);"
    BT_FUNCS="" BT_LEFT=""
    cat <<BT
BEGIN { printf("bench: armed\n"); }
uprobe:$2:syscall /pid == $1 && (arg0 == 9 || arg0 == 11 || arg0 == 25)/ { @stacks[ustack] = count(); @pending[tid] = 1; }
uretprobe:$2:syscall /@pending[tid]/ { @ret[tid] = retval; @calls = count(); delete(@pending[tid]); }
BT
    for f in mmap munmap mremap; do
        python3 "$ROOT/scripts/bench/entry_intact.py" "$1" "$2" "$f"
        case $? in
        0) ;;
        1)
            BT_LEFT+="${BT_LEFT:+, }$f (its entry patched by a hook)"
            continue
            ;;
        *)
            BT_LEFT+="${BT_LEFT:+, }$f (not found)"
            continue
            ;;
        esac
        BT_FUNCS+="${BT_FUNCS:+, }$f"
        clear+=" clear(@in_$f);"
        cat <<BT
uprobe:$2:$f /pid == $1/ { @stacks[ustack] = count(); @in_$f[tid] = 1; }
uretprobe:$2:$f /@in_$f[tid]/ { @ret[tid] = retval; @calls = count(); delete(@in_$f[tid]); }
BT
    done
    echo "END { $clear }"
}

# Stops bpftrace and waits for it. bpftrace 0.17 can miss a SIGINT that comes as it enters its poll (seen: it sat
# in epoll_wait until a second one), so one is sent again every 0.25 s until it has exited (polled: its state Z).
bpftrace_stop() {
    local i
    kill -INT "$TR_PROC" 2>/dev/null
    for ((i = 0; i < 40; i++)); do
        [[ $(cut -d' ' -f3 "/proc/$TR_PROC/stat" 2>/dev/null) == Z || ! -e /proc/$TR_PROC ]] && break
        sleep 0.25
        kill -INT "$TR_PROC" 2>/dev/null
    done
    tracer_wait
}

# Throughput of scripts/bench/worker.py (3 Python threads: mmap'd temporaries, pymalloc arena churn, libworker.so's
# munmap hook growing its pool through syscall(SYS_mmap)), by its own clock: untraced, and under each tool attached
# to the running worker, alternated in one run. Each turn measures the six in a rotated order; a tool is attached,
# given WORKER_SECS / 2 to settle (attach, arm, the symbol prefetch) and then measured for WORKER_SECS, and stopped
# (SIGINT) before the next. A row is the median over RUNS turns of the tool's steps/s over the untraced steps/s of
# the same turn.
# (Not scripts/probes/libc-mmap.probe: the worker's hook patched libc's munmap entry, and `run` refuses to plant
# there.)
WORKER_TOOLS=(untraced leaks leaks_nofast mmap mmap_nofast run_raw malloc faults bpftrace)
bench_worker() {
    local t i j k r turn line libc ok=0 secs=$WORKER_SECS settle
    local -A CMD NAME SHARE RATE NOTE BAD
    settle=$(calc "$secs / 2")
    if ! want_prefix worker_; then
        for t in "${WORKER_TOOLS[@]}"; do skip "worker_$t" "worker" x; done
        return
    fi
    say "Python worker throughput: untraced, syscatch --leaks/--syscall mmap (each with --fast and not), bpftrace"
    local py
    # BENCH_PYTHON: another interpreter for the worker (say a pyenv 3.13, whose known stacks start elsewhere).
    py=${BENCH_PYTHON:-$(command -v python3)} || {
        for t in "${WORKER_TOOLS[@]}"; do row "worker_$t" "Python worker" x not_installed "no python3"; done
        return
    }
    gcc -O2 -Wall -fPIC -shared -pthread -o "$TMP/libworker.so" "$ROOT/scripts/bench/worker_lib.c" -ldl ||
        die "cannot compile scripts/bench/worker_lib.c"
    target_start "" "$py" "$ROOT/scripts/bench/worker.py" "$TMP/libworker.so" 3 || die "cannot start the worker"
    libc=$(grep -m1 -o '/[^ ]*/libc\.so\.6' "/proc/$T_PID/maps")
    NAME=([untraced]="worker untraced, steps/s" [leaks]="worker under syscatch --leaks (--fast by default)"
        [leaks_nofast]="worker under syscatch --leaks --no-fast"
        [mmap]="worker under syscatch --syscall mmap (--fast by default)"
        [mmap_nofast]="worker under syscatch --syscall mmap --no-fast"
        [run_raw]="worker under syscatch run scripts/probes/raw-mmap.probe"
        [malloc]="worker under syscatch --malloc (its allocations sampled, every 512 KiB)"
        [faults]="worker under syscatch --faults (one page fault in 64 sampled)"
        [bpftrace]="worker under bpftrace uprobe+uretprobe+ustack")
    CMD=([leaks]="$SC --pid $T_PID --leaks" [leaks_nofast]="$SC --pid $T_PID --leaks --no-fast"
        [mmap]="$SC --pid $T_PID --syscall mmap" [mmap_nofast]="$SC --pid $T_PID --syscall mmap --no-fast"
        [run_raw]="$SC run $ROOT/scripts/probes/raw-mmap.probe --pid $T_PID" [malloc]="$SC --pid $T_PID --malloc"
        [faults]="$SC --pid $T_PID --faults")
    if ! command -v bpftrace >/dev/null; then
        BAD[bpftrace]="not_installed:bpftrace not installed (Debian package bpftrace)"
    elif [[ -z $libc ]]; then
        BAD[bpftrace]="failed:the worker's libc.so.6 not found in its maps"
    else
        bpftrace_program "$T_PID" "$libc" >"$TMP/worker.bt"
    fi
    (rate_on "$T_IN" "$T_OUT" "$secs") >/dev/null || ok=1 # warm-up
    for ((turn = 0; turn < RUNS && ok == 0; turn++)); do
        local -A got=()
        for ((j = 0; j < ${#WORKER_TOOLS[@]}; j++)); do
            t=${WORKER_TOOLS[(j + turn) % ${#WORKER_TOOLS[@]}]}
            [[ -n ${BAD[$t]:-} ]] && continue
            if [[ $t != untraced ]]; then
                if [[ $t == bpftrace ]]; then
                    tracer_start "" out '^bench: armed' bpftrace "$TMP/worker.bt"
                else
                    # shellcheck disable=SC2086 # the command is space-separated words without spaces inside
                    tracer_start "" err '^syscatch: attached' ${CMD[$t]}
                fi || {
                    BAD[$t]="failed:did not arm: $(tail -1 "$TR_LOG")"
                    [[ -n ${TR_PROC:-} ]] && kill -INT "$TR_PROC" 2>/dev/null
                    tracer_wait
                    continue
                }
                rate_on "$T_IN" "$T_OUT" "$settle" >/dev/null || ok=1
            fi
            r=$(rate_on "$T_IN" "$T_OUT" "$secs") || ok=1
            if [[ $t == bpftrace ]]; then
                bpftrace_stop || BAD[$t]="failed:exited with status $?: $(tail -1 "$TR_LOG")"
                NOTE[$t]="syscall() for mmap/munmap/mremap, libc's ${BT_FUNCS:-no function}${BT_LEFT:+ (left out: \
$BT_LEFT)}; last turn: $(grep -o '^@calls: [0-9]*' "$TR_LOG" | tail -1) calls"
            elif [[ $t != untraced ]]; then
                kill -INT "$TR_PROC"
                tracer_wait || BAD[$t]="failed:exited with status $?: $(tail -1 "$TR_LOG")"
                line=$(grep -o '[0-9]* hits, [0-9]* matching' "$TR_LOG" | tail -1)
                [[ -z $line || $line == 0\ * ]] && BAD[$t]="failed:syscatch counted ${line:-no} hits: $(tail -1 "$TR_LOG")"
                NOTE[$t]="last turn: $line; waiting for a CPU: $(grep -o 'the target [0-9.]* ms' "$TR_LOG" | tail -1), \
$(grep -o 'the tracer [0-9.]* ms' "$TR_LOG" | tail -1) (schedstat)"
            fi
            ((ok == 0)) || break
            got[$t]=${r% *}
            RATE[$t]+="${r% *} "
            [[ $t == untraced ]] && NOTE[untraced]="syscall() calls/s: ${r#* } (last turn)"
        done
        for t in "${WORKER_TOOLS[@]}"; do
            [[ $t == untraced || -z ${got[$t]:-} || -z ${got[untraced]:-} ]] && continue
            SHARE[$t]+="$(calc "${got[$t]} / ${got[untraced]}") "
        done
    done
    target_quit
    for t in "${WORKER_TOOLS[@]}"; do
        if [[ -n ${BAD[$t]:-} ]]; then
            row "worker_$t" "${NAME[$t]}" x "${BAD[$t]%%:*}" "${BAD[$t]#*:}"
        elif ((ok != 0)) || [[ -z ${RATE[$t]:-} ]]; then
            row "worker_$t" "${NAME[$t]}" x failed "a round failed"
        elif [[ $t == untraced ]]; then
            # shellcheck disable=SC2086 # space-separated numbers
            row_values worker_untraced "${NAME[$t]}" steps/s "" "${NOTE[untraced]}" ${RATE[$t]}
        else
            # shellcheck disable=SC2086
            row_values "worker_$t" "${NAME[$t]}: share kept" x "" "${NOTE[$t]}" ${SHARE[$t]}
        fi
    done
}

# ---------------------------------------------------------------- a munmap in --fast's ring
# `syscatch --pid N --leaks` (which uses --fast) on `loop munmap`: every call is a syscall(SYS_munmap) of a page
# mapped beforehand (by a bare syscall instruction, unseen), which the trampoline writes to the ring in shared memory
# and the thread goes on, no stop. The loop computes RING_GAP_US (calibrated work) before each call, so the rate
# (about 1 / (gap + call)) stays far below what fills the 512-slot ring between two reads of the tracer; each call
# is timed alone by the target's clock, as the sparse rows. Two loops take turns, the traced one and the same loop
# untraced (subtracted turn by turn), order reversed every other turn, 2 x RUNS + 1 turns after a warm-up round
# each (3,000 calls, about 0.3 s: the symbol prefetch runs then). The row fails unless the summary's from_ring
# counts every call; hits - from_ring (calls that found the ring full and stopped) go to the note.
RING_GAP_US=100
bench_ring_munmap() { # n
    local id=sc_ring_munmap name="syscatch --leaks: munmap in the ring (goal < 1 us)" n=$1
    local turns=$((2 * RUNS + 1)) warm=3000 i t u ok=0 ev v=() cmp=() base=()
    local u_in u_out u_proc from hits
    want "$id" || {
        skip "$id" "$name" us/call
        return
    }
    say "$name"
    target_start "" "$TMP/loop" munmap || die "cannot start the munmap target"
    u_in=$T_IN u_out=$T_OUT u_proc=$T_PROC
    target_start "" "$TMP/loop" munmap || die "cannot start the munmap target"
    ev=$TMP/events$((SEQ += 1)).jsonl
    # The events go to the file; the leak report and the summary to stdout, read with the diagnostics.
    tracer_start "" out '^syscatch: attached' "$SC" --pid "$T_PID" --leaks --json -o "$ev" || ok=1
    if ((ok == 0)); then
        (sparse_on "$u_in" "$u_out" "$warm" "$RING_GAP_US" && sparse_on "$T_IN" "$T_OUT" "$warm" "$RING_GAP_US") \
            >/dev/null || ok=1
    fi
    for ((i = 0; i < turns && ok == 0; i++)); do
        if ((i % 2 == 0)); then
            u=$(sparse_on "$u_in" "$u_out" "$n" "$RING_GAP_US") && t=$(sparse_on "$T_IN" "$T_OUT" "$n" "$RING_GAP_US")
        else
            t=$(sparse_on "$T_IN" "$T_OUT" "$n" "$RING_GAP_US") && u=$(sparse_on "$u_in" "$u_out" "$n" "$RING_GAP_US")
        fi || {
            ok=1
            break
        }
        v+=("$(calc "(${t% *} - ${u% *}) / $n / 1000")") cmp+=("${t#* }")
        base+=("$(calc "${u% *} / $n / 1000")")
    done
    [[ -n ${TR_PROC:-} ]] && kill -INT "$TR_PROC" 2>/dev/null
    tracer_wait
    target_quit
    T_IN=$u_in T_OUT=$u_out T_PROC=$u_proc target_quit
    EXPECT=$((warm + turns * n))
    if ((ok != 0)); then
        row "$id" "$name" us/call failed "syscatch did not attach or a round failed (syscatch: $(tail -1 "$TR_LOG"))"
        return
    fi
    from=$(summary_field "$TR_LOG" from_ring) hits=$(summary_field "$TR_LOG" hits)
    if [[ $from != "$EXPECT" ]]; then
        row "$id" "$name" us/call failed \
            "summary from_ring ${from:-?}, expected $EXPECT; hits ${hits:-?} (stops: hits - from_ring)"
        return
    fi
    row_values "$id" "$name" us/call "$n" "computes $(fmt "$(calc "$(median "${cmp[@]}") / $n / 1000")") us \
between calls; untraced munmap ($(fmt "$(median "${base[@]}")") us) subtracted turn by turn; from_ring $from of \
$EXPECT calls, $((hits - from)) stopped" "${v[@]}"
}

# ---------------------------------------------------------------- a pinned target's CPU after attach
# A target pinned to CPU $PIN_CPU computes (`loop`'s "rate": 10 us chunks of calibrated work, counted per 100 ms
# of its own clock) for 1 s untraced; then `syscatch --pid N --leaks --for 3s` is started free (it moves its
# tracer to the target's CPU; its analysis threads and the symbol prefetch, which runs right after attach, must
# stay off it), and the moment its "attached" line comes the target computes for 2 s: the first second after
# attach and the one after it. Once syscatch has ended, 1 s untraced again. Each second's share = its work over the
# mean of the two untraced seconds of the same run; each row is the median over RUNS runs (a fresh target and
# syscatch each). The note gives the worst 100 ms window of the first second against the untraced mean window, and
# the worst untraced window likewise.
work_on() { # in out ms -> the per-100-ms counts
    local line
    echo "rate $3" >&"$1"
    read -r -t "$READ_TIMEOUT" -u "$2" line || return 1
    [[ $line =~ ^work(\ [0-9]+)+$ ]] || return 1
    echo "${line#work }"
}
sum_of() { local s=0 x; for x in "$@"; do s=$((s + x)); done; echo "$s"; }
bench_pinned_attach() {
    local name1="pinned target, 1st second after attach (goal 1.0)"
    local name2="  the same, the second after it"
    local i u1 u2 a b ub first=() later=() worst=() uworst=() ok=0 why=""
    if ! want sc_pinned_first_second && ! want sc_pinned_later_second; then
        skip sc_pinned_first_second "$name1" x
        skip sc_pinned_later_second "$name2" x
        return
    fi
    say "pinned target's work rate after syscatch --leaks attaches"
    for ((i = 0; i < RUNS && ok == 0; i++)); do
        target_start "$PIN_CPU" "$TMP/loop" getpid || die "cannot start the getpid target"
        if ! u1=$(work_on "$T_IN" "$T_OUT" 1000); then
            ok=1
        elif tracer_start "" err '^syscatch: attached' "$SC" --pid "$T_PID" --leaks --for 3s; then
            a=$(work_on "$T_IN" "$T_OUT" 1000) && b=$(work_on "$T_IN" "$T_OUT" 1000) || ok=1
            tracer_wait || why="syscatch exited with status $?: $(tail -1 "$TR_LOG")"
            u2=$(work_on "$T_IN" "$T_OUT" 1000) || ok=1
        else
            why="syscatch did not attach: $(tail -1 "$TR_LOG")"
            kill -INT "$TR_PROC" 2>/dev/null
            tracer_wait
        fi
        target_quit
        [[ -n $why ]] && ok=1
        ((ok == 0)) || break
        # shellcheck disable=SC2086 # space-separated numbers
        ub=$(calc "($(sum_of $u1) + $(sum_of $u2)) / 2")
        # shellcheck disable=SC2086
        first+=("$(calc "$(sum_of $a) / $ub")") later+=("$(calc "$(sum_of $b) / $ub")")
        # shellcheck disable=SC2086
        worst+=("$(calc "$(minof $a) * 10 / $ub")") uworst+=("$(calc "$(minof $u1 $u2) * 10 / $ub")")
    done
    if ((ok != 0)); then
        row sc_pinned_first_second "$name1" x failed "${why:-a round failed}"
        row sc_pinned_later_second "$name2" x failed "${why:-a round failed}"
        return
    fi
    row_values sc_pinned_first_second "$name1" x "" "target on CPU $PIN_CPU, syscatch --leaks --for 3s started \
free; share of the untraced rate before and after; worst 100 ms: $(fmt "$(minof "${worst[@]}")") (untraced: \
$(fmt "$(minof "${uworst[@]}")"))" "${first[@]}"
    row_values sc_pinned_later_second "$name2" x "" "1 to 2 s after the attached line; same runs" "${later[@]}"
}
