"""A Python target for `syscatch stack` benches: a server-like process with N threads (default 33, plus the main
thread: 34, as in issue 13's uvicorn server) parked in different blocking calls: socket accept, select, a
condition wait, a queue get, a lock, a sleep, a pipe read, each under a few nested Python calls. Handshake:
prints `pid N` once every thread is parked (each says so before it blocks), then waits for a line on stdin and
exits (os._exit: the parked threads are not joined)."""

import os
import queue
import select
import socket
import sys
import threading
import time

N = int(sys.argv[1]) if len(sys.argv) > 1 else 33
ready = threading.Semaphore(0)
held = threading.Lock()
held.acquire()
never = threading.Event()
q = queue.Queue()
pipe_r, _pipe_w = os.pipe()
server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
server.bind(("127.0.0.1", 0))
server.listen()


def park_accept():
    ready.release()
    server.accept()


def park_select():
    ready.release()
    select.select([pipe_r], [], [])


def park_event():
    ready.release()
    never.wait()


def park_queue():
    ready.release()
    q.get()


def park_lock():
    ready.release()
    held.acquire()


def park_sleep():
    ready.release()
    time.sleep(3600)


def park_read():
    ready.release()
    os.read(pipe_r, 1)


PARKS = [park_accept, park_select, park_event, park_queue, park_lock, park_sleep, park_read]


class Worker:
    def __init__(self, i):
        self.i = i

    def run(self):
        return self.nest(self.i % 4)

    def nest(self, depth):
        if depth:
            return self.nest(depth - 1)
        return PARKS[self.i % len(PARKS)]()


for i in range(N):
    threading.Thread(target=Worker(i).run, name="worker-%d" % i, daemon=True).start()
for _ in range(N):
    ready.acquire()
# A thread says it is parked just before it blocks: wait until each is asleep in the kernel, not on its way there.
me = os.getpid()
for _ in range(10000):
    states = []
    for t in os.listdir("/proc/%d/task" % me):
        if int(t) == threading.get_native_id():
            continue
        with open("/proc/%d/task/%s/stat" % (me, t)) as f:
            states.append(f.read().rsplit(")", 1)[1].split()[0])
    if len(states) == N and all(s == "S" for s in states):
        break
    time.sleep(0.001)
print("pid %d" % me, flush=True)
sys.stdin.readline()
os._exit(0)
