# shellcheck shell=bash
# Several processes traced at once (issue 36), sourced by scripts/bench.sh: what each of four Python workers keeps of
# its throughput when the four are traced together by one `syscatch --pid A,B,C,D --leaks`, beside the share one
# keeps traced alone (the other three running untraced meanwhile); and syscatch's own peak RSS and CPU time for a
# trace of 1, 4 and 16 processes.

# Asks every worker of `ins`/`outs` for its rate over `secs` at once; prints their steps/s, space-separated.
rates_of() { # secs in-fds out-fds
    local secs=$1 fd line out=()
    local -a ins=($2) outs=($3)
    for fd in "${ins[@]}"; do echo "rate $secs" >&"$fd"; done
    for fd in "${outs[@]}"; do
        read -r -t "$READ_TIMEOUT" -u "$fd" line || return 1
        [[ $line =~ ^rate\ ([0-9.]+)\ syscalls ]] || return 1
        out+=("${BASH_REMATCH[1]}")
    done
    echo "${out[*]}"
}

# Four scripts/bench/worker.py processes (one thread each: four on two CPUs, as a host with more ranks than CPUs to
# spare), measured by their own clocks in RUNS turns; each turn measures three modes in a rotated order: untraced,
# the first worker traced alone, the four traced together. A traced mode is given WORKER_SECS / 2 to settle
# (attach, arm, the symbol prefetch), then measured for WORKER_SECS. A share is a worker's steps/s in a mode over its
# own untraced steps/s of the same turn.
bench_tree_workers() {
    local ids=(tree_untraced tree_one tree_four tree_four_sum tree_four_each) id want_any=0 turn j m r i ok=0 settle
    for id in "${ids[@]}"; do want "$id" && want_any=1; done
    if ((!want_any)); then
        for id in "${ids[@]}"; do skip "$id" "four workers" x; done
        return
    fi
    say "four Python workers: untraced, one traced alone, the four traced together"
    local py
    py=$(command -v python3) || {
        for id in "${ids[@]}"; do row "$id" "four workers" x not_installed "no python3"; done
        return
    }
    gcc -O2 -Wall -fPIC -shared -pthread -o "$TMP/libworker.so" "$ROOT/scripts/bench/worker_lib.c" -ldl ||
        die "cannot compile scripts/bench/worker_lib.c"
    local pids=() ins=() outs=()
    for ((i = 0; i < 4; i++)); do
        target_start "" "$py" "$ROOT/scripts/bench/worker.py" "$TMP/libworker.so" 1 || die "cannot start a worker"
        pids+=("$T_PID") ins+=("$T_IN") outs+=("$T_OUT")
    done
    local all
    all=$(
        IFS=,
        echo "${pids[*]}"
    )
    settle=$(calc "$WORKER_SECS / 2")
    local modes=(untraced one four) untraced_sum=() one=() four=() four_min=() four_sum=() bad=""
    # Each worker's steps/s summed over the turns, untraced and traced together: its share over the whole run.
    local run_u=(0 0 0 0) run_f=(0 0 0 0)
    rates_of "$WORKER_SECS" "${ins[*]}" "${outs[*]}" >/dev/null || ok=1 # warm-up
    for ((turn = 0; turn < RUNS && ok == 0; turn++)); do
        local -A got=()
        for ((j = 0; j < 3; j++)); do
            m=${modes[(j + turn) % 3]}
            if [[ $m != untraced ]]; then
                local target=${pids[0]}
                [[ $m == four ]] && target=$all
                tracer_start "" err '^syscatch: attached' "$SC" --pid "$target" --leaks || {
                    bad="did not arm: $(tail -1 "$TR_LOG")"
                    ok=1
                    break
                }
                rates_of "$settle" "${ins[*]}" "${outs[*]}" >/dev/null || ok=1
            fi
            r=$(rates_of "$WORKER_SECS" "${ins[*]}" "${outs[*]}") || ok=1
            if [[ $m != untraced ]]; then
                kill -INT "$TR_PROC"
                tracer_wait || bad="exited with status $?: $(tail -1 "$TR_LOG")"
                [[ $m == four && $(grep -c '^syscatch: attached' "$TR_LOG") != 4 ]] &&
                    bad="attached to $(grep -c '^syscatch: attached' "$TR_LOG") of 4 workers"
            fi
            ((ok == 0)) || break
            got[$m]=$r
        done
        ((ok == 0)) && [[ -z $bad ]] || break
        local -a u=(${got[untraced]}) o=(${got[one]}) f=(${got[four]})
        untraced_sum+=("$(calc "${u[0]} + ${u[1]} + ${u[2]} + ${u[3]}")")
        one+=("$(calc "${o[0]} / ${u[0]}")")
        local shares=() least=0
        four_sum+=("$(calc "(${f[0]} + ${f[1]} + ${f[2]} + ${f[3]}) / (${u[0]} + ${u[1]} + ${u[2]} + ${u[3]})")")
        for ((i = 0; i < 4; i++)); do
            run_u[i]=$(calc "${run_u[i]} + ${u[i]}") run_f[i]=$(calc "${run_f[i]} + ${f[i]}")
            shares+=("$(calc "${f[i]} / ${u[i]}")")
            awk "BEGIN {exit !(${shares[i]} < ${shares[least]})}" && least=$i
        done
        # Which worker kept least (w0..w3, w0 the one traced alone too), to tell a pattern from scheduling noise.
        four+=("$(median "${shares[@]}")") four_min+=("${shares[least]}(w$least)")
    done
    local fd
    for ((i = 0; i < 4; i++)); do
        (echo quit >&"${ins[i]}") 2>/dev/null
        fd=${ins[i]}
        exec {fd}>&-
        fd=${outs[i]}
        exec {fd}<&-
    done
    wait 2>/dev/null
    if ((ok != 0)) || [[ -n $bad || ${#one[@]} == 0 ]]; then
        for id in "${ids[@]}"; do row "$id" "four workers" x failed "${bad:-a round failed}"; done
        return
    fi
    row_values tree_untraced "four workers untraced, steps/s of the four" steps/s "" "one thread each, 2 CPUs" \
        "${untraced_sum[@]}"
    row_values tree_one "  one traced alone (--leaks), share it keeps" x "" "the other three untraced" "${one[@]}"
    row_values tree_four "  the four traced together (--pid A,B,C,D --leaks), share each keeps (goal >= 0.90)" x "" \
        "median of the four per turn; the least kept per turn: ${four_min[*]}" "${four[@]}"
    row_values tree_four_sum "  the four traced together: their summed steps/s over the untraced sum" x "" \
        "per turn" "${four_sum[@]}"
    # A worker's share over every turn: the window-to-window swings of four workers on two CPUs average out.
    local each=() least_run
    for ((i = 0; i < 4; i++)); do each+=("$(calc "${run_f[i]} / ${run_u[i]}")"); done
    least_run=$(printf '%s\n' "${each[@]}" | sort -g | head -1)
    row_values tree_four_each "  the four traced together: the least any worker keeps over the whole run (goal >= 0.90)" \
        x "" "each worker's summed steps/s traced over untraced, w0..w3: ${each[*]}" "$least_run"
}

# syscatch --leaks --for 2s on N idle Python processes: its peak RSS (GNU time's maximum resident set size) and its
# CPU time (user + system), median of RUNS traces each.
bench_tree_cost() {
    local n id py i j line pids t
    py=$(command -v python3) || return
    for n in 1 4 16; do
        id=tree_rss_$n
        if ! want "$id" && ! want "tree_cpu_$n"; then
            skip "$id" "syscatch's RSS, $n processes" MiB
            skip "tree_cpu_$n" "syscatch's CPU, $n processes" s
            continue
        fi
        say "syscatch --leaks --for 2s on $n idle Python processes"
        local started=() ins=() rss=() cpu=() bad=""
        pids=""
        for ((i = 0; i < n; i++)); do
            target_start "" "$py" -c 'import os, sys; print("pid", os.getpid(), flush=True); sys.stdin.read()' ||
                die "cannot start an idle Python"
            pids+="${pids:+,}$T_PID" ins+=("$T_IN")
            started+=("$T_OUT")
        done
        for ((j = 0; j < RUNS; j++)); do
            /usr/bin/time -f '%M %U %S' -o "$TMP/tree.time" "$SC" --pid "$pids" --leaks --for 2s \
                >"$TMP/tree.out" 2>"$TMP/tree.err" || bad="exit status $?: $(tail -1 "$TMP/tree.err")"
            t=$(tail -1 "$TMP/tree.time")
            [[ $(grep -c '^syscatch: attached' "$TMP/tree.err") == "$n" ]] ||
                bad="attached to $(grep -c '^syscatch: attached' "$TMP/tree.err") of $n"
            read -r line u s <<<"$t"
            rss+=("$(calc "$line / 1024")") cpu+=("$(calc "$u + $s")")
        done
        local fd
        for ((i = 0; i < n; i++)); do
            fd=${ins[i]}
            exec {fd}>&-
            fd=${started[i]}
            exec {fd}<&-
        done
        wait 2>/dev/null
        if [[ -n $bad ]]; then
            row "$id" "syscatch's peak RSS, --leaks on $n processes" MiB failed "$bad"
            row "tree_cpu_$n" "  its CPU time" s failed "$bad"
            continue
        fi
        row_values "$id" "syscatch's peak RSS, --leaks --for 2s on $n idle Pythons" MiB "" \
            "per process: $(calc "$(median "${rss[@]}") / $n") MiB" "${rss[@]}"
        row_values "tree_cpu_$n" "  its CPU time (user + system)" s "" "" "${cpu[@]}"
    done
}

# `syscatch watch` (issue 37): what a round of /proc reads costs, on ten Python processes that each compute about
# 2 ms in every 100 ms (so the ratio below has something to compare with). `watch --every 1s --for 10s` is run
# RUNS times under /usr/bin/time; a round's CPU time is its user + system time over the rounds it took. Rows: the
# CPU time of a round, the share of one CPU at the default --every 5s (goal: under 1%), and watch's CPU time over
# the watched processes' own over the same time (from their /proc/PID/stat) at --every 5s.
bench_watch_cost() {
    local ids=(watch_round watch_share watch_vs_watched) id want_any=0 py i j t u s secs=10 ticks
    for id in "${ids[@]}"; do want "$id" && want_any=1; done
    if ((!want_any)); then
        for id in "${ids[@]}"; do skip "$id" "watch's cost" x; done
        return
    fi
    say "syscatch watch on 10 Python processes: the CPU time of a round"
    py=$(command -v python3) || return
    ticks=$(getconf CLK_TCK)
    local pids="" ins=() outs=() round=() share=() ratio=() bad=""
    local work='import os, sys, time, select
print("pid", os.getpid(), flush=True)
while not select.select([sys.stdin], [], [], 0.098)[0]:
    t = time.thread_time()
    while time.thread_time() - t < 0.002:
        pass'
    for ((i = 0; i < 10; i++)); do
        target_start "" "$py" -c "$work" || die "cannot start a Python process"
        pids+="${pids:+,}$T_PID" ins+=("$T_IN") outs+=("$T_OUT")
    done
    # The watched processes' CPU time, in clock ticks.
    cpu_of() { local p sum=0; for p in ${pids//,/ }; do sum=$((sum + $(awk '{ print $14 + $15 }' "/proc/$p/stat"))); done; echo "$sum"; }
    for ((j = 0; j < RUNS; j++)); do
        local before after rounds
        before=$(cpu_of)
        /usr/bin/time -f '%U %S' -o "$TMP/watch.time" "$SC" watch --pid "$pids" --every 1s --for "${secs}s" --json \
            >"$TMP/watch.out" 2>"$TMP/watch.err" || bad="exit status $?: $(tail -1 "$TMP/watch.err")"
        after=$(cpu_of)
        read -r u s <<<"$(tail -1 "$TMP/watch.time")"
        rounds=$(grep -c '"type":"watch"' "$TMP/watch.out")
        rounds=$((rounds / 10))
        ((rounds > 0)) || { bad="no round: $(tail -1 "$TMP/watch.err")"; break; }
        t=$(calc "($u + $s) / $rounds")
        round+=("$(calc "$t * 1000")")
        share+=("$(calc "$t / 5 * 100")")
        ratio+=("$(calc "$t / 5 / (($after - $before) / $ticks / $secs)")")
    done
    local fd
    for ((i = 0; i < 10; i++)); do
        fd=${ins[i]}
        echo >&"$fd"
        exec {fd}>&-
        fd=${outs[i]}
        exec {fd}<&-
    done
    wait 2>/dev/null
    if [[ -n $bad ]]; then
        for id in "${ids[@]}"; do row "$id" "watch's cost" x failed "$bad"; done
        return
    fi
    row_values watch_round "watch: CPU time of a round, 10 processes" ms "" "smaps_rollup and status of each; the whole smaps every 12th round" "${round[@]}"
    row_values watch_share "  at --every 5s: share of one CPU (goal < 1)" % "" "" "${share[@]}"
    row_values watch_vs_watched "  at --every 5s: over the watched processes' own CPU time" x "" \
        "each process computes 2 ms in 100 ms" "${ratio[@]}"
}
