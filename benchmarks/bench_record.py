"""Recorder speed and memory: record zoo models on meta tensors and print, per model, the
wall time, events, ticks, trace peak bytes and the process's peak RSS.

Each model runs in its own process so its peak RSS (``resource.getrusage``) is its own.
Target (issue 3): ResNet-152 at batch 1280 (224 px) in under 2 minutes within 4 GiB of RAM.

    python benchmarks/bench_record.py                 # the target plus every zoo model
    python benchmarks/bench_record.py --quick         # the target only
    python benchmarks/bench_record.py --one resnet152 --batch 1280 --image 224
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET = {"model": "resnet152", "batch": 1280, "image": 224, "limit_s": 120.0,
          "limit_rss": 4 * 2**30}
# Realistic training sizes for the sweep (batch, and image px or sequence tokens).
SIZES = {
    "resnet50": (256, 224), "resnet152": (1280, 224), "inception_v3": (256, 299),
    "senet154": (128, 224), "unet": (16, 512), "vit_b16": (128, 224),
    "bert_base": (32, 512), "gpt2_small": (16, 1024), "gpt2_medium": (8, 1024),
    "gpt_1b5": (2, 1024), "llama_7b": (1, 2048),
}


def one(name: str, batch: int, size: int, iters: int, amp: bool) -> dict:
    sys.path.insert(0, str(ROOT))
    from uvm_sched.trace import zoo

    text = zoo.info(name)["kind"] in ("lm", "mlm")
    t0 = time.perf_counter()
    tr = zoo.record(name, batch=batch, iters=iters, amp=amp,
                    **({"seq": size} if text else {"image": size}))
    dt = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    return {"model": name, "batch": batch, "size": size, "iters": iters, "amp": amp,
            "seconds": dt, "events": len(tr), "ticks": tr.n_ticks, "ops": tr.meta["ops"],
            "peak_bytes": tr.peak_bytes, "peak_rss_bytes": rss,
            "device_ms_per_iter": float(
                tr.tick_ns[tr.iteration_starts[-1]:].sum() / 1e6)}


def run_child(name, batch, size, iters, amp) -> dict:
    cmd = [sys.executable, __file__, "--one", name, "--batch", str(batch), "--size", str(size),
           "--iters", str(iters)] + (["--amp"] if amp else [])
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--one", help="record one model in this process and print JSON")
    ap.add_argument("--batch", type=int)
    ap.add_argument("--size", "--image", "--seq", dest="size", type=int)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--amp", action="store_true")
    ap.add_argument("--quick", action="store_true", help="only the ResNet-152 target")
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.batch, args.size, args.iters, args.amp)))
        return

    rows = [run_child(TARGET["model"], TARGET["batch"], TARGET["image"], args.iters, False)]
    if not args.quick:
        for name, (b, s) in SIZES.items():
            for amp in (False, True):
                if name == TARGET["model"] and not amp:
                    continue
                rows.append(run_child(name, b, s, args.iters, amp))
    hdr = (f"{'model':14s} {'batch':>6s} {'size':>5s} {'amp':>4s} {'time s':>7s} "
           f"{'events':>9s} {'ticks':>7s} {'peak GiB':>9s} {'RSS MiB':>8s} {'dev ms/it':>9s}")
    print(hdr)
    for r in rows:
        print(f"{r['model']:14s} {r['batch']:6d} {r['size']:5d} {str(r['amp']):>4s} "
              f"{r['seconds']:7.2f} {r['events']:9,d} {r['ticks']:7,d} "
              f"{r['peak_bytes'] / 2**30:9.2f} {r['peak_rss_bytes'] / 2**20:8.0f} "
              f"{r['device_ms_per_iter']:9.2f}")
    t = rows[0]
    ok = t["seconds"] < TARGET["limit_s"] and t["peak_rss_bytes"] < TARGET["limit_rss"]
    print(f"\ntarget {TARGET['model']} batch {TARGET['batch']} @ {TARGET['image']} px: "
          f"{t['seconds']:.1f} s (limit {TARGET['limit_s']:.0f} s, "
          f"{t['seconds'] / TARGET['limit_s']:.2f}x of it), peak RSS "
          f"{t['peak_rss_bytes'] / 2**30:.2f} GiB (limit 4 GiB, "
          f"{t['peak_rss_bytes'] / TARGET['limit_rss']:.2f}x): {'MET' if ok else 'MISSED'}")
    out = ROOT / "benchmarks" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_record.json").write_text(json.dumps({"target": TARGET, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
