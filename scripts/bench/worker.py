# A Python worker of the kind syscatch is for, for the bench's throughput rows (scripts/bench.sh, docs/bench.md).
# Usage: python3 worker.py LIBWORKER_SO [THREADS]
# THREADS threads (default 3) run steps until the process exits; each step
#   - maps numpy-like temporaries: four anonymous maps of 256 KiB (mmap.mmap: numpy is not needed, and its buffers
#     come from malloc, which after the first free serves this size from the heap, glibc's mmap threshold being
#     dynamic), writes every page of them, sums a slice, unmaps them;
#   - churns pymalloc arenas: about 1.5 MiB of small objects made and freed (whole arenas mapped and unmapped);
#   - asks its thread id through libc's syscall() (a call that no probe of mmap matches, as libraries do).
# Every unmap of the process goes through the munmap hook of libworker.so (scripts/bench/worker_lib.c: UCX's shape,
# which grows and trims a pool through syscall(SYS_mmap) and syscall(SYS_munmap)).
# Prints "pid N"; on each line "rate SECONDS" it counts the steps all threads finish in that time on its own
# monotonic clock and prints "rate STEPS_PER_S syscalls SYSCALL_CALLS_PER_S" (libc syscall() calls made by the
# library and the steps); "quit" or end of input exits.
import ctypes
import mmap
import os
import sys
import threading
import time

TEMP = 256 << 10
SYS_GETTID = 186

lib = ctypes.CDLL(sys.argv[1])
lib.worker_syscalls.restype = ctypes.c_ulong
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
threads = int(sys.argv[2]) if len(sys.argv) > 2 else 3
steps = [0] * threads
gettids = [0] * threads


def temporary():
    m = mmap.mmap(-1, TEMP)
    m[::4096] = b"\1" * (TEMP // 4096)
    total = sum(m[:4096])
    m.close()
    return total


def step():
    for _ in range(4):
        temporary()
    keep = [(i, str(i)) for i in range(12000)]
    del keep
    libc.syscall(SYS_GETTID)


def run(i):
    while True:
        step()
        steps[i] += 1
        gettids[i] += 1


for i in range(threads):
    threading.Thread(target=run, args=(i,), daemon=True).start()
print("pid", os.getpid(), flush=True)
for line in sys.stdin:
    words = line.split()
    if len(words) != 2 or words[0] != "rate":
        break
    secs = float(words[1])
    s0, c0, t0 = sum(steps), lib.worker_syscalls() + sum(gettids), time.monotonic()
    time.sleep(secs)
    s1, c1, t1 = sum(steps), lib.worker_syscalls() + sum(gettids), time.monotonic()
    print(f"rate {(s1 - s0) / (t1 - t0):.1f} syscalls {(c1 - c0) / (t1 - t0):.0f}", flush=True)
