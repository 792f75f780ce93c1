#!/usr/bin/env bash
# Builds what a release ships, into target/dist/, and checks it: scripts/dist.sh
#
#   syscatch                     one static binary: no PT_INTERP, no DT_NEEDED (glibc linked in with crt-static,
#                                capstone's C code too), stripped; runs on any x86_64 Linux, glibc or musl
#   man/*.1, completions/        generated from the clap definitions (syscatch manpage, syscatch completions)
#   syscatch-V-x86_64-linux.tar.gz   the binary, man pages, completions and README
#   syscatch-V-py3-none-....whl  the binary as a wheel's script, tagged manylinux2014 and musllinux_1_1
#                                (scripts/wheel.py): `pip install` puts `syscatch` on the PATH
#
# There is no musl target here, so the binary is glibc static. An explicit --target keeps RUSTFLAGS off build
# scripts and proc-macro crates (a proc-macro cannot be linked statically). The build has a target dir of its
# own (target/dist-build): cargo test can run this script while it holds target/'s lock, and the static
# objects never evict the ordinary build's.
#
# A static glibc cannot load NSS modules (getpwnam, getaddrinfo, ...) from another system's libc: the check
# below fails if anything we link calls them. SYSCATCH_COMMIT names the commit when building from a tarball.
set -euo pipefail
cd "$(dirname "$0")/.."

target=x86_64-unknown-linux-gnu
build_dir=target/dist-build
dist=target/dist
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)

# -W linker-messages: linker warnings (glibc's "statically linked applications requires at runtime ...") show.
RUSTFLAGS="-C target-feature=+crt-static -W linker-messages" \
    cargo build --release --locked --quiet --target "$target" --target-dir "$build_dir"
built=$build_dir/$target/release/syscatch

fail() {
    echo "dist.sh: $*" >&2
    exit 1
}

headers=$(readelf -lW "$built") || fail "readelf cannot read $built (apt-get install binutils)"
if grep -q INTERP <<<"$headers"; then fail "$built has a PT_INTERP: it would need a dynamic loader"; fi
needed=$(readelf -dW "$built" | grep NEEDED || true)
[ -z "$needed" ] || fail "$built needs shared libraries: $needed"
# The entry points that make a static glibc load NSS modules (or iconv's gconv modules) with dlopen, which
# needs the host's own glibc. std references getaddrinfo and getpwuid_r, so glibc's link warnings are noted in
# the binary, but the linker drops them as long as nothing we run calls them; their NSS back ends stay behind as
# dead code. Fail if one of the functions themselves is linked in.
nss_api='getpw(nam|uid|ent)(_r)?|getgr(nam|gid|ent)(_r)?|getgrouplist|initgroups|getspnam(_r)?|getaddrinfo'
nss_api+='|gethostby(name|name2|addr)(_r)?|getservby(name|port)(_r)?|getprotobyname(_r)?|getlogin(_r)?|iconv_open'
nss=$(nm "$built" | grep -E " [TW] ($nss_api)\$" || true)
[ -z "$nss" ] || fail "$built links NSS or iconv functions that a static glibc cannot serve: $nss"

rm -rf "$dist"
mkdir -p "$dist/man" "$dist/completions"
strip -o "$dist/syscatch" "$built"
bin=$dist/syscatch
"$bin" --version | grep -q "^syscatch $version (commit .*static" || fail "$bin --version: $("$bin" --version)"
"$bin" manpage "$dist/man"
"$bin" completions bash >"$dist/completions/syscatch.bash"
"$bin" completions zsh >"$dist/completions/_syscatch"
"$bin" completions fish >"$dist/completions/syscatch.fish"

tar -czf "$dist/syscatch-$version-x86_64-linux.tar.gz" -C "$dist" syscatch man completions \
    --transform "s,^,syscatch-$version/," -C "$PWD" README.md
python3 scripts/wheel.py "$bin" "$version" "$dist/man/syscatch.1" "$dist"

echo "dist.sh: $("$bin" --version), $(stat -c %s "$bin") bytes, static; in $dist:" >&2
ls -1 "$dist" >&2
