# A thread-pool server as seed case 001's (sync endpoints run by a pool of worker threads, each with its own glibc
# malloc arena): before the trace each worker allocates and frees 24 MB of 2,000-byte objects ("warm": its arena
# commits the pages with mprotect, then trims them with madvise, keeping the commitment), so during the trace
# the arenas grow back with no call at all. Prints "pid N"; on stdin "warm" runs the warm-up on every worker
# and prints "warm"; "keep" makes each worker keep 16 MB of 2,000-byte objects in its endpoint (the KEEP LINE) and
# prints "kept BYTES", "tids T1 T2 T3 T4" (the workers' thread ids) and "line N"; "spill" drops 15 of every 16 kept
# objects (each arena is then mostly free, its pages still resident between the objects left: seed case 001's
# arenas) and prints "spilled"; "quit" or the end of input stops it.
import concurrent.futures
import os
import sys
import threading

WORKERS = 4
POOL = concurrent.futures.ThreadPoolExecutor(WORKERS)
KEPT = []
BARRIER = threading.Barrier(WORKERS)


def warm():
    BARRIER.wait()  # one task per worker thread
    objs = [bytes(2000) for _ in range(12000)]
    del objs
    BARRIER.wait()


def endpoint():
    BARRIER.wait()
    kept = [bytes(2000) for _ in range(8000)]  # KEEP LINE
    BARRIER.wait()
    return threading.get_native_id(), kept


print("pid", os.getpid(), flush=True)
for line in sys.stdin:
    cmd = line.strip()
    if cmd == "warm":
        for f in [POOL.submit(warm) for _ in range(WORKERS)]:
            f.result()
        print("warm", flush=True)
    elif cmd == "keep":
        results = [f.result() for f in [POOL.submit(endpoint) for _ in range(WORKERS)]]
        tids = [tid for tid, _ in results]
        KEPT.extend(kept for _, kept in results)
        keep = next(i for i, l in enumerate(open(__file__), 1) if l.rstrip().endswith("# KEEP LINE"))
        print("kept", WORKERS * 8000 * 2000, flush=True)
        print("tids", *tids, flush=True)
        print("line", keep, flush=True)
    elif cmd == "spill":
        for kept in KEPT:
            kept[:] = kept[::16]  # in place: whoever else holds the list
        print("spilled", flush=True)
    else:
        break
POOL.shutdown()
