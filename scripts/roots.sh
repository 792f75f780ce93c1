#!/usr/bin/env bash
# Root file systems of other Debian releases, for targets that run on another libc and interpreter than the
# host's (tests/it/roots.rs starts them with chroot and traces them from the host, as from a debug container):
# scripts/roots.sh [NAME...], NAME one of:
#   sid     Debian unstable: glibc 2.43, python3.14 (3.14.10) and python3.15 (3.15.2), libc6-dbg
#   trixie  Debian 13: glibc 2.41, python3 (3.13), libc6-dbg
# Each is built once with mmdebstrap into target/roots/NAME (about 20 s and 220 MB for sid) and kept while its
# package list is the same. Needs root (mmdebstrap's root mode) and the mmdebstrap package.
set -euo pipefail
cd "$(dirname "$0")/.."

declare -A packages=(
    [sid]="python3.14,python3.15,libc6-dbg"
    [trixie]="python3,libc6-dbg"
)

for name in "${@:-${!packages[@]}}"; do
    list=${packages[$name]:?"unknown root $name (known: ${!packages[*]})"}
    root=target/roots/$name
    if [ "$(cat "$root/.syscatch-packages" 2>/dev/null || true)" = "$list" ]; then
        continue
    fi
    echo "roots.sh: building $root ($list) with mmdebstrap" >&2
    start=$(date +%s)
    rm -rf "$root" "$root.tmp"
    mkdir -p target/roots
    # The archive's Release files may have expired on a mirror that is a snapshot: their dates are not checked.
    mmdebstrap --quiet --variant=apt --aptopt='Acquire::Check-Valid-Until "false"' --include="$list" \
        "$name" "$root.tmp"
    echo "$list" > "$root.tmp/.syscatch-packages"
    mv "$root.tmp" "$root"
    echo "roots.sh: $root built in $(($(date +%s) - start)) s" >&2
done
