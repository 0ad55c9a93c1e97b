"""What each plan action costs on this GPU: the host time of the call itself and the time
until the device has done it, for every action the executor issues (prefetch to the device
of fresh, host-resident, resident and discarded pages; prefetch to the host; discard;
advice), and whether a call returns while the device is still busy with earlier kernels
(an action that waits for them stalls the training loop that issued it).

    python scripts/gpu_action_costs.py --out costs.json [--sizes 2,16,128,1024] [--reps 3]

Sizes are MiB.  Each block is a fresh ``uvm_sched.malloc`` (kept until the end, so no
repetition reuses pages another populated).  Needs a GPU and torch (the busy kernels);
CuPy, when present, adds the first touch by a kernel (``cudaMemset``) of fresh and of
discarded pages.  Nothing is oversubscribed: the blocks together stay far below the
device's free memory (checked before the first allocation).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

MiB = 1 << 20


def _timed(fn, sync) -> tuple[float, float]:
    """(seconds the call took on the host, seconds until the device finished it)."""
    sync()
    t0 = time.perf_counter()
    fn()
    t1 = time.perf_counter()
    sync()
    return t1 - t0, time.perf_counter() - t0


def _row(name: str, nbytes: int, samples: list[tuple[float, float]]) -> dict:
    call = statistics.median(s[0] for s in samples)
    done = statistics.median(s[1] for s in samples)
    return {"action": name, "bytes": nbytes, "reps": len(samples),
            "call_us": call * 1e6, "done_us": done * 1e6,
            "GBps": nbytes / done / 1e9 if done > 0 else None}


def per_size(nbytes: int, reps: int, memset) -> list[dict]:
    """The sequence of actions on ``reps`` fresh blocks of ``nbytes`` bytes."""
    import uvm_sched
    from uvm_sched import native

    sync = native.synchronize
    steps: dict[str, list] = {}
    blocks = []
    for _ in range(reps):
        p = uvm_sched.malloc(nbytes)
        blocks.append(p)
        seq = [
            ("populate (prefetch to device, fresh)", lambda: native.prefetch(p, nbytes)),
            ("prefetch to device, resident", lambda: native.prefetch(p, nbytes)),
            ("prefetch to host", lambda: native.prefetch(p, nbytes, to="host")),
            ("prefetch to device, host-resident", lambda: native.prefetch(p, nbytes)),
            ("discard, device-resident", lambda: native.discard(p, nbytes)),
            ("prefetch to device, discarded", lambda: native.prefetch(p, nbytes)),
            ("discard again, device-resident", lambda: native.discard(p, nbytes)),
        ]
        if memset is not None:
            seq += [("kernel touch (memset), discarded", lambda: memset(p, nbytes)),
                    ("discard before a populate", lambda: native.discard(p, nbytes)),
                    ("populate after that discard", lambda: native.prefetch(p, nbytes)),
                    ("kernel touch (memset), discarded then populated",
                     lambda: memset(p, nbytes))]
        seq += [
            ("prefetch to host, then", lambda: native.prefetch(p, nbytes, to="host")),
            ("discard, host-resident", lambda: native.discard(p, nbytes)),
            ("advise accessed_by", lambda: native.advise(p, nbytes, "advise_accessed_by")),
            ("unadvise accessed_by", lambda: native.advise(p, nbytes, "advise_accessed_by",
                                                          unset=True)),
        ]
        for name, fn in seq:
            steps.setdefault(name, []).append(_timed(fn, sync))
    if memset is not None:
        q = uvm_sched.malloc(nbytes)
        blocks.append(q)
        steps["kernel touch (memset), fresh"] = [_timed(lambda: memset(q, nbytes), sync)]
    for p in blocks:
        uvm_sched.free(p)
    return [_row(name, nbytes, s) for name, s in steps.items()]


def while_busy(nbytes: int) -> list[dict]:
    """Each action's host call time while ~0.3 s of matrix products are queued ahead of it
    on the legacy default stream (the executor's trigger stream in a training loop): a
    call that returns in microseconds is asynchronous; one that takes the queue's time
    waited for the kernels."""
    import torch

    import uvm_sched
    from uvm_sched import native

    a = torch.randn(8192, 8192, device="cuda")
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(4):
        a @ a
    torch.cuda.synchronize()
    per = (time.perf_counter() - t0) / 4
    n = max(1, int(0.3 / per))
    rows = []
    p = uvm_sched.malloc(nbytes)
    native.prefetch(p, nbytes)
    for name, fn in (("prefetch to host", lambda: native.prefetch(p, nbytes, to="host")),
                     ("prefetch to device", lambda: native.prefetch(p, nbytes)),
                     ("discard", lambda: native.discard(p, nbytes)),
                     ("advise accessed_by", lambda: native.advise(p, nbytes, "advise_accessed_by")),
                     ("populate after discard", lambda: native.prefetch(p, nbytes))):
        torch.cuda.synchronize()
        for _ in range(n):
            a @ a
        t1 = time.perf_counter()  # kernels queued; the call now runs behind them
        fn()
        t2 = time.perf_counter()
        torch.cuda.synchronize()
        t3 = time.perf_counter()
        rows.append({"action": name, "bytes": nbytes, "queued_s": n * per,
                     "call_us": (t2 - t1) * 1e6, "queue_left_after_call_s": t3 - t2})
    native.advise(p, nbytes, "advise_accessed_by", unset=True)
    uvm_sched.free(p)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--sizes", default="2,16,128,1024", help="MiB, comma-separated")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device: this probe needs a GPU")
    from uvm_sched import native

    torch.cuda.init()
    sizes = [int(float(s) * MiB) for s in args.sizes.split(",")]
    free, total = torch.cuda.mem_get_info()
    need = sum(sizes) * (args.reps + 2)
    if need > free // 4:
        raise SystemExit(f"the probe's blocks ({need:,} bytes) must stay under a quarter of "
                         f"the free device memory ({free:,} bytes): pass smaller --sizes")
    try:
        import cupy

        def memset(p, n):
            cupy.cuda.runtime.memsetAsync(p, 0, n, 0)
    except ImportError:
        memset = None
    rows = []
    for n in sizes:
        rows += per_size(n, args.reps, memset)
    busy = while_busy(max(sizes))
    doc = {"device": torch.cuda.get_device_name(0), "backend": native.backend(),
           "torch": torch.__version__, "rows": rows, "while_busy": busy}
    Path(args.out).write_text(json.dumps(doc, indent=1))
    for r in rows:
        g = "" if r["GBps"] is None else f"{r['GBps']:9.2f} GB/s"
        print(f"{r['bytes'] // MiB:6d} MiB  {r['action']:<40} call {r['call_us']:10.1f} us  "
              f"done {r['done_us']:10.1f} us {g}")
    for r in busy:
        left_ms = r["queue_left_after_call_s"] * 1e3
        print(f"busy {r['queued_s'] * 1e3:6.0f} ms queued  {r['action']:<28} call "
              f"{r['call_us']:10.1f} us, queue left after the call {left_ms:8.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
