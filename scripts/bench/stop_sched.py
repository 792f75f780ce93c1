#!/usr/bin/env python3
"""Where the time of a ptrace stop goes, from a tracefs trace (issue 26).

Usage: stop_sched.py TRACE TARGET_TID TRACER_TID[,TID...]

TRACE is the text of a tracefs buffer with sched_switch, sched_waking and sched_migrate_task recorded while
TARGET_TID hit breakpoints traced by TRACER_TID (scripts/bench/stop_sched.sh records one). For each stop (the
target switched out in state `t`, traced) it splits the time until the target runs again into: the tracer
waiting for a CPU after the stop woke it, the tracer's own work until it wakes the target (CONT), and the target
waiting for a CPU after that; and says who held the CPU meanwhile and what every CPU ran during the slow stops.
"""
import re
import sys
from collections import Counter

LINE = re.compile(r"^\s*(.+?)-(\d+)\s+\[(\d+)\]\s+\S+\s+([\d.]+): (\w+): (.*)$")


def fields(text):
    return dict(re.findall(r"(\w+)=(\S+)", text))


def read(path):
    for line in open(path):
        m = LINE.match(line)
        if m:
            yield float(m.group(4)) * 1e6, int(m.group(3)), int(m.group(2)), m.group(5), fields(m.group(6))


def stops(events, target, tracers):
    """A stop starts when the target, about to stop, wakes the tracer (sched_waking in the target's context: the
    tracer may be on another CPU before the target's own switch-out is logged); then the tracer gets a CPU, wakes
    the target (CONT), and the target gets a CPU."""
    out, cur = [], None
    for t, cpu, pid, name, d in events:
        if name == "sched_waking":
            woken = int(d["pid"])
            if pid == target and woken in tracers:
                if cur and "idle_wake" in cur:
                    # The target ran again on a CPU that idled: that CPU's switch from idle is often not logged;
                    # the idle task's wakeup of the target is the moment it got the CPU.
                    cur.update(run=cur["idle_wake"], run_cpu=cur["idle_cpu"], before_target="idle")
                    out.append(cur)
                cur = {"stop": t, "cpu": cpu, "mig": []}
            elif cur and woken == target and pid in tracers and "tracer_in" in cur:
                cur.setdefault("woken", t)
        elif name == "sched_switch" and cur:
            nxt = int(d["next_pid"])
            if nxt in tracers and "tracer_in" not in cur:
                cur.update(tracer_in=t, tracer_cpu=cpu, before_tracer=d["prev_comm"])
            elif nxt == target and "woken" in cur:
                cur.update(run=t, run_cpu=cpu, before_target=d["prev_comm"])
                out.append(cur)
                cur = None
        elif name == "sched_wakeup" and cur and pid == 0 and int(d["pid"]) == target and "woken" in cur:
            cur.update(idle_wake=t, idle_cpu=cpu)
        elif name == "sched_migrate_task" and cur:
            cur["mig"].append(f'{d["comm"]} {d["orig_cpu"]}->{d["dest_cpu"]}')
    return out


def timeline(events):
    """What each CPU ran: cpu -> [(start, end, comm/pid)]."""
    runs, current = {}, {}
    for t, cpu, _, name, d in events:
        if name != "sched_switch":
            continue
        if cpu in current:
            runs.setdefault(cpu, []).append((current[cpu][0], t, current[cpu][1]))
        current[cpu] = (t, d["next_comm"] + "/" + d["next_pid"])
    return runs


def ran(runs, cpu, a, b):
    got = Counter()
    for s, e, who in runs.get(cpu, []):
        if min(e, b) > max(s, a):
            got[who] += min(e, b) - max(s, a)
    return got


def spread(v):
    v = sorted(v)
    n = len(v)
    return f"median {v[n // 2]:.0f}, p90 {v[int(n * 0.9)]:.0f}, p99 {v[int(n * 0.99)]:.0f}, max {v[-1]:.0f}, mean {sum(v) / n:.1f} us"


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    events = list(read(sys.argv[1]))
    target, tracers = int(sys.argv[2]), {int(x) for x in sys.argv[3].split(",")}
    ss = stops(events, target, tracers)
    if not ss:
        sys.exit("no stop of the target found in the trace")
    print(f"{len(ss)} stops")
    print("  stop -> tracer on a CPU:       ", spread([s["tracer_in"] - s["stop"] for s in ss]))
    print("  tracer's work until CONT:      ", spread([s["woken"] - s["tracer_in"] for s in ss]))
    print("  CONT -> target on a CPU:       ", spread([s["run"] - s["woken"] for s in ss]))
    print("  the whole stop:                ", spread([s["run"] - s["stop"] for s in ss]))
    same = sum(s["tracer_cpu"] == s["cpu"] for s in ss)
    back = sum(s["run_cpu"] == s["cpu"] for s in ss)
    print(f"  tracer ran on the target's CPU in {same}, the target resumed on its own CPU in {back}")
    slow = [s for s in ss if s["run"] - s["stop"] > 30]
    total = sum(s["run"] - s["stop"] for s in ss)
    print(f"{len(slow)} slow stops (> 30 us): {sum(s['run'] - s['stop'] for s in slow) / total:.0%} of all stopped time")
    if not slow:
        return
    n = len(slow)
    print(f"  of a slow stop, on average: tracer waits {sum(s['tracer_in'] - s['stop'] for s in slow) / n:.0f} us, "
          f"works {sum(s['woken'] - s['tracer_in'] for s in slow) / n:.0f} us, "
          f"target waits {sum(s['run'] - s['woken'] for s in slow) / n:.0f} us")
    print("  on the CPU before the tracer:", Counter(s["before_tracer"] for s in slow).most_common(4))
    print("  on the CPU before the target:", Counter(s["before_target"] for s in slow).most_common(4))
    print("  migrations meanwhile:", Counter(m for s in slow for m in s["mig"]).most_common(4))
    runs = timeline(events)
    for s in sorted(slow, key=lambda s: s["stop"] - s["run"])[:8]:
        cpus = "; ".join(
            f"cpu{c}: " + (", ".join(f"{w} {v:.0f}" for w, v in ran(runs, c, s["stop"], s["run"]).most_common(3)) or "no switch")
            for c in sorted(runs))
        print(f"  {s['run'] - s['stop']:.0f} us (tracer waited {s['tracer_in'] - s['stop']:.0f}, target "
              f"{s['run'] - s['woken']:.0f}; target on cpu{s['cpu']}, tracer on cpu{s['tracer_cpu']}): {cpus}")


main()
