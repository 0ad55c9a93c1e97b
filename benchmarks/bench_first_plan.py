"""The Scheduler's first plan on a cold numba cache against a warm one: seconds from handing
the recording to the helper process to the plan, and the kernels that made it.

Each case replays a recorded loop through ``malloc``/``free``/``step()`` on the host backend
(``uvm_sched._runtime_replay``) in a process of its own whose ``NUMBA_CACHE_DIR`` is a fresh
folder: empty (cold: a fresh install) or filled beforehand by ``compile_kernels()`` (warm:
after ``uvm-sched warmup``; the baseline). Note [The first plan on a cold kernel cache] in
``uvm_sched/_learn.py`` is the rule measured.

    python benchmarks/bench_first_plan.py [--cases resnet50,llm100k] [--repeat 1]

Writes ``benchmarks/results/first_plan.md`` and ``.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results"


def _trace(case: str):
    if case == "resnet50":
        from uvm_sched.trace import zoo

        return zoo.record("resnet50", iters=5)
    if case.startswith("llm"):
        from uvm_sched.trace._llm import llm_trace_for_events

        return llm_trace_for_events(int(case[3:].rstrip("k")) * 1000)
    raise SystemExit(f"unknown case {case!r}: resnet50 or llm<N>k (e.g. llm100k)")


def one(case: str) -> dict:
    """Replay ``case`` under a Scheduler (this process' NUMBA_CACHE_DIR is the cache)."""
    os.environ["UVM_SCHED_BACKEND"] = "host"
    from uvm_sched import _learn, native
    from uvm_sched._runtime_replay import replay_loop

    native._reset("host", force=True)
    trace = _trace(case)
    t0 = time.perf_counter()
    st = replay_loop(trace, timeout_s=1800, budget="60%", hw="h200-pcie5", warmup_iters=2,
                     watchdog_iters=0, tune=())
    wall = time.perf_counter() - t0
    worker = _learn.shared_worker("process")
    compiling = getattr(worker, "_compiling", None)  # (None: a worker without the rule)
    worker.close()
    return {"case": case, "events": int(len(trace)), "plan_time_s": st["plan_time_s"],
            "plan_kernels": st.get("plan_kernels"), "steps_before_plan": st["steps_before_plan"],
            "replay_wall_s": wall,
            "helper_still_compiling": compiling}


def run_case(case: str, cache: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="uvm-numba-") as d:
        env = dict(os.environ, NUMBA_CACHE_DIR=d)
        warm_s = None
        if cache == "warm":
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", "from uvm_sched._warmup import "
                            "compile_kernels; compile_kernels()"], env=env, check=True)
            warm_s = time.perf_counter() - t0
        r = subprocess.run([sys.executable, __file__, "--one", case], env=env, check=True,
                           stdout=subprocess.PIPE, text=True)
        res = json.loads(r.stdout.strip().splitlines()[-1])
    res.update(cache=cache, warmup_compile_s=warm_s)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="resnet50,llm100k")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.one)))
        return
    rows = []
    for case in args.cases.split(","):
        for cache in ("warm", "cold"):
            for _ in range(args.repeat):
                r = run_case(case, cache)
                rows.append(r)
                print(json.dumps(r), flush=True)
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_quality import provenance

    doc: dict = {"provenance": provenance(simulated=False), "rows": rows,
           "command": "python benchmarks/bench_first_plan.py " + " ".join(sys.argv[1:])}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "first_plan.json").write_text(json.dumps(doc, indent=1))
    lines = ["# The first plan on a cold kernel cache", "",
             f"`{doc['command'].strip()}` (host backend; wall seconds on this machine).", "",
             "| case | events | cache | plan s | kernels | steps before plan | "
             "warm-up compile s |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['events']:,} | {r['cache']} | "
                     f"{r['plan_time_s']:.1f} | {r['plan_kernels']} | "
                     f"{r['steps_before_plan']} | "
                     + (f"{r['warmup_compile_s']:.1f}" if r["warmup_compile_s"] else "-")
                     + " |")
    (args.out / "first_plan.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
