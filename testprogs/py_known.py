# Known stacks (`--fast`) in CPython: `f` and `g` both call `mapped`, which maps through mmap.mmap (libc's mmap),
# alternately, from one loop: the native stacks of their calls are the same, word for word, and only the Python
# frames tell them apart. Prints "pid N", waits for "go N", then for each of N rounds prints "mmap ADDR LEN f" and
# "mmap ADDR LEN g" (each unmapped right after), then "done"; exits 0 on its next line.
import ctypes
import mmap
import os
import sys


def mapped(n):
    m = mmap.mmap(-1, n)
    c = ctypes.c_char.from_buffer(m)
    addr = ctypes.addressof(c)
    del c
    m.close()
    return addr


def f(n):
    return mapped(n)


def g(n):
    return mapped(n)


print("pid", os.getpid(), flush=True)
rounds = int(sys.stdin.readline().split()[1])
for i in range(rounds):
    n = 4096 * (1 + i % 3)
    for tag, fn in (("f", f), ("g", g)):
        print(f"mmap {fn(n):#x} {n} {tag}", flush=True)
print("done", flush=True)
sys.stdin.readline()
