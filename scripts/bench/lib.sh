# Helpers of scripts/bench.sh, sourced by it: numbers, the table of rows, the target and tracer processes and
# their fifo protocol, and the printing of the table. They use bench.sh's globals (ROOT, TMP, ONLY, QUICK, RUNS...).

# ---------------------------------------------------------------- numbers
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
minof() { printf '%s\n' "$@" | sort -g | head -1; }
maxof() { printf '%s\n' "$@" | sort -g | tail -1; }
calc() { awk "BEGIN {printf \"%.3f\", $1}"; }
fmt() { [[ -z $1 ]] && echo "-" || awk "BEGIN {v=$1; printf (v >= 100 || v <= -100) ? \"%.0f\" : (v >= 10 || v <= -10) ? \"%.1f\" : \"%.2f\", v}"; }

# Rows, in table order. status: ok | failed | not_installed | pending | skipped (not in --only; not printed)
ROW_IDS=()
declare -A R_NAME R_UNIT R_MED R_MIN R_MAX R_N R_RUNS R_STATUS R_NOTE
row() { # id name unit status note [median min max n runs]
    ROW_IDS+=("$1")
    R_NAME[$1]=$2 R_UNIT[$1]=$3 R_STATUS[$1]=$4 R_NOTE[$1]=$5
    R_MED[$1]=${6:-} R_MIN[$1]=${7:-} R_MAX[$1]=${8:-} R_N[$1]=${9:-} R_RUNS[$1]=${10:-}
}
# Whether a row is to be measured (--only); a row that is not is recorded as skipped.
want() { [[ -z $ONLY || ",$ONLY," == *",$1,"* ]]; }
skip() { # id name unit
    row "$1" "$2" "$3" skipped "not in --only"
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
    round_on "$T_IN" "$T_OUT" "$1"
}
# The same on the target whose fifos are `in` and `out`.
round_on() { # in out n
    local line
    echo "go $3" >&"$1"
    read -r -t "$READ_TIMEOUT" -u "$2" line || return 1
    [[ $line == ns\ * ]] || return 1
    echo "${line#ns }"
}
target_quit() {
    # In a subshell: if the target has died, SIGPIPE ends the subshell, not the bench.
    (echo quit >&"$T_IN") 2>/dev/null
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
baseline() { # mode [n]
    local t i v=() n=${2:-$N_BASE}
    target_cmd "$1"
    target_start "" "${TCMD[@]}" || die "cannot start the $1 target"
    target_round $((n / 10)) >/dev/null
    for ((i = 0; i < RUNS; i++)); do
        t=$(target_round "$n") || die "the $1 target failed"
        v+=("$(calc "$t / $n")")
    done
    target_quit
    BASE[$1]=$(median "${v[@]}")
}

# Runs the target's loop under a tracer that is already armed; fills VALS with µs per hit per run.
# Expected hits (warm-up included) go to EXPECT.
measure_rounds() { # mode n
    local mode=$1 n=$2 t i warm=$(($2 / 10 > 10 ? $2 / 10 : 10))
    VALS=()
    (target_round "$warm") >/dev/null || return 1
    for ((i = 0; i < RUNS; i++)); do
        t=$(target_round "$n") || return 1
        VALS+=("$(calc "($t / $n - ${BASE[$mode]}) / 1000")")
    done
    EXPECT=$((warm + RUNS * n))
}

summary_field() { # file field -> number from syscatch's JSON summary line, or nothing
    grep '"type":"summary"' "$1" 2>/dev/null | grep -o "\"$2\":[-0-9.e+]*" | head -1 | cut -d: -f2
}

# ---------------------------------------------------------------- output
# The table (text, or one JSON document with --json), from the rows recorded above.
json_str() { local s=${1//\\/\\\\}; s=${s//\"/\\\"}; printf '"%s"' "$s"; }
json_num() { [[ -z $1 ]] && printf null || printf '%s' "$1"; }
print_table() {
    GIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
    git -C "$ROOT" diff --quiet HEAD 2>/dev/null || GIT="$GIT+dirty"
    if ((JSON)); then
        printf '{"bench":"syscatch","schema":1,"git":%s,"kernel":%s,"cpus":%s,"quick":%s,"runs":%s,"seconds":%s,"rows":[' \
            "$(json_str "$GIT")" "$(json_str "$(uname -r)")" "$(nproc)" "$([[ $QUICK == 1 ]] && echo true || echo false)" \
            "$RUNS" "$ELAPSED"
        sep=""
        for id in "${ROW_IDS[@]}"; do
            [[ ${R_STATUS[$id]} == skipped ]] && continue
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
        printf '%-30s %-52s %9s %9s %9s %-8s %7s  %s\n' id row median min max unit N note
        for id in "${ROW_IDS[@]}"; do
            [[ ${R_STATUS[$id]} == skipped ]] && continue
            if [[ ${R_STATUS[$id]} == ok ]]; then
                printf '%-30s %-52s %9s %9s %9s %-8s %7s  %s\n' "$id" "${R_NAME[$id]}" "$(fmt "${R_MED[$id]}")" \
                    "$(fmt "${R_MIN[$id]}")" "$(fmt "${R_MAX[$id]}")" "${R_UNIT[$id]}" "${R_N[$id]:--}" "${R_NOTE[$id]}"
            else
                printf '%-30s %-52s %9s %9s %9s %-8s %7s  %s\n' "$id" "${R_NAME[$id]}" "${R_STATUS[$id]}" - - \
                    "${R_UNIT[$id]}" - "${R_NOTE[$id]}"
            fi
        done
    fi
}
