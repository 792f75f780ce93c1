# Known stacks (`--fast`) in CPython: `f` and `g` both call `mapped`, which maps through mmap.mmap (libc's mmap),
# alternately, from one loop: the native stacks of their calls are the same, word for word, and only the Python
# frames tell them apart. Prints "pid N", waits for "go N", then for each of N rounds prints "mmap ADDR LEN f" and
# "mmap ADDR LEN g" (each unmapped right after), then "done"; exits 0 on its next line. With "threads", the rounds
# run in 8 threads one after the other (each joined before the next starts: a new thread's state may take the
# memory of the one before), and each line ends with the thread's tid. With "native LIB" (testprogs/known_stacks.c
# built as a shared library), the rounds run in a native thread of that library instead (its lines say "a" and "b"
# and end with the tid), called through ctypes with the GIL released.
import ctypes
import mmap
import os
import sys
import threading


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


def rounds(n, tid=""):
    for i in range(n):
        size = 4096 * (1 + i % 3)
        for tag, fn in (("f", f), ("g", g)):
            print(f"mmap {fn(size):#x} {size} {tag}{tid}", flush=True)


print("pid", os.getpid(), flush=True)
n = int(sys.stdin.readline().split()[1])
if "native" in sys.argv[1:]:
    lib = ctypes.CDLL(sys.argv[sys.argv.index("native") + 1])
    if lib.known_rounds_in_thread(n) != 0:
        sys.exit(3)
elif "threads" in sys.argv[1:]:
    for _ in range(8):
        t = threading.Thread(target=lambda: rounds(n, f" {threading.get_native_id()}"))
        t.start()
        t.join()
else:
    rounds(n)
print("done", flush=True)
sys.stdin.readline()
