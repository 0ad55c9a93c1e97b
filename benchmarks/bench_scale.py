"""Scale: LLM-shaped traces from 10k to 1M allocator events, timed end to end.

    python benchmarks/bench_scale.py [--sizes 10000,30000,100000,300000,1000000]
                                     [--reference-max 1000000] [--sim-reference-max 1000000]
                                     [--truth-max 1000000] [--no-sim] [--no-lp]
                                     [--hw h200-pcie5] [--budget 50%]

Traces come from ``uvm_sched.trace._llm.llm_trace_for_events`` (decoder-only, mixed-
precision AdamW, gradient accumulation over up to 16 micro-batches, 3 iterations, shapes
of a 1k-hidden model). Per size, in a fresh process (so peak RSS is that size's own):
building the trace, Parquet save and load, ``pattern.analyze``, ``planner.plan`` with the
compiled selection sweep and with the plain-Python reference sweep (the baseline; plans
checked identical), ``sim.simulate`` of each baseline policy and of the plan with the
compiled event loop, and of ``demand`` and the plan with the plain-Python reference loop too
(results checked identical in every field), the ``lp-bound`` (HiGHS, block classes and
coarser slots, a time budget of ``LP_BUDGET_S``) beside the fast ``bound`` and the gap the
plan is proven to have, and the peak RSS, of each stage and of the process. The timing
traces carry allocator events only (the simulator then never reads weights or optimizer
state, and the plan's transfers look like pure cost), so in another fresh process the same
shape is built WITH its ground-truth accesses, planned from its allocator events alone (as
the runtime would) and demand paging and the plan are simulated on the truth (``truth``).
Growth exponents are least-squares slopes of log(time) over log(events), from 100k up.

Targets (issue 24, 2-core machine): plan <= 0.5 s per 100k events and simulate <= 1 s per
100k events per policy at 1M; growth exponent <= 1.1 from 100k to 1M; peak memory <= 1 KiB
per event; Parquet load/save of 1M events <= 1 s. Writes ``benchmarks/results/scale.md``
and ``.json``.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results"


def _provenance() -> dict:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_quality import provenance

    return provenance(simulated=False)  # wall and CPU times measured on this machine


SIM_POLICIES = (("demand", "demand"), ("prefetch-on-alloc", "prefetch-on-alloc"),
                ("swap-activations", "swap-activations"), ("bound", "bound"))
LP_BUDGET_S = 300.0  # HiGHS's time budget for the LP bound (s); past it the fast bound stands


def _same(a, b) -> bool:
    """Whether two SimResults agree in every field (frames included)."""
    import dataclasses

    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if not (x.equals(y) if hasattr(x, "equals") else x == y):
            return False
    return True


def one(n: int, hw: str, budget: str, sim: bool, reference: bool, sim_reference: bool,
        lp: bool) -> dict:
    sys.path.insert(0, str(ROOT))
    from uvm_sched.pattern import analyze
    from uvm_sched.planner import _fast, plan
    from uvm_sched.sim import simulate
    from uvm_sched.trace import load
    from uvm_sched.trace._llm import llm_trace_for_events

    r: dict = {"target_events": n}
    # first calls load pyarrow, the hardware profile and the compiled sweep (cached on
    # disk): timed apart on a small trace, so that the table shows the work per size
    t = time.perf_counter()
    small = llm_trace_for_events(3000)
    with tempfile.TemporaryDirectory() as d:
        small.save(Path(d) / "s.parquet")
        load(Path(d) / "s.parquet")
    plan(small, budget, hw)
    if sim:
        simulate(small, "demand", hw, budget)
    r["first_call_s"] = time.perf_counter() - t
    del small
    r["base_rss_bytes"] = _rss_now()
    peak = [_peak_since_reset()]  # the process's peak, kept across the per-stage resets

    def timed(key, fn, *args, repeat=1, **kw):
        # the best of `repeat` runs (as timeit reports): a stage of a few hundredths of a
        # second is otherwise the machine's noise, and its growth exponent with it
        peak[0] = max(peak[0], _peak_since_reset())
        _reset_peak()
        walls, cpus = [], []
        for _ in range(repeat):
            out = None  # (a repeat's result is dropped before the next run)
            t, c = time.perf_counter(), time.process_time()
            out = fn(*args, **kw)
            walls.append(time.perf_counter() - t)
            cpus.append(time.process_time() - c)
        r[key], r[_cpu(key)] = min(walls), min(cpus)
        r[_rss(key)] = _peak_since_reset()
        return out

    tr = timed("build_s", llm_trace_for_events, n)
    r["events"] = len(tr.kind)
    r["name"] = tr.meta.get("name")
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "t.parquet"
        timed("save_s", tr.save, path, repeat=3)
        back = timed("load_s", load, path, repeat=3)
        assert len(back.kind) == len(tr.kind)
        del back
    pat = timed("analyze_s", analyze, tr)
    calls = _fast.calls()
    p = timed("plan_s", plan, tr, budget, hw, pattern=pat)
    r["fast_sweeps"] = _fast.calls() - calls
    r["actions"] = len(p.actions)
    r["plan_digest"] = _digest(p)
    if reference:
        os.environ["UVM_SCHED_PLANNER_KERNEL"] = "python"
        ref = timed("plan_reference_s", plan, tr, budget, hw, pattern=pat)
        del os.environ["UVM_SCHED_PLANNER_KERNEL"]
        r["identical_plan"] = bool(ref.actions.equals(p.actions))
    if sim:
        from uvm_sched.sim import _fast

        for name, pol in SIM_POLICIES + (("plan", p),):
            calls = _fast.calls()
            res = timed(f"sim_{name}_s", simulate, tr, pol, hw, budget)
            r[f"sim_{name}_compiled"] = _fast.calls() > calls
            r[f"sim_{name}_iteration_s"] = float(res.iteration_time_s)
            if sim_reference and name in ("demand", "plan"):
                os.environ["UVM_SCHED_SIM_KERNEL"] = "python"
                ref = timed(f"sim_{name}_reference_s", simulate, tr, pol, hw, budget)
                del os.environ["UVM_SCHED_SIM_KERNEL"]
                r[f"sim_{name}_identical"] = _same(ref, res)
                del ref
    if lp:
        from uvm_sched.sim import LP_BOUND

        b = simulate(tr, "bound", hw, budget) if not sim else None
        res = timed("lp_s", simulate, tr, LP_BOUND, hw, budget, lp_time_limit_s=LP_BUDGET_S)
        c = res.counters
        r.update(lp_bound_s=float(res.iteration_time_s), fast_bound_s=(float(b.iteration_time_s) if b is not None
                                                  else r["sim_bound_iteration_s"]),
                 lp_fallback=c.get("lp_fallback", ""), lp_ticks_per_slot=c.get("lp_ticks_per_slot"),
                 lp_classes=c.get("lp_classes"), lp_columns=c.get("lp_columns"),
                 lp_blocks=c.get("lp_blocks"))
        if sim:  # the gap the greedy plan can be proven to have: its time over the bound
            r["plan_gap"] = r["sim_plan_iteration_s"] / max(r["lp_bound_s"], r["fast_bound_s"])
    r["peak_rss_bytes"] = max(peak[0], _peak_since_reset())
    return r


def truth(n: int, hw: str, budget: str) -> dict:
    """The plan judged against the truth: the same LLM shape built WITH its ground-truth
    accesses (``accesses=True``: same allocator events), planned from its allocator events
    alone (``mode="oblivious"``, as the runtime plans), then demand paging and the plan
    simulated on the trace with its accesses. In a process of its own: the access rows
    (~2.4 per allocator event) stay out of the timed process's peak RSS."""
    sys.path.insert(0, str(ROOT))
    from uvm_sched.planner import plan
    from uvm_sched.sim import simulate
    from uvm_sched.trace._llm import llm_trace_for_events

    gt = llm_trace_for_events(n, accesses=True)
    p = plan(gt, budget, hw, mode="oblivious")
    r = {"truth_rows": len(gt.kind), "truth_plan_digest": _digest(p),
         "truth_chosen": p.meta.get("pricing", {}).get("chosen", "")}
    for name, pol in (("demand", "demand"), ("plan", p)):
        r[f"truth_{name}_iteration_s"] = float(simulate(gt, pol, hw, budget).iteration_time_s)
    return r


def _digest(p) -> str:
    """A short fingerprint of a plan's actions (to say two processes made the same plan)."""
    import hashlib

    import pandas as pd

    h = pd.util.hash_pandas_object(p.actions, index=False).to_numpy()
    return hashlib.sha1(h.tobytes()).hexdigest()[:12]


def profile_sim(n: int, hw: str, budget: str, top: int = 10) -> dict:
    """cProfile of ``simulate`` (demand, then the plan) on an ``n``-event trace: the
    functions with the most time of their own."""
    import cProfile
    import io
    import pstats

    sys.path.insert(0, str(ROOT))
    from uvm_sched.planner import plan
    from uvm_sched.sim import simulate
    from uvm_sched.trace._llm import llm_trace_for_events

    tr = llm_trace_for_events(n)
    p = plan(tr, budget, hw)
    out = {}
    for name, pol in (("demand", "demand"), ("plan", p)):
        pr = cProfile.Profile()
        pr.enable()
        simulate(tr, pol, hw, budget)
        pr.disable()
        buf = io.StringIO()
        st = pstats.Stats(pr, stream=buf)
        total = st.total_tt
        rows = sorted(st.stats.items(), key=lambda kv: -kv[1][2])[:top]
        out[name] = {"total_s": total, "rows": [
            {"function": f"{Path(f).name}:{line}({fn})", "calls": int(nc), "own_s": tt,
             "cum_s": ct} for (f, line, fn), (cc, nc, tt, ct, _) in rows]}
    return out


# the functions profile_plan times (module, attribute, label); nested ones are included in
# their callers' figures
PLAN_PARTS = (
    ("uvm_sched.planner._pricing", "price", "`_pricing.price`"),
    ("uvm_sched.sim._fast_kernels", "run", "- the compiled event loop (`sim/_fast_kernels.run`)"),
    ("uvm_sched.sim._api", "prepare", "- `sim/_prep.prepare`"),
    ("uvm_sched.planner._pricing", "_kept_reads_view", "- `_pricing._kept_reads_view`"),
    ("uvm_sched.planner._planner", "schedule", "schedule builder (`_lp_guided.schedule`)"),
    ("uvm_sched.planner._core", "_select_and_time", "- `_core._select_and_time`"),
    ("uvm_sched.planner._core", "timing", "-- `_queues.timing` (copy queues)"),
    ("uvm_sched.planner._core", "_candidate_gaps", "- `_core._candidate_gaps`"),
    ("uvm_sched.planner._core", "_remote_fallback", "- `_core._remote_fallback`"),
    ("uvm_sched.planner._core", "_prediction", "- `_core._prediction`"),
    ("uvm_sched.planner._planner", "_actions", "`_planner._actions`"),
    ("uvm_sched.planner._planner", "_problem", "`_planner._problem`"),
)


def profile_plan(n: int, hw: str, budget: str) -> dict:
    """CPU seconds of ``planner.plan`` on an ``n``-event trace, and of the functions in
    ``PLAN_PARTS`` within it (each wrapped with ``time.process_time``: the compiled loop's
    runs included, which cProfile cannot see into)."""
    import importlib

    sys.path.insert(0, str(ROOT))
    from uvm_sched.pattern import analyze
    from uvm_sched.planner import plan
    from uvm_sched.sim import _fast
    from uvm_sched.trace._llm import llm_trace_for_events

    _fast.available()  # loads the compiled loop's module
    spent = {label: 0.0 for _, _, label in PLAN_PARTS}

    def wrapped(fn, label):
        def timed(*a, **kw):
            c = time.process_time()
            try:
                return fn(*a, **kw)
            finally:
                spent[label] += time.process_time() - c
        return timed

    for mod, attr, label in PLAN_PARTS:
        m = importlib.import_module(mod)
        setattr(m, attr, wrapped(getattr(m, attr), label))
    plan(llm_trace_for_events(3000), budget, hw)  # first calls
    spent = dict.fromkeys(spent, 0.0)
    tr = llm_trace_for_events(n)
    pat = analyze(tr)
    c = time.process_time()
    p = plan(tr, budget, hw, pattern=pat)
    return {"events": len(tr.kind), "plan_cpu_s": time.process_time() - c, "parts": spent,
            "chosen": p.meta["pricing"]["chosen"]}


def _plan_profile_table(a: argparse.Namespace) -> list[str]:
    """``profile_plan`` per size of ``a.profile_plan`` (each in a fresh process)."""
    runs = []
    for n in [int(x) for x in a.profile_plan.split(",")]:
        out = subprocess.run([sys.executable, __file__, "--profile-plan-one", str(n), "--hw",
                              a.hw, "--budget", a.budget], capture_output=True, text=True,
                             cwd=ROOT, check=True)
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    head = "| function | " + " | ".join(f"{r['events']:,} events, s CPU" for r in runs) + \
        f" | per 100k events at {runs[-1]['events']:,} |"
    lines = [head, "|---" * (len(runs) + 2) + "|"]
    rows = [("`planner.plan` (all)", [r["plan_cpu_s"] for r in runs])] + \
        [(label, [r["parts"][label] for r in runs]) for _, _, label in PLAN_PARTS]
    for label, v in rows:
        lines.append(f"| {label} | " + " | ".join(f"{x:.2f}" for x in v) +
                     f" | {v[-1] / runs[-1]['events'] * 1e5:.2f} |")
    return lines + ["", "chosen: " + ", ".join(r["chosen"] for r in runs)]


def _cpu(key: str) -> str:
    """The CPU-time key of a wall-time key (``plan_s`` -> ``plan_cpu_s``)."""
    return key[:-2] + "_cpu_s"


def _rss(key: str) -> str:
    """The peak-RSS key of a wall-time key (``plan_s`` -> ``plan_peak_rss``)."""
    return key[:-2] + "_peak_rss"


def _reset_peak() -> None:
    """Restart the kernel's peak-RSS mark (VmHWM) at the current RSS (Linux: writing 5 to
    /proc/self/clear_refs); elsewhere a no-op, and stages report the process's peak."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def _peak_since_reset() -> int:
    """Peak resident bytes since ``_reset_peak`` (VmHWM), or the process's peak."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _rss_now() -> int:
    """Resident bytes of this process now (Linux /proc; the peak where that is absent)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _slope(xs, ys) -> float:
    lx = [math.log(x) for x in xs]
    ly = [math.log(max(y, 1e-9)) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    num = sum((a - mx) * (b - my) for a, b in zip(lx, ly))
    den = sum((a - mx) ** 2 for a in lx)
    return num / den if den else float("nan")


def _parser() -> argparse.ArgumentParser:
    """The flags (the hidden ones run one size, or the profile, in a fresh process)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,30000,100000,300000,1000000")
    ap.add_argument("--reference-max", type=int, default=1_000_000,
                    help="plan with the plain-Python sweep too up to this many events")
    ap.add_argument("--sim-reference-max", type=int, default=1_000_000,
                    help="simulate with the plain-Python loop too up to this many events")
    ap.add_argument("--no-sim", action="store_true")
    ap.add_argument("--no-lp", action="store_true", help="leave out the LP bound")
    ap.add_argument("--hw", default="h200-pcie5")
    ap.add_argument("--budget", default="50%")
    ap.add_argument("--profile-sim", type=int, default=100_000,
                    help="profile the simulator on a trace of this many events (0: no)")
    ap.add_argument("--truth-max", type=int, default=1_000_000,
                    help="judge the plan on the trace with its accesses up to this many events")
    ap.add_argument("--profile-plan", default="",
                    help="only print where planner.plan spends its CPU time, per size "
                         "(comma-separated event counts), as a markdown table")
    ap.add_argument("--profile-plan-one", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--truth-one", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--profile-one", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--ref", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--sim-ref", action="store_true", help=argparse.SUPPRESS)
    return ap


def _run_sizes(a: argparse.Namespace) -> list[dict]:
    """One row per size of ``a.sizes``, each measured by ``one`` in a fresh process."""
    rows = []
    for n in [int(x) for x in a.sizes.split(",")]:
        cmd = [sys.executable, __file__, "--one", str(n), "--hw", a.hw, "--budget", a.budget] \
            + (["--no-sim"] if a.no_sim else []) + (["--ref"] if n <= a.reference_max else []) \
            + (["--sim-ref"] if n <= a.sim_reference_max else []) \
            + (["--no-lp"] if a.no_lp else [])
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        if out.returncode:
            print(out.stderr, file=sys.stderr)
            raise SystemExit(f"size {n:,} failed (exit {out.returncode})")
        r = json.loads(out.stdout.strip().splitlines()[-1])
        if not a.no_sim and n <= a.truth_max:
            cmd = [sys.executable, __file__, "--truth-one", str(n), "--hw", a.hw,
                   "--budget", a.budget]
            out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
            if out.returncode:
                print(out.stderr, file=sys.stderr)
                raise SystemExit(f"size {n:,}, ground truth, failed (exit {out.returncode})")
            r.update(json.loads(out.stdout.strip().splitlines()[-1]))
        rows.append(r)
        print(json.dumps(r), file=sys.stderr)
    return rows


def _columns(rows: list[dict]) -> list[tuple[str, str]]:
    """(row key, heading) of the stages timed in ``rows``."""
    cols = [("build_s", "build"), ("save_s", "parquet save"), ("load_s", "parquet load"),
            ("analyze_s", "analyze"), ("plan_s", "plan"), ("plan_reference_s",
                                                           "plan (reference sweep)"),
            ("sim_demand_s", "simulate demand"),
            ("sim_demand_reference_s", "simulate demand (reference loop)"),
            ("sim_prefetch-on-alloc_s", "simulate prefetch-on-alloc"),
            ("sim_swap-activations_s", "simulate swap-activations"),
            ("sim_bound_s", "simulate bound"), ("sim_plan_s", "simulate plan"),
            ("sim_plan_reference_s", "simulate plan (reference loop)"), ("lp_s", "LP bound")]
    cols = [c for c in cols if any(c[0] in r for r in rows)]
    return cols


def _stage_table(a: argparse.Namespace, rows: list[dict],
                 cols: list[tuple[str, str]]) -> list[str]:
    """The page's head and its table of seconds per stage."""
    lines = [f"# Scale: LLM-shaped traces ({a.hw}, budget {a.budget})", "",
             "Command: `python benchmarks/bench_scale.py --sizes " + a.sizes
             + (" --no-sim" if a.no_sim else "") + f" --reference-max {a.reference_max}"
             + f" --sim-reference-max {a.sim_reference_max}" + (" --no-lp" if a.no_lp else "")
             + "`", "",
             "Seconds per stage, wall / CPU (this process's CPU time: on a shared machine the "
             "wall clock also counts waiting for a core; the targets are checked on CPU "
             "time, wall beside it). `plan` uses the compiled selection sweep, `plan (reference "
             "sweep)` the plain-Python one (the baseline; `same plan` checks the two plans' "
             "actions are equal); Parquet save and load: the best of 3 runs. Each size runs "
             "in a fresh process; machine: 2 shared cores, "
             f"load average {os.getloadavg()[0]:.1f} when the table was written. First calls "
             "(imports, the compiled sweep's load from numba's cache) are timed apart, on a "
             f"3k-event trace: {rows[0].get('first_call_s', float('nan')):.1f} s in the first "
             "size's process.", "",
             "| events | trace | " + " | ".join(h for _, h in cols)
             + " | same plan | peak RSS MiB | over the start, bytes/event |",
             "|---" * (len(cols) + 5) + "|"]
    for r in rows:
        cells = [f"{r[k]:.2f} / {r[_cpu(k)]:.2f}" if r.get(k) is not None
                 else "" for k, _ in cols]
        lines.append(f"| {r['events']:,} | {r['name']} | " + " | ".join(cells)
                     + f" | {r.get('identical_plan', '')} | {r['peak_rss_bytes'] / 2**20:.0f}"
                     f" | {(r['peak_rss_bytes'] - r['base_rss_bytes']) / r['events']:.0f} |")
    return lines


def _sim_table(rows: list[dict]) -> list[str]:
    """The simulated iterations per policy, the compiled loop's agreement and the LP bound
    (nothing when the simulator was left out)."""
    lines: list[str] = []
    if any("sim_demand_iteration_s" in r for r in rows):
        lines += ["", "Simulated iteration (s) per policy, whether the compiled loop ran and gave "
                  "the plain-Python loop's result in every field (`same`), and the LP bound: "
                  "its value, the fast bound's, ticks per slot, block classes of blocks, and the "
                  "gap the plan is proven to have (its time over the larger bound). These "
                  "traces hold allocator events only: the simulator takes each block as written "
                  "at its ALLOC and read at its FREE, so weights and optimizer state (never "
                  "freed) are never read, demand paging has nothing to fault back and the "
                  "plan's transfers are pure cost (`plan / demand`). `with accesses`: the same "
                  "LLM shape built with its ground-truth accesses (same allocator events), "
                  "planned from those allocator events alone (oblivious mode, as the runtime "
                  "plans), demand paging and that plan simulated on the truth; `same plan`: it "
                  "is the plan of the timing columns.", "",
                  "| events | demand | prefetch-on-alloc | swap-activations | plan | compiled | "
                  "same (demand, plan) | LP bound | fast bound | ticks/slot | classes / blocks "
                  "| plan gap | plan / demand | with accesses: demand | plan | plan / demand "
                  "| same plan |", "|---" * 17 + "|"]
        for r in rows:
            its = [f"{r[f'sim_{n}_iteration_s']:.4f}" if f"sim_{n}_iteration_s" in r else ""
                   for n in ("demand", "prefetch-on-alloc", "swap-activations", "plan")]
            comp = all(r.get(f"sim_{n}_compiled", False)
                       for n in ("demand", "prefetch-on-alloc", "swap-activations", "plan"))
            same = ", ".join(str(r[f"sim_{n}_identical"]) for n in ("demand", "plan")
                             if f"sim_{n}_identical" in r) or "not run"
            lpv = (f"{r['lp_bound_s']:.4f}" + (" (fast bound: LP over budget)"
                                               if r.get("lp_fallback") else "")
                   if "lp_bound_s" in r else "")
            lines.append(
                f"| {r['events']:,} | " + " | ".join(its) + f" | {comp} | {same} | {lpv} | "
                + (f"{r['fast_bound_s']:.4f} | {r.get('lp_ticks_per_slot')} | "
                   f"{r.get('lp_classes')} / {r.get('lp_blocks')} | {r['plan_gap']:.2f} |"
                   if "plan_gap" in r else " | | | |") + _truth_cells(r))
    return lines


def _truth_cells(r: dict) -> str:
    """The plan/demand ratio on the allocator-only trace, then demand, the plan and their
    ratio on the same shape with its ground-truth accesses, and whether the plan made there
    (from its allocator events) is the one of the timing table."""
    cells = [f"{r['sim_plan_iteration_s'] / r['sim_demand_iteration_s']:.2f}"
             if r.get("sim_demand_iteration_s") else ""]
    if "truth_demand_iteration_s" in r:
        d, p = r["truth_demand_iteration_s"], r["truth_plan_iteration_s"]
        cells += [f"{d:.4f}", f"{p:.4f}", f"{p / d:.2f}",
                  str(r["truth_plan_digest"] == r.get("plan_digest"))]
    else:
        cells += ["", "", "", ""]
    return " " + " | ".join(cells) + " |"


def _rss_table(rows: list[dict], cols: list[tuple[str, str]]) -> list[str]:
    """Each stage's peak RSS over the process's start (after imports and first calls),
    bytes per event: the kernel's peak mark is reset before each stage."""
    cols = [c for c in cols if any(_rss(c[0]) in r for r in rows)]
    if not cols:
        return []
    lines = ["", "Peak RSS of each stage over the process's start, bytes per event (the "
             "kernel's high-water mark, VmHWM, reset before each stage; it counts what the "
             "earlier stages left resident). `fast path` is the largest of the stages a "
             "user runs (build, Parquet, analyze, plan, the compiled simulations); the "
             "plain-Python reference loops and the LP are baselines and bounds.", "",
             "| events | " + " | ".join(h for _, h in cols) + " | fast path |",
             "|---" * (len(cols) + 2) + "|"]
    for r in rows:
        cells = [f"{(r[_rss(k)] - r['base_rss_bytes']) / r['events']:.0f}"
                 if _rss(k) in r else "" for k, _ in cols]
        lines.append(f"| {r['events']:,} | " + " | ".join(cells)
                     + f" | {_fast_path_rss(r) / r['events']:.0f} |")
    return lines


FAST_PATH = ("build_s", "save_s", "load_s", "analyze_s", "plan_s", "sim_demand_s",
             "sim_prefetch-on-alloc_s", "sim_swap-activations_s", "sim_bound_s", "sim_plan_s")


def _fast_path_rss(r: dict) -> float:
    """The fast path's peak RSS over the process's start (bytes)."""
    return max(r.get(_rss(k), 0) for k in FAST_PATH) - r["base_rss_bytes"]


def _growth(rows: list[dict], cols: list[tuple[str, str]]) -> list[str]:
    """Each stage's log-log growth exponent from ~100k events up (nothing below two sizes)."""
    lines: list[str] = []
    big = [r for r in rows if r["events"] >= 90_000]
    if len(big) >= 2:
        lines += ["", "Growth exponent (log-log slope from ~100k events up):", ""]
        for k, h in cols:
            pts = [(r["events"], r[k], r[_cpu(k)]) for r in big
                   if r.get(k) is not None]
            if len(pts) >= 2:
                x, w, c = zip(*pts)
                lines.append(f"- {h}: {_slope(x, c):.2f} CPU, {_slope(x, w):.2f} wall")
    return lines


def _targets(rows: list[dict]) -> list[str]:
    """The targets, met or not, at the largest size."""
    lines: list[str] = []
    top = max(rows, key=lambda r: r["events"])
    per = 1e5 / top["events"]
    lines += ["", f"At {top['events']:,} events (targets from issue 24):", ""]
    checks = [("plan per 100k events (CPU)", top["plan_cpu_s"] * per, 0.5, "s")]
    for name in [n for n, _ in SIM_POLICIES] + ["plan"]:
        if top.get(f"sim_{name}_cpu_s") is not None:
            checks.append((f"{name} simulation per 100k events (CPU)",
                           top[f"sim_{name}_cpu_s"] * per, 1.0, "s"))
    if top.get("lp_cpu_s") is not None:
        checks.append(("LP bound (CPU; HiGHS's own budget is "
                       f"{LP_BUDGET_S:g} s)", top["lp_cpu_s"], LP_BUDGET_S, "s"))
    if any(_rss(k) in top for k in FAST_PATH):
        checks.append(("peak RSS of the fast path (build, Parquet, analyze, plan, compiled "
                       "simulations) over the process's start per event",
                       _fast_path_rss(top) / top["events"], 1024, "bytes"))
    checks += [("peak RSS over the process's start (imports, first calls), every stage "
                "(reference loops and LP included) per event",
                (top["peak_rss_bytes"] - top["base_rss_bytes"]) / top["events"], 1024, "bytes"),
               ("Parquet save (CPU)", top["save_cpu_s"], 1.0, "s"),
               ("Parquet load (CPU)", top["load_cpu_s"], 1.0, "s")]
    for what, v, lim, unit in checks:
        lines.append(f"- {what}: {v:.2f} {unit} (target <= {lim:g} {unit}): "
                     f"{'met' if v <= lim else 'NOT met, ' + format(v / lim, '.1f') + 'x over'}")
    return lines


def _profile(a: argparse.Namespace) -> list[str]:
    """Where the simulator's time goes, profiled in a fresh process (nothing when off)."""
    lines: list[str] = []
    if a.profile_sim and not a.no_sim:
        cmd = [sys.executable, __file__, "--profile-one", str(a.profile_sim), "--hw", a.hw,
               "--budget", a.budget]
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=True)
        prof = json.loads(out.stdout.strip().splitlines()[-1])
        lines += ["", f"Where the simulator's time goes (cProfile, {a.profile_sim:,}-event trace; "
                  "the compiled loop is `_fast_kernels.run`, called from `sim/_fast.py`; the "
                  "plain-Python reference is `sim/_engine.py`):", ""]
        for name, d in prof.items():
            lines += [f"`simulate({name!r})`: {d['total_s']:.2f} s under the profiler", "",
                      "| function | calls | own s | cumulative s |", "|---|---|---|---|"]
            lines += [f"| `{x['function']}` | {x['calls']:,} | {x['own_s']:.2f} | "
                      f"{x['cum_s']:.2f} |" for x in d["rows"]]
            lines.append("")
    return lines


def _write(lines: list[str], rows: list[dict]) -> None:
    """Prints the page and writes it (scale.md) and the rows (scale.json) to ``OUT``."""
    prov = _provenance()
    lines += ["", f"Run {prov['date']}, commit `{prov['commit']}`, {prov['machine']['platform']}, "
              f"{prov['machine']['cpu_count']} CPUs; command `{prov['command']}`."]
    text = "\n".join(lines) + "\n"
    print(text)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "scale.md").write_text(text)
    (OUT / "scale.json").write_text(json.dumps({"provenance": prov, "rows": rows}, indent=1))


def main() -> None:
    a = _parser().parse_args()
    if a.one:
        print(json.dumps(one(a.one, a.hw, a.budget, not a.no_sim, a.ref, a.sim_ref,
                             not a.no_lp)))
        return
    if a.truth_one:
        print(json.dumps(truth(a.truth_one, a.hw, a.budget)))
        return
    if a.profile_plan_one:
        print(json.dumps(profile_plan(a.profile_plan_one, a.hw, a.budget)))
        return
    if a.profile_plan:
        print("\n".join(_plan_profile_table(a)))
        return
    if a.profile_one:
        print(json.dumps(profile_sim(a.profile_one, a.hw, a.budget)))
        return
    rows = _run_sizes(a)
    cols = _columns(rows)
    lines = _stage_table(a, rows, cols) + _sim_table(rows) + _rss_table(rows, cols)
    lines += _growth(rows, cols)
    lines += _targets(rows) + _profile(a)
    _write(lines, rows)


if __name__ == "__main__":
    main()
