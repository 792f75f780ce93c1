#!/usr/bin/env python3
"""Packs the static syscatch binary into a wheel: python3 scripts/wheel.py BINARY VERSION MANPAGE OUTDIR

What maturin's `bindings = "bin"` makes, without needing maturin: a wheel is a zip holding the files to install
and a .dist-info directory (METADATA, WHEEL, RECORD). The binary goes in the .data/scripts/ directory, which pip
installs into the environment's bin/ (executable); the man page into share/man/man1/. One wheel serves glibc and
musl systems because the binary has no dynamic dependencies: its tags say so (manylinux2014 = manylinux_2_17 and
musllinux_1_1, x86_64); pip picks a wheel when any of its tags is supported. Timestamps are fixed, so the same
inputs give the same wheel bytes.
"""

import base64
import hashlib
import os
import sys
import zipfile

NAME = "syscatch"
PLATFORMS = ["manylinux_2_17_x86_64", "manylinux2014_x86_64", "musllinux_1_1_x86_64"]
SUMMARY = "Find who makes a process's memory grow outside the malloc heap (ptrace, full stacks, live process)"
EPOCH = (1980, 1, 1, 0, 0, 0)


def record_hash(data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "sha256=" + digest


def main():
    if len(sys.argv) != 5:
        sys.exit("usage: wheel.py BINARY VERSION MANPAGE OUTDIR")
    binary, version, manpage, outdir = sys.argv[1:]
    dist_info = "%s-%s.dist-info" % (NAME, version)
    data = "%s-%s.data" % (NAME, version)
    readme = open(os.path.join(os.path.dirname(__file__), "..", "README.md"), encoding="utf-8").read()
    metadata = (
        "Metadata-Version: 2.1\n"
        "Name: %s\nVersion: %s\nSummary: %s\n"
        "Requires-Python: >=3.7\n"
        "Classifier: Operating System :: POSIX :: Linux\n"
        "Description-Content-Type: text/markdown\n\n%s" % (NAME, version, SUMMARY, readme)
    )
    wheel = "Wheel-Version: 1.0\nGenerator: syscatch scripts/wheel.py\nRoot-Is-Purelib: false\n"
    wheel += "".join("Tag: py3-none-%s\n" % p for p in PLATFORMS)
    files = [
        ("%s/scripts/%s" % (data, NAME), open(binary, "rb").read(), 0o755),
        ("%s/data/share/man/man1/%s.1" % (data, NAME), open(manpage, "rb").read(), 0o644),
        ("%s/METADATA" % dist_info, metadata.encode(), 0o644),
        ("%s/WHEEL" % dist_info, wheel.encode(), 0o644),
    ]
    record = "".join("%s,%s,%d\n" % (path, record_hash(body), len(body)) for path, body, _ in files)
    record += "%s/RECORD,,\n" % dist_info
    files.append(("%s/RECORD" % dist_info, record.encode(), 0o644))

    out = os.path.join(outdir, "%s-%s-py3-none-%s.whl" % (NAME, version, ".".join(PLATFORMS)))
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for path, body, mode in files:
            info = zipfile.ZipInfo(path, date_time=EPOCH)
            info.external_attr = (0o100000 | mode) << 16  # a regular file with its permission bits
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, body)
    print(out)


if __name__ == "__main__":
    main()
