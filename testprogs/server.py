# A model server in miniature, started the way vLLM starts its workers: a parent that spawns worker processes
# with multiprocessing's "spawn" method and talks to them over pipes.
# Usage: python3 server.py LIBUCX_LIKE_SO
# Workers (each a thread running steps, 100 a second, every step eight 256 KiB anonymous temporaries (mmap.mmap),
# every page written, then unmapped):
#   leak:  loads the UCX-shaped library (testprogs/ucx_like_lib.c, UCXLIKE_HOOK=inline): every unmap queues an
#          entry of a pool that grows by 64 KiB chunks through syscall(SYS_mmap) and is never given back;
#   churn: the same temporaries without the library: a working set;
#   idle:  maps nothing.
# Every worker starts paused (no step until "go"). Prints "pid N", then "worker ROLE PID" for each, then "ready".
# On stdin:
#   "go": every worker runs;           "pause": every worker stops between two steps, then "paused";
#   "mark": "mark ROLE PID POOL TEMPS" per worker (the pool's bytes, the temporaries mapped so far), then "marked";
#   "wait N": "waited" once the churn worker mapped N more temporaries;
#   "spawn late": one more leak worker, started paused, "worker late PID"; "go late": it runs;
#   "quit" or end of input: the workers end, then the parent.
import ctypes
import mmap
import multiprocessing as mp
import os
import sys
import threading
import time

TEMP = 256 << 10


def worker(role, lib_path, conn):
    lib = None
    if role in ("leak", "late"):
        os.environ["UCXLIKE_HOOK"] = "inline"
        lib = ctypes.CDLL(lib_path)
    state = {"run": False, "parked": True, "temps": 0}

    def pool():
        return ctypes.c_size_t.in_dll(lib, "ucs_pool_bytes").value if lib else 0

    def steps():
        while True:
            if not state["run"]:
                state["parked"] = True
                time.sleep(0.005)
                continue
            state["parked"] = False
            if role != "idle":
                for _ in range(8):
                    m = mmap.mmap(-1, TEMP)
                    m[::4096] = b"\1" * (TEMP // 4096)
                    m.close()
                    state["temps"] += 1
            time.sleep(0.01)

    threading.Thread(target=steps, daemon=True).start()
    conn.send(("ready", os.getpid()))
    while True:
        try:
            cmd = conn.recv()
        except EOFError:
            return
        if cmd == "go":
            state["run"] = True
        elif cmd == "pause":
            state["run"] = False
            while not state["parked"]:
                time.sleep(0.005)
            conn.send("paused")
        elif cmd == "mark":
            conn.send((pool(), state["temps"]))
        elif cmd == "temps":
            conn.send(state["temps"])
        elif cmd == "quit":
            return


def start(role, lib_path):
    parent, child = mp.Pipe()
    p = mp.Process(target=worker, args=(role, lib_path, child), daemon=True)
    p.start()
    tag, pid = parent.recv()
    print("worker", role, pid, flush=True)
    return [role, pid, parent, p]


def main():
    mp.set_start_method("spawn")
    lib_path = sys.argv[1]
    print("pid", os.getpid(), flush=True)
    workers = [start(role, lib_path) for role in ("leak", "churn", "idle")]
    print("ready", flush=True)
    for line in sys.stdin:
        words = line.split()
        if words == ["go"]:
            for w in workers:
                w[2].send("go")
        elif words == ["go", "late"]:
            workers[-1][2].send("go")
        elif words == ["pause"]:
            for w in workers:
                w[2].send("pause")
            for w in workers:
                w[2].recv()
            print("paused", flush=True)
        elif words == ["mark"]:
            for w in workers:
                w[2].send("mark")
                pool, temps = w[2].recv()
                print("mark", w[0], w[1], pool, temps, flush=True)
            print("marked", flush=True)
        elif words[:1] == ["wait"]:
            churn = workers[1][2]
            churn.send("temps")
            until = churn.recv() + int(words[1])
            while True:
                churn.send("temps")
                if churn.recv() >= until:
                    break
                time.sleep(0.01)
            print("waited", flush=True)
        elif words == ["spawn", "late"]:
            workers.append(start("late", lib_path))
        elif words == ["quit"]:
            break
    for w in workers:
        try:
            w[2].send("quit")
        except OSError:
            pass
    for w in workers:
        w[3].join(5)


if __name__ == "__main__":
    main()
