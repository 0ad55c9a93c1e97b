"""The GPU validation kit: one command that builds, tests, calibrates and measures.

    python scripts/gpu_check.py OUTDIR [--dry-run] [--oversubscribe] [--quick]

Every step runs in its own process with a time limit; a step that fails or times out is
recorded and the kit goes on, so a short GPU lease always brings back partial results.
It writes ``OUTDIR/results.json`` (every step: status, seconds, reason, data),
``OUTDIR/summary.md``, and, when calibration ran, ``OUTDIR/calibration.json`` (the input of
``HardwareProfile.recalibrated``) and ``OUTDIR/h200-pcie5.calibrated.json``.

``--dry-run`` runs the same logic on a machine without a GPU, against the fake driver the
tests build (``UVM_SCHED_LIBCUDA``): GPU steps report "skipped: no GPU" with the reason.

Oversubscription (asking for more managed memory than the device has free) is off unless
``--oversubscribe`` is given: some shared GPU machines forbid it because a driver that
thrashes can hang the device for everyone. Without it the end-to-end runs measure numerics,
tracing overhead and planner behaviour at full device size, and the budgeted runs are
reported as skipped with that reason.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Sizes of the end-to-end runs: (model, batch, seq/image) chosen so that one step takes
# tens of ms on an H200 and the whole matrix of runs fits in the kit's 8-minute budget.
E2E_MODELS = ("gpt", "resnet")
# default: PyTorch's own allocator (the ideal); uvm: our allocator, tracing on, no plan (demand
# paging; with no budget this measures the tracing overhead); uvm-<mode>: the Scheduler.
E2E_MODES = ("default", "uvm", "uvm-oblivious", "uvm-sampled")


def _run(cmd: list[str], timeout: float, env: dict | None = None) -> tuple[int, str, float]:
    """Run ``cmd`` with a hard time limit; return (returncode, output tail, seconds).
    returncode 124 means the limit was hit."""
    t0 = time.monotonic()
    try:
        r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True,
                           timeout=timeout)
        out = (r.stdout + r.stderr)[-6000:]
        return r.returncode, out, time.monotonic() - t0
    except subprocess.TimeoutExpired as e:
        out = ((e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes)
               else (e.stdout or "")) + " [killed at the time limit]"
        return 124, out[-6000:], time.monotonic() - t0


class Kit:
    """Runs steps, records each one's outcome, writes the results after every step (so a
    kit killed at its outer limit still leaves what it measured)."""

    def __init__(self, out: Path, dry_run: bool, gpu_reason: str | None) -> None:
        self.out = out
        self.dry_run = dry_run
        self.gpu_reason = gpu_reason  # None = a GPU is present
        self.steps: list[dict] = []
        self.started = _dt.datetime.now(_dt.timezone.utc)

    def record(self, name: str, status: str, seconds: float = 0.0, reason: str = "",
               data=None, log: str = "") -> dict:
        step = {"name": name, "status": status, "seconds": round(seconds, 2),
                "reason": reason, "data": data, "log_tail": log[-2000:]}
        self.steps.append(step)
        self.write()
        print(f"[{status:>7}] {name} ({seconds:.1f} s) {reason}", flush=True)
        return step

    def skip_without_gpu(self, name: str) -> bool:
        if self.gpu_reason is None:
            return False
        self.record(name, "skipped", reason=f"skipped: no GPU ({self.gpu_reason})")
        return True

    def command_step(self, name: str, cmd: list[str], timeout: float, env=None,
                     json_out: Path | None = None) -> dict:
        rc, log, secs = _run(cmd, timeout, env)
        data = None
        if json_out is not None and json_out.exists():
            try:
                data = json.loads(json_out.read_text())
            except json.JSONDecodeError as e:
                return self.record(name, "failed", secs, f"unreadable result file: {e}", log=log)
        if rc == 124:
            return self.record(name, "timeout", secs, f"killed after {timeout:.0f} s", data, log)
        if rc != 0:
            last = log.strip().splitlines()[-1] if log.strip() else ""
            return self.record(name, "failed", secs, f"exit {rc}: {last}", data, log)
        return self.record(name, "ok", secs, "", data, log)

    def write(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        doc = {
            "started": self.started.isoformat(timespec="seconds"),
            "dry_run": self.dry_run,
            "gpu": self.gpu_reason is None,
            "gpu_reason": self.gpu_reason,
            "machine": {"python": platform.python_version(), "node": platform.node(),
                        "processor": platform.machine()},
            "commit": _git_commit(),
            "steps": self.steps,
        }
        (self.out / "results.json").write_text(json.dumps(doc, indent=1, default=str))
        (self.out / "summary.md").write_text(summary_markdown(doc))


def _git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                              capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def summary_markdown(doc: dict) -> str:
    """The human summary of a results.json document."""
    lines = [f"# GPU validation kit — {doc['started']}", "",
             f"commit `{doc['commit']}`; GPU: {'yes' if doc['gpu'] else 'no'}"
             + ("" if doc["gpu"] else f" ({doc['gpu_reason']})")
             + ("; **dry run**" if doc["dry_run"] else ""), "",
             "| step | status | seconds | note |", "|---|---|---|---|"]
    for s in doc["steps"]:
        lines.append(f"| {s['name']} | {s['status']} | {s['seconds']} | {s['reason']} |")
    e2e = [s for s in doc["steps"] if s["name"].startswith("e2e:") and s["data"]]
    if e2e:
        lines += ["", "## End-to-end runs", "",
                  "| run | ms/iteration (median) | peak device bytes | final loss | loss = default |",
                  "|---|---|---|---|---|"]
        for s in e2e:
            d = s["data"]
            lines.append(f"| {s['name'][4:]} | {d.get('iter_ms_median', float('nan')):.2f} | "
                         f"{d.get('peak_device_bytes', 0):,} | {d.get('losses', [None])[-1]} | "
                         f"{d.get('loss_matches_default', '')} |")
    cal = [s for s in doc["steps"] if s["name"] == "calibrate" and s["data"]]
    if cal:
        lines += ["", "## Calibration", "", "| field | value |", "|---|---|"]
        for k, v in cal[0]["data"].get("fields", {}).items():
            lines.append(f"| {k} | {v:.4g} |")
    pred = [s for s in doc["steps"] if s["name"] == "predict" and s["data"]]
    if pred:
        lines += ["", "## Simulator prediction beside measurement", "",
                  "| run | predicted ms | measured ms | ratio |", "|---|---|---|---|"]
        for row in pred[0]["data"].get("rows", []):
            m, p = row.get("measured_ms"), row["predicted_ms"]
            measured = "" if m is None else f"{m:.2f}"
            ratio = "" if m is None else f"{p / m:.2f}"
            lines.append(f"| {row['run']} | {p:.2f} | {measured} | {ratio} |")
    return "\n".join(lines) + "\n"


def gpu_reason(dry_run: bool) -> str | None:
    """None when a usable CUDA device is present, else why not."""
    if dry_run:
        return "dry run requested"
    probe = ("import torch,sys; ok=torch.cuda.is_available(); "
             "print(torch.cuda.get_device_name(0) if ok else 'torch sees no CUDA device'); "
             "sys.exit(0 if ok else 3)")
    rc, out, _ = _run([sys.executable, "-c", probe], 120)
    if rc == 0:
        return None
    return out.strip().splitlines()[-1] if out.strip() else f"probe exited {rc}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path, help="directory for results.json, summary.md, calibration.json")
    ap.add_argument("--dry-run", action="store_true",
                    help="no GPU: run the kit's logic against the fake driver, skip GPU steps")
    ap.add_argument("--oversubscribe", action="store_true",
                    help="allow budgeted runs that ask for more managed memory than is free")
    ap.add_argument("--quick", action="store_true", help="fewer training steps (smoke test)")
    ap.add_argument("--fake-libcuda", type=Path, default=None,
                    help="fake libcuda.so.1 for --dry-run (default: built by scripts/native_tests.sh)")
    args = ap.parse_args(argv)

    kit = Kit(args.out, args.dry_run, gpu_reason(args.dry_run))
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               PYTHONUNBUFFERED="1")

    # 1. build the native library in place (that machine reaches no package registry).
    if args.dry_run:
        kit.record("build", "skipped", reason="dry run: the library is already built")
    else:
        kit.command_step("build", [sys.executable, "-m", "pip", "install", "-q",
                                   "--no-build-isolation", "--no-deps", "-e", "."], 240, env)

    # 2. the library loads, on the real driver or (dry run) the fake one.
    lib_env = dict(env)
    if args.dry_run:
        fake = args.fake_libcuda or REPO / "tests" / "native" / "build" / "libcuda.so.1"
        if fake.exists():
            lib_env.update(UVM_SCHED_BACKEND="cuda", UVM_SCHED_LIBCUDA=str(fake))
    probe = ("import json, uvm_sched; p=uvm_sched.malloc(1<<20); uvm_sched.free(p); "
             "print(json.dumps({'backend': uvm_sched.backend(), 'library': uvm_sched.library_path(),"
             " 'stats': uvm_sched.stats()}, default=str))")
    rc, log, secs = _run([sys.executable, "-c", probe], 60, lib_env)
    if rc == 0:
        kit.record("library", "ok", secs, "", json.loads(log.strip().splitlines()[-1]), log)
    else:
        kit.record("library", "failed", secs, f"exit {rc}", None, log)

    # 3. the gpu-marked tests.
    if not kit.skip_without_gpu("gpu-tests"):
        kit.command_step("gpu-tests", [sys.executable, "-m", "pytest", "-q", "-m", "gpu",
                                       "-p", "no:cacheprovider"], 150, env)

    # 4. calibration microbenchmarks -> calibration.json.
    cal_path = args.out / "calibration.json"
    if not kit.skip_without_gpu("calibrate"):
        kit.command_step("calibrate", [sys.executable, "-m", "kernels.measure", str(cal_path)]
                         + (["--oversubscribe"] if args.oversubscribe else []), 150, env,
                         json_out=cal_path)

    # 5. end-to-end training runs, each in a fresh process (PyTorch allows one allocator swap
    #    per process, before CUDA is first used).
    steps = 8 if args.quick else 30
    for model in E2E_MODELS:
        default_losses = None
        for mode in E2E_MODES:
            name = f"e2e:{model}:{mode}"
            if kit.skip_without_gpu(name):
                continue
            res = args.out / f"e2e_{model}_{mode}.json"
            cmd = [sys.executable, "scripts/gpu_e2e.py", "--model", model, "--mode", mode,
                   "--steps", str(steps), "--out", str(res)]
            step = kit.command_step(name, cmd, 120, env, json_out=res)
            data = step["data"] or {}
            if mode == "default":
                default_losses = data.get("losses")
            elif default_losses is not None and "losses" in data:
                data["loss_matches_default"] = data["losses"] == default_losses
                kit.write()
        if args.oversubscribe and kit.gpu_reason is None:
            for mode in ("uvm", "uvm-oblivious"):
                name = f"e2e:{model}:{mode}:budget50"
                res = args.out / f"e2e_{model}_{mode}_budget50.json"
                kit.command_step(name, [sys.executable, "scripts/gpu_e2e.py", "--model", model,
                                        "--mode", mode, "--steps", str(steps), "--budget", "50%",
                                        "--out", str(res)], 150, env, json_out=res)
        elif kit.gpu_reason is None:
            kit.record(f"e2e:{model}:budget50", "skipped",
                       reason="oversubscription not allowed (pass --oversubscribe)")

    # 6. the simulator's prediction for the same runs (runs on CPU too).
    pred = args.out / "prediction.json"
    cmd = [sys.executable, "scripts/gpu_e2e.py", "--predict", "--out", str(pred),
           "--results", str(args.out)]
    if cal_path.exists():
        cmd += ["--calibration", str(cal_path)]
    kit.command_step("predict", cmd, 180, env, json_out=pred)
    kit.write()
    print(f"wrote {args.out / 'results.json'} and {args.out / 'summary.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
