# A python3 target whose "extension" (libc's malloc through ctypes) leaks: leak_blocks() keeps 3000 blocks of
# 8 KiB, churn_blocks() frees every block it allocates. Prints "pid N", waits for "go", works, prints
# "live leak_blocks BYTES LINE" (the line of its malloc call) and "done", waits for a line, frees and exits 0.
import ctypes
import os
import sys

libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
BLOCK = 8192
kept = []


def leak_blocks(n):
    for _ in range(n):
        kept.append(libc.malloc(BLOCK))  # LEAK LINE


def churn_blocks(n):
    for _ in range(n):
        libc.free(libc.malloc(BLOCK))


print("pid", os.getpid(), flush=True)
sys.stdin.readline()
leak_blocks(3000)
churn_blocks(3000)
line = next(i for i, l in enumerate(open(__file__), 1) if l.rstrip().endswith("# LEAK LINE"))
print("live leak_blocks %d %d" % (len(kept) * BLOCK, line), flush=True)
print("done", flush=True)
sys.stdin.readline()
for p in kept:
    libc.free(p)
