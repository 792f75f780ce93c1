# A python3 target for the CPython obmalloc rule. Prints "pid N"; on "small" it keeps 300k small objects
# (tuples and short strings: obmalloc arenas), on "big" one 48 MiB bytearray (the C allocator, not obmalloc);
# prints "done", waits for a line and exits 0.
import os
import sys

print("pid", os.getpid(), flush=True)
cmd = sys.stdin.readline().strip()
if cmd == "small":
    keep = [(i, str(i)) for i in range(300000)]
elif cmd == "big":
    keep = bytearray(48 << 20)
    keep[::4096] = b"\1" * len(keep[::4096])
print("done", flush=True)
sys.stdin.readline()
