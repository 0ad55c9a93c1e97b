"""Activation checkpointing beside uvm-sched at the same device memory, in the simulator.

For each transformer of the zoo at its training size, the model is recorded twice on meta
tensors: as is, and with every transformer block wrapped in ``torch.utils.checkpoint``
(non-reentrant, the form PyTorch recommends), so the recompute appears as extra kernels
with their roofline device time. Checkpointing's cost is its ideal (all-resident) iteration
time over the plain model's; its memory is its peak. uvm-sched is then planned for the plain
model at exactly that peak as its budget, and simulated, beside the simulator's lower bound.
Both use the same hardware profiles, so the two ways of fitting the same memory are compared
on one clock. Figures are simulated (see benchmarks/README.md).

    python benchmarks/bench_checkpointing.py            # gpt2_small, gpt2_medium, bert_base, llama_7b
    python benchmarks/bench_checkpointing.py --models gpt2_small

Writes benchmarks/results/checkpointing.md and checkpointing.json.
"""
from __future__ import annotations

import argparse
import functools
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from bench_quality import provenance, provenance_md, write_json  # noqa: E402

RESULTS = HERE / "results"
HW = ("h200-pcie5", "gh200-c2c")
# where each zoo transformer keeps its blocks (the unit checkpointing wraps)
BLOCKS = {"gpt2_small": "blocks", "gpt2_medium": "blocks", "bert_base": "layers",
          "llama_7b": "blocks"}


def checkpointed(model_fn, attr: str):
    """``model_fn`` with each module of ``model.<attr>`` run under torch.utils.checkpoint."""
    from torch.utils.checkpoint import checkpoint

    def build():
        m = model_fn()
        for blk in getattr(m, attr):
            blk.forward = functools.partial(checkpoint, blk.forward, use_reentrant=False)
        return m

    return build


def one(model: str, hw: str) -> dict:
    import uvm_sched
    from uvm_sched import sim
    from uvm_sched.trace import record, zoo

    model_fn, batch_fn, loss_fn = zoo.build(model)
    t0 = time.perf_counter()
    plain = zoo.record(model, hw=hw)
    ck = record(checkpointed(model_fn, BLOCKS[model]), batch_fn, loss_fn=loss_fn, hw=hw,
                name=f"{model} (checkpointed)")
    ideal = sim.simulate(plain, "ideal", hw)
    ideal_ck = sim.simulate(ck, "ideal", hw)
    budget = int(ck.peak_bytes)
    plan = uvm_sched.plan(plain, budget, hw)
    ours = sim.simulate(plain, plan, hw, budget=budget)
    bound = sim.simulate(plain, "bound", hw, budget=budget)
    info = zoo.info(model)
    return {
        "model": model, "hw": hw, "batch": info["batch"], "size": info.get("seq", info.get("image")),
        "peak_bytes": int(plain.peak_bytes), "checkpointed_peak_bytes": budget,
        "memory_share": budget / plain.peak_bytes,
        "ideal_s": ideal.iteration_time_s, "checkpointed_s": ideal_ck.iteration_time_s,
        "checkpointing_slowdown": ideal_ck.iteration_time_s / ideal.iteration_time_s,
        "uvm_sched_slowdown": ours.slowdown(ideal), "bound_slowdown": bound.slowdown(ideal),
        "seconds": time.perf_counter() - t0,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(BLOCKS))
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args(argv)
    models = [m for m in args.models.split(",") if m]
    bad = [m for m in models if m not in BLOCKS]
    if bad:
        ap.error(f"no checkpointing recipe for {bad}; known: {', '.join(BLOCKS)}")
    prov = provenance(argv if argv is not None else sys.argv)
    rows = []
    for m in models:
        for hw in HW:
            r = one(m, hw)
            rows.append(r)
            print(f"{m:>12} {hw:>11}: checkpointing {r['memory_share']:.0%} of peak at "
                  f"{r['checkpointing_slowdown']:.2f}x; uvm-sched at that budget "
                  f"{r['uvm_sched_slowdown']:.2f}x (bound {r['bound_slowdown']:.2f}x)", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "checkpointing.json", {"provenance": prov, "rows": rows})
    md = ["# Activation checkpointing vs uvm-sched at the same device memory", "",
          provenance_md(prov), "",
          "Each transformer block under `torch.utils.checkpoint` (recompute in the backward "
          "pass); uvm-sched plans the plain model with the checkpointed peak as its budget. "
          "Slowdowns are over the plain model's all-resident iteration.", "",
          "| model | batch, size | hw | peak | checkpointed peak | checkpointing | "
          "uvm-sched at that budget | lower bound |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        md.append(f"| {r['model']} | {r['batch']}, {r['size']} | {r['hw']} | "
                  f"{r['peak_bytes'] / 2**30:.2f} GiB | {r['checkpointed_peak_bytes'] / 2**30:.2f} GiB "
                  f"({r['memory_share']:.0%}) | {r['checkpointing_slowdown']:.2f}x | "
                  f"{r['uvm_sched_slowdown']:.2f}x | {r['bound_slowdown']:.2f}x |")
    (out / "checkpointing.md").write_text("\n".join(md) + "\n")
    print(f"wrote {out / 'checkpointing.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
