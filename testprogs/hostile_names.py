# A Python worker whose names are hostile markup, for the HTML report's tests: the function that maps memory has
# the qualified name `<img src=x onerror=...>` and a file name with quotes and angle brackets, so that every
# frame of the leak (the UCX-shaped pool that grows on each unmap, testprogs/ucx_like_lib.c) carries them; a
# second function keeps a 64 KiB map every tenth step (a second stack that holds memory).
# Usage: python3 hostile_names.py LIBUCX_LIKE_SO. Prints "pid N"; on "wait N" prints "waited" once N more
# temporaries were mapped; "quit" or end of input exits.
import ctypes
import mmap
import os
import sys
import threading
import time

TEMP = 256 << 10
HOSTILE = "<img src=x onerror=window.__pwned=1>"
HOSTILE_FILE = "/tmp/\"quoted' <b>bold</b>.py"

ctypes.CDLL(sys.argv[1])
count = [0]


def temporary():
    m = mmap.mmap(-1, TEMP)
    m[::4096] = b"\1" * (TEMP // 4096)
    m.close()


# The frame that maps (and unmaps, which grows the pool) has the hostile names in its code object.
temporary.__code__ = temporary.__code__.replace(co_name=HOSTILE, co_qualname=HOSTILE, co_filename=HOSTILE_FILE)


kept = []


def keep():
    # A second leak candidate, on another Python line: a 64 KiB map kept every tenth step.
    m = mmap.mmap(-1, 64 << 10)
    m[::4096] = b"\1" * 16
    kept.append(m)


def run():
    while True:
        temporary()
        count[0] += 1
        if count[0] % 10 == 0:
            keep()
        time.sleep(0.005)


threading.Thread(target=run, daemon=True).start()
print("pid", os.getpid(), flush=True)
for line in sys.stdin:
    words = line.split()
    if words[:1] == ["wait"]:
        until = count[0] + int(words[1])
        while count[0] < until:
            time.sleep(0.01)
        print("waited", flush=True)
    elif words == ["quit"]:
        break
