"""The dispatch tracer's cost: what ``mode="auto"`` (and ``"sampled"``) adds to a PyTorch
loop while it learns, and that it adds nothing once the plan is armed.

``integrations.torch.TouchRecorder`` is a PyTorch dispatch mode: while active, every op
dispatched records the storages of its tensors (one allocator-clock read and a list append
per tensor). The Scheduler keeps it on during the warm-up iterations only and removes it
before arming. Measured here on CPU tensors (``device_type="cpu"``, so every tensor is
recorded, as every CUDA tensor is on a GPU), on the host backend, in three states:

* ``off``: no tracer (what armed iterations run);
* ``tracing``: the tracer active (the warm-up iterations);
* ``removed``: after ``start()`` then ``stop()`` (armed iterations after a warm-up: must
  equal ``off``; checked: no touch recorded, no dispatch mode left), timed in alternation
  with ``tracing``.

Two loads: one small op (``x.add_(y)`` on 1 KiB tensors: the per-op cost, 2 tensors) and a
training iteration of a small MLP and a small transformer layer (forward, backward, AdamW:
the per-iteration cost, with the ops per iteration counted by a counting dispatch mode).
Wall seconds on this machine; the fastest of ``--repeats`` runs.

    python benchmarks/bench_tracer.py            # writes results/tracer.md, .json
    python benchmarks/bench_tracer.py --quick    # fewer repeats, nothing written
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results"


def _timed(fn, n: int, repeats: int) -> float:
    """Seconds per call of ``fn``: the fastest of ``repeats`` runs of ``n`` calls (the
    machine is shared: the minimum is the run least disturbed by others, as timeit takes)."""
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        runs.append((time.perf_counter() - t0) / n)
    return min(runs)


def _states(fn, n: int, repeats: int) -> dict[str, float]:
    """Seconds per call of ``fn`` with no tracer yet, then with it active and after it was
    removed in alternation (so that the machine's load drifts over both alike)."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    from uvm_sched.integrations.torch import TouchRecorder

    fn()  # warm the op's kernels
    out = {"off": _timed(fn, n, repeats)}
    rec = TouchRecorder("cpu")
    tracing, removed, touches = [], [], 0
    for _ in range(repeats):
        rec.start()
        tracing.append(_timed(fn, n, 1))
        rec.stop()
        touches = len(rec.clocks)
        removed.append(_timed(fn, n, 1))
        if len(rec.clocks) != touches or _get_current_dispatch_mode() is not None:
            raise RuntimeError("the tracer still records after stop()")
    out["tracing"], out["removed"] = min(tracing), min(removed)
    out["touches_per_call"] = touches / (n * repeats)
    with _Bare():  # what any Python dispatch mode costs, recording nothing
        out["bare_mode"] = _timed(fn, n, repeats)
    return out


def _bare_mode():
    from torch.utils._python_dispatch import TorchDispatchMode

    class Bare(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    return Bare


class _Bare:
    """A context with a dispatch mode that only calls the op (built on first use: torch is
    imported in main)."""

    def __enter__(self):
        self.mode = _bare_mode()()
        return self.mode.__enter__()

    def __exit__(self, *exc):
        return self.mode.__exit__(*exc)


def _ops_per_call(fn) -> int:
    """Ops dispatched by one call of ``fn`` (a counting dispatch mode)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            _Count.n += 1
            return func(*args, **(kwargs or {}))

    with _Count():
        fn()
    return _Count.n


def _loads():
    """(name, one call, calls per timing run) for each load."""
    import torch

    x, y = torch.zeros(256), torch.ones(256)
    mlp = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(),
                              torch.nn.Linear(512, 256))
    layer = torch.nn.TransformerEncoderLayer(128, 4, 256, batch_first=True)
    loads = [("one op: x.add_(y), 1 KiB tensors", lambda: x.add_(y), 2000)]
    for name, model, inp in (("MLP 256-512-256, batch 32, AdamW", mlp, torch.randn(32, 256)),
                             ("transformer layer d128, 4 heads, 8x64 tokens, AdamW", layer,
                              torch.randn(8, 64, 128))):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def it(model=model, inp=inp, opt=opt):
            opt.zero_grad()
            model(inp).square().mean().backward()
            opt.step()
        loads.append((f"training iteration: {name}", it, 20))
    return loads


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="3 repeats, nothing written")
    a = ap.parse_args()
    repeats = 3 if a.quick else a.repeats
    os.environ["UVM_SCHED_BACKEND"] = "host"
    sys.path.insert(0, str(ROOT))
    import torch

    from uvm_sched import native

    native._reset("host", force=True)  # the tracer reads the allocator clock per op
    torch.set_num_threads(1)  # one core: the figures do not depend on the machine's load share
    rows = []
    for name, fn, n in _loads():
        r = _states(fn, n, repeats)
        r.update(load=name, ops=_ops_per_call(fn))
        r["added_per_call_s"] = r["tracing"] - r["off"]
        r["added_per_op_s"] = r["added_per_call_s"] / r["ops"]
        rows.append(r)
        print(f"{name}: {r['ops']} ops, off {r['off'] * 1e6:.1f} us, tracing "
              f"{r['tracing'] * 1e6:.1f} us, removed {r['removed'] * 1e6:.1f} us", flush=True)
    if a.quick:
        return
    _write(rows, repeats)


def _write(rows: list[dict], repeats: int) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_quality import provenance

    prov = provenance(simulated=False)
    lines = ["# The dispatch tracer's cost (mode=\"auto\"/\"sampled\" warm-up)", "",
             "Wall time per call on CPU tensors (every tensor recorded), one thread, the "
             f"fastest of {repeats} runs (a shared machine). `off`: no tracer (armed "
             "iterations); `tracing`: the "
             "tracer active (warm-up iterations only); `removed`: after the tracer was "
             "started and stopped (armed iterations after a warm-up); `bare mode`: a "
             "PyTorch dispatch mode that records nothing (the mechanism's own cost).", "",
             "| load | ops per call | touches recorded per call | off | tracing | removed | "
             "bare mode | added per call | added per op | tracing / off | removed / off |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['load']} | {r['ops']} | {r['touches_per_call']:.0f} | "
            f"{r['off'] * 1e6:.1f} us | {r['tracing'] * 1e6:.1f} us | "
            f"{r['removed'] * 1e6:.1f} us | {r['bare_mode'] * 1e6:.1f} us | "
            f"{r['added_per_call_s'] * 1e6:.1f} us | "
            f"{r['added_per_op_s'] * 1e6:.2f} us | {r['tracing'] / r['off']:.2f}x | "
            f"{r['removed'] / r['off']:.2f}x |")
    lines += ["", "On a GPU the ops themselves are asynchronous launches, so the added host "
              "time per op is what a warm-up iteration pays (the GPU work is unchanged); "
              "armed iterations pay nothing: the tracer is removed before the plan is armed.",
              "", f"Run {prov['date']}, commit `{prov['commit']}`, "
              f"{prov['machine']['platform']}, {prov['machine']['cpu_count']} CPUs "
              f"(shared); command `{prov['command']}`."]
    text = "\n".join(lines) + "\n"
    print(text)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "tracer.md").write_text(text)
    (OUT / "tracer.json").write_text(json.dumps({"provenance": prov, "rows": rows}, indent=1)
                                     + "\n")


if __name__ == "__main__":
    main()
