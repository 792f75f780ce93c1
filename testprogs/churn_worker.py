# A Python worker whose memory churns while one pool only grows, for the growth score's tests.
# Usage: python3 churn_worker.py LIBUCX_LIKE_SO [THREADS] [late]
# Loading the library (at start, or with `late` on "hook after N") installs its munmap hook (testprogs/ucx_like_lib.c, inline mode): every unmap of the process
# queues a 4 KiB entry of a pool that is never given back, which grows by 64 KiB chunks through
# syscall(SYS_mmap): the leak. THREADS threads (default 2) run steps until the process exits, 100 a second each:
#   - numpy-like temporaries: eight anonymous maps of 256 KiB (mmap.mmap), every page written, then unmapped;
#   - pymalloc arena churn: about 1.5 MiB of small objects made and freed (whole arenas mapped and unmapped).
# Prints "pid N"; on "mark" prints "pool BYTES temps N" (the pool's size, and the temporaries mapped so far); on
# "hook after N" loads the library once N more temporaries were mapped, and prints "hooked"; on "wait N" prints
# "waited" once N more temporaries were mapped; on "pause" prints "paused" once every thread has stopped between
# two steps (nothing is mapped or unmapped until "go on"); "quit" or end of input exits.
import ctypes
import mmap
import os
import sys
import threading
import time

TEMP = 256 << 10

late = sys.argv[3:] == ["late"]
threads = int(sys.argv[2]) if len(sys.argv) > 2 else 2
temps = [0] * threads
parked = [False] * threads
pause = False
lib = None


def load():
    global lib
    lib = ctypes.CDLL(sys.argv[1])


def pool_bytes():
    return ctypes.c_size_t.in_dll(lib, "ucs_pool_bytes").value if lib else 0


if not late:
    load()


def temporary():
    m = mmap.mmap(-1, TEMP)
    m[::4096] = b"\1" * (TEMP // 4096)
    m.close()


def run(i):
    while True:
        while pause:
            parked[i] = True
            time.sleep(0.01)
        parked[i] = False
        for _ in range(8):
            temporary()
            temps[i] += 1
        keep = [(k, str(k)) for k in range(12000)]
        del keep
        time.sleep(0.01)


def park():
    global pause
    pause = True
    while not all(parked):
        time.sleep(0.01)


for i in range(threads):
    threading.Thread(target=run, args=(i,), daemon=True).start()
print("pid", os.getpid(), flush=True)
for line in sys.stdin:
    words = line.split()
    if words == ["mark"]:
        print("pool", pool_bytes(), "temps", sum(temps), flush=True)
    elif words == ["pause"]:
        park()
        print("paused", flush=True)
    elif words == ["go", "on"]:
        pause = False
    elif words[:1] == ["wait"]:
        until = sum(temps) + int(words[1])
        while sum(temps) < until:
            time.sleep(0.01)
        print("waited", flush=True)
    elif words[:2] == ["hook", "after"]:
        until = sum(temps) + int(words[2])
        while sum(temps) < until:
            time.sleep(0.01)
        # The hook rewrites munmap's first bytes: a thread inside munmap then (in the kernel) would return into
        # the new bytes and crash, with or without a tracer (tried: 3 of 40 runs untraced), so the threads wait
        # between two steps meanwhile (UCX hooks at start-up, before the threads it races with exist).
        park()
        load()
        pause = False
        print("hooked", flush=True)
    elif words == ["quit"]:
        break
