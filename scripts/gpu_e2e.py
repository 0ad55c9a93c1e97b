"""One end-to-end training run on a GPU (fresh process), or the simulator's prediction of
the same runs (``--predict``, runs anywhere). Called by ``scripts/gpu_check.py``.

    python scripts/gpu_e2e.py --model gpt --mode uvm-oblivious --steps 30 --out run.json
    python scripts/gpu_e2e.py --predict --results DIR [--calibration cal.json] --out pred.json

Modes: ``default`` (PyTorch's caching allocator: the ideal), ``uvm`` (uvm_sched's managed
allocator, tracing on, no plan: demand paging), ``uvm-oblivious`` / ``uvm-sampled`` (the
Scheduler). ``--budget 50%`` emulates a device with that share of the default run's peak by
occupying the rest of the device with a plain cudaMalloc block (never evicted).
"""
from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# model -> (zoo name, keyword sizes). Sized so one step is tens of ms on an H200.
MODELS = {
    "gpt": ("gpt2_small", {"batch": 8, "seq": 512}),
    "resnet": ("resnet50", {"batch": 64}),
}


def _occupy_device(nbytes: int):
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


def run(args) -> dict:
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device: this run needs a GPU")
    import uvm_sched
    from uvm_sched.trace import zoo

    name, sizes = MODELS[args.model]
    if args.mode != "default":
        # Must happen before the first CUDA allocation of the process.
        torch.cuda.memory.change_current_allocator(uvm_sched.allocator())
    torch.manual_seed(0)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    model_fn, batch_fn, loss_fn = zoo.build(name, **sizes)
    budget = None
    if args.budget:
        budget = _budget_bytes(args.budget, Path(args.out).parent, args.model)
        free, _total = torch.cuda.mem_get_info()
        if free > budget:
            _occupy_device(free - budget)
    with torch.device("cuda"):
        model = model_fn()
        batch = batch_fn()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    sched = None
    if args.mode.startswith("uvm-"):
        mode = args.mode.split("-", 1)[1]
        sched = uvm_sched.Scheduler(budget=budget if budget else "100%", hw="h200-pcie5",
                                    warmup_iters=3, mode=mode)
        sched.__enter__()
    losses, times = [], []
    inputs = batch if isinstance(batch, tuple) else (batch,)
    for _ in range(args.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = model(*inputs)
        loss = loss_fn(out) if loss_fn is not None else out.float().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if args.mode != "default":
            uvm_sched.step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        losses.append(float(loss.detach()))
    if sched is not None:
        sched.__exit__(None, None, None)
    measured = times[min(5, len(times) - 1):]  # after warm-up (and the Scheduler's learning)
    res = {
        "model": name, "sizes": sizes, "mode": args.mode, "steps": args.steps,
        "budget_bytes": budget, "losses": losses,
        "iter_ms": [t * 1e3 for t in times],
        "iter_ms_median": statistics.median(measured) * 1e3,
        "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
    }
    if args.mode == "default":
        res["peak_device_bytes"] = int(torch.cuda.max_memory_reserved())
    else:
        st = uvm_sched.stats()
        res["stats"] = st
        res["peak_device_bytes"] = int(st.get("peak_allocated", st.get("peak", 0)))
        if sched is not None:
            res["scheduler"] = sched.stats()
    return res


def predict(args) -> dict:
    """Simulate the kit's runs with the (recalibrated) h200-pcie5 profile."""
    from uvm_sched import sim
    from uvm_sched.hw import load_profile
    from uvm_sched.trace import zoo

    hw = load_profile("h200-pcie5")
    if args.calibration and Path(args.calibration).exists():
        hw = hw.recalibrated(args.calibration)
    results = Path(args.results) if args.results else None
    rows = []
    for key, (name, sizes) in MODELS.items():
        trace = zoo.record(name, iters=3, hw="h200-pcie5", **sizes)
        ideal = sim.simulate(trace, "ideal", hw)
        runs = [("default", "ideal", None), ("uvm", "demand", None),
                ("uvm-oblivious", "uvm-sched", None),
                ("uvm:budget50", "demand", "50%"), ("uvm-oblivious:budget50", "uvm-sched", "50%")]
        for mode, policy, budget in runs:
            r = ideal if policy == "ideal" else sim.simulate(trace, policy, hw, budget)
            measured = None
            if results is not None:
                f = results / f"e2e_{key}_{mode.replace(':', '_')}.json"
                if f.exists():
                    measured = json.loads(f.read_text()).get("iter_ms_median")
            rows.append({"run": f"{key}:{mode}", "policy": policy, "budget": budget,
                         "predicted_ms": r.iteration_time_s * 1e3, "measured_ms": measured,
                         "predicted_slowdown": r.slowdown(ideal)})
    return {"hw": hw.name, "calibrated": bool(args.calibration), "rows": rows}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=sorted(MODELS))
    ap.add_argument("--mode", choices=("default", "uvm", "uvm-oblivious", "uvm-sampled"))
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--budget", help="share of the default run's peak, e.g. 50%%")
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
        res = run(args)
    Path(args.out).write_text(json.dumps(res, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
