"""A Python target for syscatch's Python frames: maps memory through ctypes -> libc syscall(SYS_mmap) from a
plain function, a method, a list comprehension, a generator, a ctypes C callback and two threads at once. Before
each call it prints the frames it expects (from sys._getframe(): co_qualname from 3.11, else co_name; file;
f_lineno) as `expect SIZE JSON`. Handshake: prints `pid N`, waits for a line, runs, prints `done`, waits for a
line, exits. `bench` follows scripts/bench.sh's protocol instead: `go N` maps and unmaps a page N times from
30 nested Python calls and answers `ns T` (its own time), `quit` exits. `big` instead allocates 96 MiB with a bytearray in a method (glibc maps it with its own mmap()). `park` prints the frames of a method that then blocks reading stdin (for `syscatch
stack`); `park30` does it under 30 nested calls."""

import ctypes
import json
import os
import sys
import threading
import time

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
libc.syscall.argtypes = [ctypes.c_long] * 7
SYS_MMAP, SYS_MUNMAP = 9, 11
PAGE = 4096
lock = threading.Lock()


def name_of(code):
    return getattr(code, "co_qualname", code.co_name)


def frames_of(f):
    out = []
    while f is not None:
        out.append([name_of(f.f_code), f.f_code.co_filename, f.f_lineno])
        f = f.f_back
    return out


def say(line):
    with lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def mmap_here(size):
    # The expectation and the call share one line: frame 0's line is the call's.
    want = frames_of(sys._getframe()); addr = libc.syscall(SYS_MMAP, 0, size, 3, 0x22, -1, 0)  # noqa: E702
    say("expect %d %s" % (size, json.dumps(want)))
    libc.syscall(SYS_MUNMAP, addr, size, 0, 0, 0, 0)
    return addr


def plain():
    return mmap_here(1 * PAGE)


class Pool:
    def grow(self):
        return mmap_here(2 * PAGE)


def comprehension():
    return [mmap_here(3 * PAGE) for _ in range(1)]


def generator():
    yield mmap_here(4 * PAGE)


CMP = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
called = []


def compare(a, b):
    if not called:
        called.append(1)
        nested()
    return 0


def nested():
    return mmap_here(5 * PAGE)


def through_callback():
    arr = (ctypes.c_int * 2)(1, 2)
    libc.qsort(arr, 2, ctypes.sizeof(ctypes.c_int), CMP(compare))


def two_threads():
    barrier = threading.Barrier(2)

    def worker(pages):
        barrier.wait()
        mmap_here(pages * PAGE)

    ts = [threading.Thread(target=worker, args=(p,)) for p in (6, 7)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def deep(n, count):
    if n > 1:
        return deep(n - 1, count)
    for _ in range(count):
        addr = libc.syscall(SYS_MMAP, 0, PAGE, 3, 0x22, -1, 0)
        libc.syscall(SYS_MUNMAP, addr, PAGE, 0, 0, 0, 0)


class Model:
    def load(self):
        # glibc's malloc serves this with its own mmap(): a `libc:mmap` probe catches it.
        want = frames_of(sys._getframe()); self.weights = bytearray(96 << 20)  # noqa: E702
        say("expect %d %s" % (96 << 20, json.dumps(want)))


class Server:
    def park(self):
        # Blocks in read() under this frame until the test is done with it.
        say("expect 0 %s" % json.dumps(frames_of(sys._getframe()))); sys.stdin.readline()  # noqa: E702


def park_deep(n):
    if n > 1:
        return park_deep(n - 1)
    Server().park()


def bench():
    for line in sys.stdin:
        words = line.split()
        if words[:1] != ["go"]:
            break
        t0 = time.monotonic_ns()
        deep(30, int(words[1]))
        say("ns %d" % (time.monotonic_ns() - t0))


def main():
    say("pid %d" % os.getpid())
    if sys.argv[1:] == ["bench"]:
        return bench()
    sys.stdin.readline()
    if len(sys.argv) > 1 and sys.argv[1] == "big":
        Model().load()
    elif len(sys.argv) > 1 and sys.argv[1] == "park":
        Server().park()
    elif len(sys.argv) > 1 and sys.argv[1] == "park30":
        park_deep(30)
    else:
        plain()
        Pool().grow()
        comprehension()
        next(generator())
        through_callback()
        two_threads()
    say("done")
    sys.stdin.readline()


main()
