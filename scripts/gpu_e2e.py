"""One end-to-end training run on a GPU (fresh process), or the simulator's prediction of
the same runs (``--predict``, runs anywhere). Called by ``scripts/gpu_check.py``.

    python scripts/gpu_e2e.py --model gpt --mode uvm-oblivious --steps 30 --out run.json
    python scripts/gpu_e2e.py --predict --results DIR [--calibration cal.json] --out pred.json

Modes: ``default`` (PyTorch's caching allocator: the ideal), ``uvm`` (uvm_sched's managed
allocator, tracing on, no plan: demand paging; with no budget it measures the tracing
overhead), ``uvm-oblivious`` / ``uvm-sampled`` (the Scheduler, which marks iterations with
``Scheduler.step()`` after each optimizer step). ``--budget 50%`` emulates a device with
that share of the default run's peak by occupying the rest of the device with a plain
cuMemAlloc block (never evicted): that oversubscribes managed memory.  With ``--no-shrink``
the Scheduler plans for the same budget and executes its moves (its evictions to the host and
prefetches back run for real), but the device keeps its memory: nothing is oversubscribed, so
the driver never has to evict on its own, and a fault on a block the plan left on the host
migrates it back at once.  That is the budgeted run a shared machine that forbids
oversubscription allows.

Numerics: every run seeds the same RNGs and asks PyTorch for deterministic algorithms
(``CUBLAS_WORKSPACE_CONFIG=:4096:8``), so the losses of a managed-memory run can be
compared with the default run's exactly (``gpu_check.py`` does).

Output JSON: ``losses``, ``iter_ms`` (every step), ``iter_ms_median`` (after warm-up),
``peak_device_bytes`` (what the allocator reserved at its peak: PyTorch's
``max_memory_reserved()``, or uvm_sched's ``peak_reserved_bytes``), ``device_used_bytes_max``
(device memory in use as the driver reports it, sampled after every step, less what was in
use before the model was built: managed pages resident on the device count), ``stats``
(``uvm_sched.stats()``), ``scheduler`` (``Scheduler.stats()``).
"""
from __future__ import annotations

import argparse
import ctypes
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# model -> (zoo name, keyword sizes for zoo.build / zoo.record). Sized so one step is
# tens of ms on an H200.
MODELS = {
    "gpt": ("gpt2_small", {"batch": 8, "seq": 512}),
    "resnet": ("resnet50", {"batch": 64, "image": 224}),
}
MODES = ("default", "uvm", "uvm-oblivious", "uvm-sampled")
WARMUP_STEPS = 5  # steps left out of the median (allocator warm-up, the Scheduler learning)


def _occupy_device(nbytes: int) -> int:
    """Hold ``nbytes`` of device memory with cuMemAlloc in the primary context (the one
    PyTorch uses), so managed memory sees only what is left. Returns the pointer."""
    cu = ctypes.CDLL("libcuda.so.1")
    dev, ctx, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
    for call, args in (("cuInit", (0,)), ("cuDeviceGet", (ctypes.byref(dev), 0)),
                       ("cuDevicePrimaryCtxRetain", (ctypes.byref(ctx), dev)),
                       ("cuCtxPushCurrent_v2", (ctx,)),
                       ("cuMemAlloc_v2", (ctypes.byref(ptr), ctypes.c_size_t(nbytes))),
                       ("cuCtxPopCurrent_v2", (ctypes.byref(ctx),))):
        rc = getattr(cu, call)(*args)
        if rc != 0:
            raise RuntimeError(f"{call} failed with CUDA error {rc} while occupying {nbytes:,} bytes")
    return ptr.value


def _budget_bytes(spec: str, results: Path, model: str) -> int:
    from uvm_sched._budget import resolve_budget

    default = results / f"e2e_{model}_default.json"
    if not default.exists():
        raise SystemExit(f"--budget {spec} needs the default run's peak: {default} is missing")
    peak = json.loads(default.read_text())["peak_device_bytes"]
    return resolve_budget(spec, peak)


def deterministic(seed: int = 0) -> None:
    """Same seeds and deterministic kernels in every run, so losses compare exactly.
    Must run before cuBLAS is first used (the workspace setting is read then)."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import torch

    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False


def build(model: str, device: str, sizes: dict | None = None):
    """(module, inputs tuple, loss_fn(out, batch), AdamW optimizer) for ``model`` on
    ``device``, from the zoo (``sizes`` overrides ``MODELS``' keyword sizes)."""
    import torch

    from uvm_sched.trace import zoo

    name, default_sizes = MODELS[model]
    model_fn, batch_fn, loss_fn = zoo.build(name, **(sizes or default_sizes))
    with torch.device(device):
        module = model_fn()
        batch = batch_fn()
    module.train()
    opt = torch.optim.AdamW(module.parameters(), lr=1e-4)
    return module, batch, loss_fn, opt


def train(module, batch, loss_fn, opt, steps: int, *, marker=None, sync=None, more=None):
    """``steps`` training steps, then more while ``more(steps_done, seconds_so_far)`` says
    so (None: no more); returns (losses, seconds per step). ``marker()`` runs at the end of
    each step (the iteration marker); ``sync()`` waits for the device before each clock
    reading."""
    losses, times = [], []
    inputs = batch if isinstance(batch, tuple) else (batch,)
    t_start = time.perf_counter()
    while len(times) < steps or (more is not None
                                 and more(len(times), time.perf_counter() - t_start)):
        if sync is not None:
            sync()
        t0 = time.perf_counter()
        out = module(*inputs)
        loss = loss_fn(out, batch)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if marker is not None:
            marker()
        if sync is not None:
            sync()
        times.append(time.perf_counter() - t0)
        losses.append(float(loss.detach()))
    return losses, times


def until_armed(sched, armed_steps: int, max_steps: int, time_limit_s: float):
    """The ``more`` of :func:`train` for a Scheduler run: go on until ``armed_steps`` steps
    ran with the plan armed, or ``max_steps`` steps, or ``time_limit_s`` seconds (0: none)
    of training.  The plan is made in the background, so how many steps that takes is the
    machine's, not ours to fix."""
    def more(done: int, elapsed_s: float) -> bool:
        if done >= max_steps or (time_limit_s and elapsed_s >= time_limit_s):
            return False
        first = sched.stats().get("steps_before_plan")
        return first is None or done - first < armed_steps

    return more


def make_scheduler(mode: str, budget, plan_opts: dict | None = None):
    """The Scheduler of a ``uvm-<planning mode>`` run; its iterations are marked by
    calling its ``step()`` (the optimizer hook is off: one marker per iteration).
    ``plan_opts``: the planner's options (``uvm_sched.plan``), e.g. ``{"discard": False}``."""
    import uvm_sched

    return uvm_sched.Scheduler(budget=budget if budget else "100%", hw="h200-pcie5",
                               warmup_iters=3, mode=mode.split("-", 1)[1], hook=False,
                               plan_opts=plan_opts)


def run(args) -> dict:
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device: this run needs a GPU")
    import uvm_sched
    from uvm_sched.integrations import torch as uvm_torch

    if args.mode != "default":
        uvm_torch.install()  # before the first CUDA allocation of the process
    deterministic()
    budget = None
    if args.budget:
        budget = _budget_bytes(args.budget, Path(args.out).parent, args.model)
        free, _total = torch.cuda.mem_get_info()
        if free > budget and not args.no_shrink:
            _occupy_device(free - budget)
    free0, total = torch.cuda.mem_get_info()
    used0 = total - free0
    module, batch, loss_fn, opt = build(args.model, "cuda")
    sched = make_scheduler(args.mode, budget, args.plan_opts) \
        if args.mode.startswith("uvm-") else None
    if sched is not None:
        sched.start()
        marker = sched.step
    elif args.mode == "uvm":
        marker = uvm_sched.step
    else:
        marker = None
    used_max = [0]

    def sync():
        torch.cuda.synchronize()
        free, _ = torch.cuda.mem_get_info()
        used_max[0] = max(used_max[0], total - free - used0)

    armed_from = 0  # the plan is made in the background: time only the steps it ran armed
    try:
        more = (until_armed(sched, args.armed_steps, args.max_steps, args.time_limit)
                if sched is not None and args.armed_steps else None)
        losses, times = train(module, batch, loss_fn, opt, args.steps, marker=marker, sync=sync,
                              more=more)
    finally:
        if sched is not None:
            armed_from = sched.stats().get("steps_before_plan") or len(times)
            sched.close()
    measured = times[min(max(WARMUP_STEPS, armed_from), len(times) - 1):]
    name, sizes = MODELS[args.model]
    res = {
        "model": name, "sizes": sizes, "mode": args.mode, "steps": len(times),
        "armed_from": armed_from if sched is not None and armed_from < len(times) else None,
        "measured_steps": len(measured),
        "plan_opts": args.plan_opts, "budget_bytes": budget,
        "device_shrunk": bool(budget) and not args.no_shrink,
        "losses": losses,
        "iter_ms": [t * 1e3 for t in times],
        "iter_ms_median": statistics.median(measured) * 1e3,
        "device_used_bytes_max": int(used_max[0]),
        "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
    }
    if args.mode == "default":
        res["peak_device_bytes"] = int(torch.cuda.max_memory_reserved())
    else:
        st = uvm_sched.stats()
        res["stats"] = st
        res["peak_device_bytes"] = int(st["peak_reserved_bytes"])
        if sched is not None:
            res["scheduler"] = sched.stats()
    if not all(math.isfinite(x) for x in losses):
        raise SystemExit(f"non-finite loss in {losses}")
    return res


def _run_doc(results: Path | None, key: str, mode: str, sizes: dict) -> dict | None:
    """The result of the kit's run ``key:mode`` when it ran the same workload, else None."""
    f = results / f"e2e_{key}_{mode.replace(':', '_')}.json" if results is not None else None
    if f is None or not f.exists():
        return None
    doc = json.loads(f.read_text())
    return doc if doc.get("sizes") == sizes else None


def measured_compute(trace, default_run: dict | None):
    """``trace`` with the default run's measured iteration times (PyTorch's allocator, all
    resident: its wall time per step is the compute) in place of the roofline
    (``Trace.with_compute_times``), or (None, why not)."""
    secs = [ms / 1e3 for ms in (default_run or {}).get("iter_ms", [])[WARMUP_STEPS:]]
    if not secs:
        return None, "no default run of this workload with steps after warm-up"
    try:
        return trace.with_compute_times(secs), ""
    except ValueError as e:  # TraceError: said in the result, the roofline rows stand
        return None, str(e)


def predict(args) -> dict:
    """Simulate the kit's runs with the (recalibrated) h200-pcie5 profile: with the
    roofline (``predicted_ms``) and, where the default run measured its iterations, with
    those times as the compute (``predicted_ms_measured_compute``; ``compute_times`` per
    model says where each time came from)."""
    from uvm_sched import sim
    from uvm_sched.hw import load_profile
    from uvm_sched.trace import zoo

    hw = load_profile("h200-pcie5")
    if args.calibration and Path(args.calibration).exists():
        hw = hw.recalibrated(args.calibration)
    results = Path(args.results) if args.results else None
    rows, sources = [], {}
    for key, (name, sizes) in MODELS.items():
        trace = zoo.record(name, iters=3, hw="h200-pcie5", **sizes)
        ideal = sim.simulate(trace, "ideal", hw)
        timed, why = measured_compute(trace, _run_doc(results, key, "default", sizes))
        sources[key] = {"roofline": trace.time_source,
                        "measured": timed.time_source if timed is not None else why}
        # (measured run, policy, budget, planning mode)
        runs = [("default", "ideal", None, None), ("uvm", "demand", None, None),
                ("uvm-oblivious", "uvm-sched", None, "oblivious"),
                ("uvm-sampled", "uvm-sched", None, "sampled"),
                ("uvm:budget50", "demand", "50%", None),
                ("uvm-oblivious:budget50", "uvm-sched", "50%", "oblivious"),
                # the same plan run with the device not shrunk (--no-shrink): the simulator
                # still caps residency at the budget, so its figure is the budgeted one
                ("uvm-oblivious:plan50", "uvm-sched", "50%", "oblivious")]
        for mode, policy, budget, plan_mode in runs:
            opts = {"mode": plan_mode} if plan_mode else {}
            r = ideal if policy == "ideal" else sim.simulate(trace, policy, hw, budget, **opts)
            doc = _run_doc(results, key, mode, sizes)  # only a run of the same workload
            measured = doc.get("iter_ms_median") if doc else None
            timed_ms = (sim.simulate(timed, policy, hw, budget, **opts).iteration_time_s * 1e3
                        if timed is not None else None)
            rows.append({"run": f"{key}:{mode}", "model": name, "sizes": sizes,
                         "policy": policy, "budget": budget, "plan_mode": plan_mode,
                         "predicted_ms": r.iteration_time_s * 1e3, "measured_ms": measured,
                         "predicted_ms_measured_compute": timed_ms,
                         "predicted_slowdown": r.slowdown(ideal)})
    return {"hw": hw.name, "calibrated": bool(args.calibration and Path(args.calibration).exists()),
            "compute_times": sources, "rows": rows}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=sorted(MODELS))
    ap.add_argument("--mode", choices=MODES)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--armed-steps", type=int, default=0,
                    help="Scheduler modes: after --steps, go on until this many steps ran "
                         "armed (or --max-steps, or --time-limit)")
    ap.add_argument("--max-steps", type=int, default=300)
    ap.add_argument("--time-limit", type=float, default=0.0,
                    help="seconds of training after which no further step starts (0: none)")
    ap.add_argument("--budget", help="share of the default run's peak, e.g. 50%%")
    ap.add_argument("--no-shrink", action="store_true",
                    help="with --budget: plan for it but leave the device its memory "
                         "(no oversubscription)")
    ap.add_argument("--plan-opts", type=json.loads, default=None,
                    help='the planner\'s options as JSON, e.g. \'{"discard": false}\'')
    ap.add_argument("--predict", action="store_true", help="simulate instead of running")
    ap.add_argument("--results", help="directory of measured runs (for --predict)")
    ap.add_argument("--calibration", help="calibration.json (for --predict)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    if args.predict:
        res = predict(args)
    else:
        if not (args.model and args.mode):
            ap.error("--model and --mode are required unless --predict")
        if args.plan_opts is not None and not args.mode.startswith("uvm-"):
            ap.error(f"--plan-opts needs a Scheduler mode (uvm-...), not {args.mode!r}")
        if args.no_shrink and not args.budget:
            ap.error("--no-shrink needs --budget (the budget the Scheduler plans for)")
        if args.steps < 1:
            ap.error(f"--steps must be >= 1, got {args.steps}")
        res = run(args)
    Path(args.out).write_text(json.dumps(res, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
