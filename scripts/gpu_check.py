"""The GPU validation kit: one command that builds, tests, calibrates and measures.

    python scripts/gpu_check.py OUTDIR [--dry-run] [--oversubscribe] [--quick]
                                       [--only STEP,...] [--deadline SECONDS]

Every step runs in its own process with a time limit; a step that fails or times out is
recorded and the kit goes on, so a short GPU lease always brings back partial results.
It writes ``OUTDIR/results.json`` (every step: status, seconds, reason, data),
``OUTDIR/summary.md``, and, when calibration ran, ``OUTDIR/calibration.json`` (the input of
``HardwareProfile.recalibrated``) and ``OUTDIR/h200-pcie5.calibrated.json``.

``--dry-run`` runs the same logic on a machine without a GPU: the library step runs on the
fake CUDA driver of the native tests (``tests/native/fake_cuda.c``; ``tests/native/build/
libcuda.so.1`` when ``make -C tests/native`` has built it, else compiled into
``OUTDIR/fake_cuda/``, else the host backend: the step says which), and GPU steps report
"skipped: no GPU" with the reason.

Steps: build, library (loads the library and makes each direct driver call once: the
backend and its reason are recorded), gpu-tests, calibrate, e2e (the training runs),
predict. ``--only library,predict`` runs those alone; ``--deadline`` (seconds, default
480) bounds the whole kit: a step's time limit is cut to what is left, and a step that
would get under 10 s is recorded as skipped, so the kit ends inside one device call.

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


STEPS = ("build", "library", "gpu-tests", "calibrate", "e2e", "predict")

# What the library step runs in a fresh process: allocate, make each direct driver call
# once (the calibration's own calls), free, and report the backend and its counters.
LIBRARY_PROBE = r"""
import json, uvm_sched
from uvm_sched import native
n = 4 << 20
p = uvm_sched.malloc(n)
native.prefetch(p, n, to="device")
native.prefetch(p, n, to="host")
native.advise(p, n, "advise_accessed_by")
native.advise(p, n, "advise_accessed_by", unset=True)
try:
    native.discard(p, n)
    discard = "ok"
except native.UnsupportedError as e:
    discard = f"unsupported: {e}"
native.synchronize()
uvm_sched.free(p)
released = native.release_cached()
print(json.dumps({"backend": native.backend(), "backend_reason": native.backend_reason(),
                  "library": native.library_path(), "discard": discard,
                  "released_bytes": released, "stats": uvm_sched.stats()}, default=str))
"""


def _run(cmd: list[str], timeout: float, env: dict | None = None) -> tuple[int, str, float]:
    """Run ``cmd`` with a hard time limit; return (returncode, output tail, seconds).
    returncode 124 means the limit was hit, 127 that the program could not be started."""
    t0 = time.monotonic()
    try:
        r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True,
                           timeout=timeout)
        out = (r.stdout + r.stderr)[-6000:]
        return r.returncode, out, time.monotonic() - t0
    except OSError as e:  # the program itself is missing or not executable
        return 127, f"cannot run {cmd[0]}: {e}", time.monotonic() - t0
    except subprocess.TimeoutExpired as e:
        out = ((e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes)
               else (e.stdout or "")) + " [killed at the time limit]"
        return 124, out[-6000:], time.monotonic() - t0


class Kit:
    """Runs steps, records each one's outcome, writes the results after every step (so a
    kit killed at its outer limit still leaves what it measured)."""

    def __init__(self, out: Path, dry_run: bool, gpu_reason: str | None,
                 deadline_s: float = float("inf"), only: set[str] | None = None) -> None:
        self.out = out
        self.dry_run = dry_run
        self.gpu_reason = gpu_reason  # None = a GPU is present
        self.steps: list[dict] = []
        self.started = _dt.datetime.now(_dt.timezone.utc)
        self.t0 = time.monotonic()
        self.deadline_s = deadline_s
        self.only = only  # None = every step

    def wanted(self, step: str) -> bool:
        """Whether ``step`` (one of STEPS) runs in this invocation (``--only``)."""
        return self.only is None or step in self.only

    def time_left(self, name: str, timeout: float) -> float | None:
        """The time limit for step ``name``: ``timeout`` cut to what the kit's deadline
        leaves, or None (the step is recorded as skipped) when under 10 s are left."""
        left = self.deadline_s - (time.monotonic() - self.t0)
        if left < 10:
            self.record(name, "skipped", reason=f"skipped: kit deadline ({self.deadline_s:.0f} s) "
                                                f"reached, {max(left, 0):.0f} s left")
            return None
        return min(timeout, left)

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
        limit = self.time_left(name, timeout)
        if limit is None:
            return self.steps[-1]
        timeout = limit
        if json_out is not None:
            json_out.unlink(missing_ok=True)  # never report an earlier kit's result
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
            "only": sorted(self.only) if self.only is not None else None,
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


def fake_driver(out: Path, given: Path | None) -> tuple[Path | None, str]:
    """The fake libcuda.so.1 for a dry run, and how it was found: ``given`` (None when it
    does not exist), else the one ``make -C tests/native`` builds (if not older than its
    source), else one compiled now into ``out/fake_cuda/`` (None when no C compiler can)."""
    if given is not None:
        return (given, f"fake driver {given}") if given.exists() else (
            None, f"the fake driver {given} does not exist")
    src = REPO / "tests" / "native" / "fake_cuda.c"
    built = REPO / "tests" / "native" / "build" / "libcuda.so.1"
    if built.exists() and built.stat().st_mtime >= src.stat().st_mtime:
        return built, f"fake driver {built}"
    target = out / "fake_cuda" / "libcuda.so.1"
    target.parent.mkdir(parents=True, exist_ok=True)
    cc = os.environ.get("CC", "cc")
    cmd = [cc, "-std=c11", "-O1", "-fPIC", "-shared", "-fvisibility=hidden", "-pthread",
           "-o", str(target), str(src)]
    rc, log, _ = _run(cmd, 60)
    if rc != 0:
        last = log.strip().splitlines()[-1] if log.strip() else f"exit {rc}"
        return None, f"the fake driver is not built and {cc} could not build it ({last})"
    return target, f"fake driver {target} (compiled now: tests/native/build has none, or an old one)"


def library_step(kit: Kit, env: dict, fake_arg: Path | None) -> None:
    """Load the library in a fresh process and make each direct driver call once; record
    the backend it ran on and why."""
    lib_env = dict(env)
    how = ""
    if kit.dry_run:
        fake, how = fake_driver(kit.out, fake_arg)
        if fake is not None:
            lib_env.update(UVM_SCHED_BACKEND="cuda", UVM_SCHED_LIBCUDA=str(fake))
        else:
            lib_env.update(UVM_SCHED_BACKEND="host")
            lib_env.pop("UVM_SCHED_LIBCUDA", None)
    limit = kit.time_left("library", 60)
    if limit is None:
        return
    rc, log, secs = _run([sys.executable, "-c", LIBRARY_PROBE], limit, lib_env)
    if rc != 0:
        last = log.strip().splitlines()[-1] if log.strip() else ""
        kit.record("library", "timeout" if rc == 124 else "failed", secs,
                   f"exit {rc}: {last}" + (f" ({how})" if how else ""), None, log)
        return
    data = json.loads(log.strip().splitlines()[-1])
    reason = f"backend {data['backend']}: {data['backend_reason']}"
    if kit.dry_run and how:
        reason += f" [{how}]"
    # on a GPU the library must drive it: a host fallback there is a failure
    status = "failed" if (kit.gpu_reason is None and data["backend"] != "cuda") else "ok"
    kit.record("library", status, secs, reason, data, log)


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
                    help="fake libcuda.so.1 for --dry-run (default: tests/native/build/"
                         "libcuda.so.1, else compiled into OUTDIR/fake_cuda/)")
    ap.add_argument("--only", default=None,
                    help=f"comma-separated steps to run (of {', '.join(STEPS)})")
    ap.add_argument("--deadline", type=float, default=480.0,
                    help="seconds the whole kit may take (default 480)")
    args = ap.parse_args(argv)
    only = None
    if args.only:
        only = {x.strip() for x in args.only.split(",") if x.strip()}
        unknown = only - set(STEPS)
        if unknown:
            ap.error(f"unknown step(s) {', '.join(sorted(unknown))}; steps: {', '.join(STEPS)}")

    kit = Kit(args.out, args.dry_run, gpu_reason(args.dry_run), args.deadline, only)
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               PYTHONUNBUFFERED="1")

    # 1. build the native library in place (that machine reaches no package registry).
    if not kit.wanted("build"):
        pass
    elif args.dry_run:
        kit.record("build", "skipped", reason="dry run: the library is already built")
    else:
        kit.command_step("build", [sys.executable, "-m", "pip", "install", "-q",
                                   "--no-build-isolation", "--no-deps", "-e", "."], 240, env)

    # 2. the library loads and drives the driver (real, or in a dry run the fake one).
    if kit.wanted("library"):
        library_step(kit, env, args.fake_libcuda)

    # 3. the gpu-marked tests.
    if kit.wanted("gpu-tests") and not kit.skip_without_gpu("gpu-tests"):
        kit.command_step("gpu-tests", [sys.executable, "-m", "pytest", "-q", "-m", "gpu",
                                       "-p", "no:cacheprovider"], 200, env)

    # 4. calibration microbenchmarks -> calibration.json.
    cal_path = args.out / "calibration.json"
    if kit.wanted("calibrate") and not kit.skip_without_gpu("calibrate"):
        kit.command_step("calibrate", [sys.executable, "-m", "kernels.measure", str(cal_path)]
                         + (["--oversubscribe"] if args.oversubscribe else []), 150, env,
                         json_out=cal_path)

    # 5. end-to-end training runs, each in a fresh process (PyTorch allows one allocator swap
    #    per process, before CUDA is first used).
    steps = 8 if args.quick else 30
    for model in E2E_MODELS if kit.wanted("e2e") else ():
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
                data["loss_max_abs_diff"] = max(
                    (abs(a - b) for a, b in zip(data["losses"], default_losses)), default=0.0)
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
    if kit.wanted("predict"):
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
