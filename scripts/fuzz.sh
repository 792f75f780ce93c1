#!/usr/bin/env bash
# Runs each fuzz target of fuzz/ for a bounded time: scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
#
# What works on this machine (one stable toolchain, no nightly):
#   cargo install cargo-fuzz          # from crates.io, once (v0.13)
#   RUSTC_BOOTSTRAP=1                 # cargo-fuzz passes nightly-only flags (-Zsanitizer=address, ...);
#                                     # this lets the stable compiler accept them
#   cargo fuzz run TARGET ... -- -max_total_time=N
# The fuzz crate is its own workspace (fuzz/Cargo.toml has [workspace]), so the main crate's cargo build and
# clippy never build it. Crashes land in fuzz/artifacts/TARGET/; copy each into fuzz/regressions/TARGET/, where
# `cargo test` (tests/it/fuzz_replay.rs) replays it with the committed corpus, and fix the parser.
#
# The committed corpus (fuzz/corpus/TARGET) stays small; this script works on a scratch copy, adding ELF seeds
# built from files on the machine (a small .so compiled here, the first pages of libc) for the module target.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
secs=${1:-60}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(maps status module breakpoints probe smaps unwind)
fi
command -v cargo-fuzz >/dev/null || { echo "fuzz.sh: cargo-fuzz missing: cargo install cargo-fuzz" >&2; exit 2; }
export RUSTC_BOOTSTRAP=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

seed_elf() {
    # A 16-byte header (mapping start, file offset) then the file, as targets::module expects.
    local out=$1 file=$2 offset=${3:-0}
    python3 - "$out" "$file" "$offset" <<'PY'
import struct, sys
out, path, off = sys.argv[1], sys.argv[2], int(sys.argv[3])
data = open(path, 'rb').read()
open(out, 'wb').write(struct.pack('<QQ', 0x7f0000000000, off) + data)
PY
}

for t in "${targets[@]}"; do
    mkdir -p "$work/$t"
    cp corpus/"$t"/* "$work/$t"/ 2>/dev/null || true
    cp regressions/"$t"/* "$work/$t"/ 2>/dev/null || true
    max_len=4096
    if [ "$t" = module ]; then
        printf 'long syscall(long n) { return n; }\nint x = 1;\n' > "$work/tiny.c"
        gcc -shared -nostdlib -O2 -fPIC -Wl,--build-id -o "$work/tiny.so" "$work/tiny.c"
        seed_elf "$work/$t/tiny_debug" "$work/tiny.so"
        head -c 65536 /lib/x86_64-linux-gnu/libc.so.6 > "$work/libc-head"
        seed_elf "$work/$t/libc_head" "$work/libc-head"
        max_len=70000
    fi
    echo "== fuzzing $t for ${secs}s"
    cargo fuzz run "$t" "$work/$t" -- -max_total_time="$secs" -max_len="$max_len" -print_final_stats=1 \
        2>&1 | grep -E '^(==|#[0-9]+ *DONE|stat::number_of_executed_units|stat::peak_rss|INFO: -max_total_time|SUMMARY|artifact_prefix|Test unit written)' || true
    if ls artifacts/"$t"/crash-* >/dev/null 2>&1; then
        echo "fuzz.sh: $t crashed: see fuzz/artifacts/$t/" >&2
        status=1
    fi
done
exit ${status:-0}
