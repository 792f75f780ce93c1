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
        [fast_nonmatch]="--fast non-matching" [fast_match]="--fast matching, 64 KiB stack")
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

# The bpftrace program of the worker rows: a uprobe on libc's syscall() filtered on the number (mmap, munmap,
# mremap: the calls --leaks takes), the user stack of each, and a uretprobe capturing rax for the same calls.
bpftrace_program() { # pid libc-path
    cat <<BT
BEGIN { printf("bench: armed\n"); }
uprobe:$2:syscall /pid == $1 && (arg0 == 9 || arg0 == 11 || arg0 == 25)/ { @stacks[ustack] = count(); @pending[tid] = 1; }
uretprobe:$2:syscall /@pending[tid]/ { @ret[tid] = retval; @calls = count(); delete(@pending[tid]); }
END { clear(@stacks); clear(@ret); clear(@pending); }
BT
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
WORKER_TOOLS=(untraced leaks leaks_nofast mmap mmap_fast bpftrace)
bench_worker() {
    local t i j k r turn line libc ok=0 secs=$WORKER_SECS settle
    local -A CMD NAME SHARE RATE NOTE BAD
    settle=$(calc "$secs / 2")
    if ! want_prefix worker_; then
        for t in "${WORKER_TOOLS[@]}"; do skip "worker_$t" "worker" x; done
        return
    fi
    say "Python worker throughput: untraced, syscatch --leaks/--syscall mmap (each with --fast), bpftrace"
    local py
    py=$(command -v python3) || {
        for t in "${WORKER_TOOLS[@]}"; do row "worker_$t" "Python worker" x not_installed "no python3"; done
        return
    }
    gcc -O2 -Wall -fPIC -shared -pthread -o "$TMP/libworker.so" "$ROOT/scripts/bench/worker_lib.c" -ldl ||
        die "cannot compile scripts/bench/worker_lib.c"
    target_start "" "$py" "$ROOT/scripts/bench/worker.py" "$TMP/libworker.so" 3 || die "cannot start the worker"
    libc=$(grep -m1 -o '/[^ ]*/libc\.so\.6' "/proc/$T_PID/maps")
    NAME=([untraced]="worker untraced, steps/s" [leaks]="worker under syscatch --leaks (--fast by default)"
        [leaks_nofast]="worker under syscatch --leaks --no-fast" [mmap]="worker under syscatch --syscall mmap"
        [mmap_fast]="worker under syscatch --syscall mmap --fast"
        [bpftrace]="worker under bpftrace uprobe+uretprobe+ustack")
    CMD=([leaks]="$SC --pid $T_PID --leaks" [leaks_nofast]="$SC --pid $T_PID --leaks --no-fast"
        [mmap]="$SC --pid $T_PID --syscall mmap" [mmap_fast]="$SC --pid $T_PID --syscall mmap --fast")
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
                NOTE[$t]="mmap/munmap/mremap; last turn: $(grep -o '^@calls: [0-9]*' "$TR_LOG" | tail -1) calls"
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
