#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls exactly this): scripts/test.sh [cargo test arguments]
#
# 1. Installs what the tests need and a fresh machine lacks (Debian/Ubuntu, as root): gcc and binutils (the test
#    programs, dist.sh's checks; musl-tools for musl targets), gdb and elfutils (stacks compared with gdb's and eu-stack's), libjemalloc2,
#    libtcmalloc-minimal4 and libmimalloc2.0 (the allocators named), libc6-dbg at exactly libc6's version (its build-id must match the mapped libc),
#    python3 with venv (Python targets, the wheel test), golang-go once a test runs `go tool pprof`, chromium and
#    chromium-driver once a test opens a page in the browser (the HTML report's), prometheus once a test scrapes
#    syscatch with it, and Python
#    packages listed in tests/requirements.txt, if that exists, into a venv of its own (target/test-venv) put
#    first on the PATH, mmdebstrap and with it the root file systems of other Debian releases (scripts/roots.sh:
#    targets on glibc 2.43 and CPython 3.14/3.15, built once into target/roots). Without root it prints the
#    command to run instead and stops.
# 2. Checks formatting and clippy, builds the release artifacts (scripts/dist.sh: the static binary and the
#    wheel that tests/it/dist.rs runs), then runs `cargo test`. Tracing needs root or CAP_SYS_PTRACE.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "test.sh: $*" >&2; }

is_root() { [ "$(id -u)" = 0 ]; }

missing=()
if command -v dpkg-query >/dev/null; then
    installed() { [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed" ]; }
    for pkg in gcc libc6-dev binutils gdb elfutils libjemalloc2 libtcmalloc-minimal4 libmimalloc2.0 python3 \
        python3-venv util-linux musl-tools; do
        installed "$pkg" || missing+=("$pkg")
    done
    libc_version=$(dpkg-query -W -f='${Version}' libc6)
    [ "$(dpkg-query -W -f='${Version}' libc6-dbg 2>/dev/null || true)" = "$libc_version" ] ||
        missing+=("libc6-dbg=$libc_version")
    if grep -rqsE 'go tool pprof|Command::new\("go"\)' tests; then
        installed golang-go || missing+=(golang-go)
    fi
    if [ -x scripts/roots.sh ]; then
        installed mmdebstrap || missing+=(mmdebstrap)
    fi
    if grep -rqs 'optional_tool("prometheus"' tests; then
        installed prometheus || missing+=(prometheus)
    fi
    if grep -rqs 'optional_tool("chromium"' tests; then
        for pkg in chromium chromium-driver; do
            installed "$pkg" || missing+=("$pkg")
        done
    fi
    if [ ${#missing[@]} -gt 0 ]; then
        install="apt-get update && apt-get install -y --no-install-recommends ${missing[*]}"
        if ! is_root; then
            say "missing packages; install them as root, then run this again:"
            echo "  sudo sh -c '$install'" >&2
            exit 1
        fi
        say "installing ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    fi
else
    say "not a Debian-like system: make sure gcc, binutils, gdb, elfutils (eu-stack), jemalloc, glibc debug info" \
        "and python3 with venv are installed"
fi

# The suite traces real processes.
cap_eff=$(sed -n 's/^CapEff:\s*//p' /proc/self/status)
if ! is_root && [ $(((16#$cap_eff >> 19) & 1)) = 0 ]; then
    say "the tests trace real processes with ptrace: run as root (or with CAP_SYS_PTRACE):"
    echo "  sudo env PATH=\"\$PATH\" $0 $*" >&2
    exit 1
fi

for component in rustfmt clippy; do
    if ! cargo "${component/rustfmt/fmt}" --version >/dev/null 2>&1; then
        command -v rustup >/dev/null || { say "cargo $component is missing (install the $component component)"; exit 1; }
        rustup component add "$component"
    fi
done

if [ -f tests/requirements.txt ]; then
    venv=target/test-venv
    [ -x "$venv/bin/python3" ] || python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r tests/requirements.txt
    export PATH="$PWD/$venv/bin:$PATH"
fi

cargo fmt --all -- --check
cargo clippy --all-targets --quiet -- -D warnings
scripts/dist.sh
scripts/roots.sh
cargo test --quiet "$@" 2>&1
