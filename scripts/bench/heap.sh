# shellcheck shell=bash
# The heap rows (issue 39): what `--malloc` costs a malloc-heavy C loop (scripts/bench/mallocs.c, two threads of
# malloc/free of 16 to 527 bytes), as the share of its untraced steps/s it keeps, from its own clock: syscatch
# --malloc at the default rate (512 KiB), the same with no sample ever taken (--malloc-every 1000GiB: the stubs'
# own cost, also given in ns per call), bcc's memleak attached to the same process (a uprobe on every malloc and
# free; it compiles its BPF program against the running kernel's headers), bpftrace's uprobes on libc's malloc and
# free that only count (memleak's mechanism without its work: a bound on its cost, where bcc cannot compile) and
# heaptrack started with the program (LD_PRELOAD, a separate process of the same loop). Sourced by scripts/bench.sh.

MALLOC_TOOLS=(untraced malloc unsampled memleak uprobes heaptrack)

bench_mallocs() {
    local t j turn r ok=0 secs=$WORKER_SECS settle memleak threads=2 per_call=
    local -A NAME SHARE RATE NOTE BAD CMD
    settle=$(calc "$secs / 2")
    if ! want_prefix mallocs_; then
        for t in "${MALLOC_TOOLS[@]}"; do skip "mallocs_$t" "mallocs" x; done
        return
    fi
    say "malloc loop throughput: untraced, syscatch --malloc (sampled and not), bcc memleak, heaptrack"
    gcc -O2 -Wall -pthread -o "$TMP/mallocs" "$ROOT/scripts/bench/mallocs.c" || die "cannot compile scripts/bench/mallocs.c"
    target_start "" "$TMP/mallocs" "$threads" || die "cannot start the malloc loop"
    NAME=([untraced]="malloc loop (2 threads) untraced, steps/s" [malloc]="malloc loop under syscatch --malloc"
        [unsampled]="malloc loop under syscatch --malloc --malloc-every 1000GiB (the stubs alone)"
        [memleak]="malloc loop under bcc memleak -p" [heaptrack]="malloc loop started under heaptrack"
        [uprobes]="malloc loop under bpftrace uprobes on malloc and free, counting")
    CMD=([malloc]="$SC --pid $T_PID --malloc" [unsampled]="$SC --pid $T_PID --malloc --malloc-every 1000GiB")
    memleak=$(command -v memleak-bpfcc || command -v memleak || true)
    [[ -z $memleak ]] && BAD[memleak]="not_installed:bcc's memleak not installed (Debian package bpfcc-tools)"
    command -v heaptrack >/dev/null || BAD[heaptrack]="not_installed:heaptrack not installed (Debian package heaptrack)"
    local libc
    libc=$(grep -m1 -o '/[^ ]*/libc\.so\.6' "/proc/$T_PID/maps")
    if ! command -v bpftrace >/dev/null; then
        BAD[uprobes]="not_installed:bpftrace not installed (Debian package bpftrace)"
    else
        printf 'BEGIN { printf("bench: armed\\n"); }\nuprobe:%s:malloc /pid == %s/ { @malloc = count(); }\nuprobe:%s:free /pid == %s/ { @free = count(); }\n' \
            "$libc" "$T_PID" "$libc" "$T_PID" >"$TMP/uprobes.bt"
    fi
    (rate_on "$T_IN" "$T_OUT" "$secs") >/dev/null || ok=1 # warm-up
    for ((turn = 0; turn < RUNS && ok == 0; turn++)); do
        local -A got=()
        for ((j = 0; j < ${#MALLOC_TOOLS[@]}; j++)); do
            t=${MALLOC_TOOLS[(j + turn) % ${#MALLOC_TOOLS[@]}]}
            [[ -n ${BAD[$t]:-} ]] && continue
            case $t in
            untraced) r=$(rate_on "$T_IN" "$T_OUT" "$secs") || ok=1 ;;
            heaptrack)
                # Its own process of the loop, started under heaptrack; its untraced twin is this one.
                local h_in=$T_IN h_out=$T_OUT h_proc=$T_PROC h_pid=$T_PID
                # (heaptrack's own lines go to stdout too: only the loop's reach the fifo.)
                target_start "" sh -c 'heaptrack -o "$1" "$2" "$3" | grep --line-buffered -E "^(pid|rate) "' \
                    sh "$TMP/heaptrack" "$TMP/mallocs" "$threads" || {
                    BAD[$t]="failed:heaptrack did not start the loop"
                    T_IN=$h_in T_OUT=$h_out T_PROC=$h_proc T_PID=$h_pid
                    continue
                }
                rate_on "$T_IN" "$T_OUT" "$settle" >/dev/null && r=$(rate_on "$T_IN" "$T_OUT" "$secs") ||
                    BAD[$t]="failed:no rate from the loop under heaptrack"
                target_quit
                T_IN=$h_in T_OUT=$h_out T_PROC=$h_proc T_PID=$h_pid
                NOTE[$t]="a separate process of the same loop, LD_PRELOAD of libheaptrack_preload"
                ;;
            *)
                if [[ $t == memleak ]]; then
                    tracer_start "" out 'Attaching to pid' "$memleak" -p "$T_PID" 60
                elif [[ $t == uprobes ]]; then
                    tracer_start "" out '^bench: armed' bpftrace "$TMP/uprobes.bt"
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
                r=$(rate_on "$T_IN" "$T_OUT" "$secs") || ok=1
                kill -INT "$TR_PROC"
                tracer_wait || [[ $t == memleak || $t == uprobes ]] || BAD[$t]="failed:exited with status $?: $(tail -1 "$TR_LOG")"
                [[ $t != memleak && $t != uprobes ]] &&
                    NOTE[$t]="last turn: $(grep -o 'malloc sampled [0-9]* allocations' "$TR_LOG" | tail -1); \
waiting for a CPU: $(grep -o 'the target [0-9.]* ms' "$TR_LOG" | tail -1) (schedstat)"
                ;;
            esac
            ((ok == 0)) || break
            [[ -n ${BAD[$t]:-} ]] && continue
            got[$t]=${r% *}
            RATE[$t]+="${r% *} "
        done
        for t in "${MALLOC_TOOLS[@]}"; do
            [[ $t == untraced || -z ${got[$t]:-} || -z ${got[untraced]:-} ]] && continue
            SHARE[$t]+="$(calc "${got[$t]} / ${got[untraced]}") "
        done
        # The stubs' own cost per call (a step is a free and a malloc, on each of the threads).
        [[ -n ${got[unsampled]:-} && -n ${got[untraced]:-} ]] &&
            per_call+="$(calc "($threads / ${got[unsampled]} - $threads / ${got[untraced]}) * 1e9 / 2") "
    done
    target_quit
    [[ -n $per_call ]] && NOTE[unsampled]="ns added per call (malloc or free), by turn: ${per_call% }; ${NOTE[unsampled]:-}"
    for t in "${MALLOC_TOOLS[@]}"; do
        if [[ -n ${BAD[$t]:-} ]]; then
            row "mallocs_$t" "${NAME[$t]}" x "${BAD[$t]%%:*}" "${BAD[$t]#*:}"
        elif ((ok != 0)) || [[ -z ${RATE[$t]:-} ]]; then
            row "mallocs_$t" "${NAME[$t]}" x failed "a round failed"
        elif [[ $t == untraced ]]; then
            # shellcheck disable=SC2086 # space-separated numbers
            row_values mallocs_untraced "${NAME[$t]}" steps/s "" "" ${RATE[$t]}
        else
            # shellcheck disable=SC2086
            row_values "mallocs_$t" "${NAME[$t]}: share kept" x "" "${NOTE[$t]:-}" ${SHARE[$t]}
        fi
    done
}
