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

Steps, in the order they run: the ones that prove the product come first, so a lease cut
short still brings them back: build, library (loads the library and makes each direct
driver call once: the backend and its reason are recorded), compile (one small plan and
simulation, so numba's cache holds the compiled kernels before a Scheduler needs them),
e2e (first GPT with PyTorch's allocator, then GPT under the Scheduler, at half its memory
with ``--oversubscribe``),
predict (the simulator's prediction beside those runs); then gpu-tests, calibrate (the
``kernels/`` microbenchmarks, then ``calibrate:self``: the runtime's own probe,
``uvm_sched.calibrate``, beside them in ``OUTDIR/calibration_compare.json`` and the
summary), sidebyside (``uvm-sched sidebyside``: each calibration microbenchmark beside its
simulator twin, in ``OUTDIR/sidebyside.json``; on CPU, and in a dry run, the simulated column
alone), the rest of the e2e matrix and a final predict over every run.  ``LIMITS`` holds each
step's time limit (the proving steps fit the default deadline together).  ``--only
library,predict`` runs those alone; ``--deadline`` (seconds, default 480) bounds the whole
kit: a step's time limit is cut to what is left, and a step that would get under 10 s is
recorded as skipped, so the kit ends inside one device call.

A step never crashes the kit: it passes (``ok``), fails with the reason, times out, or is
skipped with the reason — no GPU, or the packages it needs that this Python lacks (a GPU
image may have only torch, numpy and this project installed with ``--no-deps``; a step
that stops on a missing module is recorded the same way).  Each step runs in a process
group of its own, killed whole at its limit (pytest's or a training run's children
included), and reports through a JSON file, never by parsing its output.

Oversubscription (asking for more managed memory than the device has free) is off unless
``--oversubscribe`` is given: some shared GPU machines forbid it because a driver that
thrashes can hang the device for everyone. Without it the end-to-end runs measure numerics,
tracing overhead and planner behaviour at full device size, the budgeted runs are reported
as skipped with that reason, and each Scheduler's budgeted run is made instead with the
device not shrunk (``:plan50``, ``gpu_e2e.py --no-shrink``): the plan's evictions and
prefetches run for real, and nothing asks for more managed memory than is free.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import importlib.util
import json
import os
import platform
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

# Sizes of the end-to-end runs: (model, batch, seq/image) chosen so that one step takes
# tens of ms on an H200 and the whole matrix of runs fits in the kit's 8-minute budget.
E2E_MODELS = ("gpt", "resnet")
# default: PyTorch's own allocator (the ideal); uvm: our allocator, tracing on, no plan (demand
# paging; with no budget this measures the tracing overhead); uvm-<mode>: the Scheduler.
E2E_MODES = ("default", "uvm", "uvm-oblivious", "uvm-sampled")


STEPS = ("build", "library", "compile", "gpu-tests", "calibrate", "sidebyside", "e2e", "predict")

# Time limit of each step (seconds), before the deadline cuts it.  The proving steps
# (build, library, compile, the first two e2e runs, predict) add up to the default
# deadline, 480 s; test_gpu_kit checks that sum.
LIMITS = {"build": 90, "library": 30, "compile": 150, "e2e": 60, "e2e-budget": 90, "predict": 60,
          "gpu-tests": 90, "calibrate": 120, "calibrate:self": 60, "sidebyside": 60}
PROVING = ("build", "library", "compile", "e2e", "e2e-budget", "predict")
# A Scheduler's run trains on until ARMED_STEPS steps ran with its plan armed; E2E_SETUP_S
# of its step's limit are kept for the process start, the model build and the result file.
ARMED_STEPS, E2E_SETUP_S = 10, 35
LOG_MAX_CHARS = 1 << 20  # of a step's output kept in OUTDIR/logs/STEP.log

# The packages each step imports (beyond the standard library and numpy); a step whose
# packages are missing is skipped and says which.
NEEDS = {"build": ("pip", "setuptools"), "library": (), "compile": ("pandas",),
         "gpu-tests": ("pytest", "torch"),
         "calibrate": ("numba",), "sidebyside": ("pandas", "rich"), "e2e": ("torch",),
         "predict": ("torch", "pandas")}

# The gpu-marked tests live in these modules; collecting only them keeps a module that
# needs hypothesis or pandas from stopping the collection (and the rest run even so:
# --continue-on-collection-errors).
GPU_TEST_FILES = ("tests/test_gpu_e2e.py", "tests/test_gpu_kernels.py",
                  "tests/test_gpu_measure.py", "tests/test_native_conformance.py",
                  "tests/test_integrations.py", "tests/test_cupti_faults.py")

# Does numba's CUDA target find libNVVM (calibration compiles its kernels with it)?  torch's
# cu130 wheels bring no libNVVM: numba-cuda's [cu13] extra does (cuda-toolkit[nvvm]).
NVVM_PROBE = r"""
from numba.cuda.cudadrv import nvvm
nvvm.NVVM()
"""

# What the library step runs in a fresh process: allocate, make each direct driver call
# once (the calibration's own calls), free, and report the backend and its counters in
# the JSON file named by argv[1].
LIBRARY_PROBE = r"""
import json, sys, uvm_sched
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
doc = {"backend": native.backend(), "backend_reason": native.backend_reason(),
       "library": native.library_path(), "discard": discard,
       "released_bytes": released, "stats": uvm_sched.stats()}
open(sys.argv[1], "w").write(json.dumps(doc, default=str))
"""

# What the compile step runs in a fresh process: `uvm-sched warmup`'s work (one plan and
# simulation per planning mode of a small generated trace), its seconds in the JSON file
# named by argv[1].
COMPILE_PROBE = r"""
import json, sys
from uvm_sched._warmup import compile_kernels
open(sys.argv[1], "w").write(json.dumps(compile_kernels()))
"""

# What calibrate:self runs in a fresh process: the runtime's probe (no numba), its figures
# in the JSON file named by argv[1].
SELF_CALIBRATION_PROBE = r"""
import json, sys
from uvm_sched._calibrate import measure
open(sys.argv[1], "w").write(json.dumps(measure(0, 200)))
"""

# kernels.measure's profile field -> the same figure in uvm_sched.calibrate's
CALIBRATION_PAIRS = {"h2d_prefetch_Bps": "h2d_Bps", "d2h_prefetch_Bps": "d2h_Bps",
                     "fault_batch_latency_s": "fault_batch_s",
                     "remote_access_Bps": "remote_Bps", "duplex_Bps": "duplex_Bps"}


def calibration_table(kernels: dict | None, probe: dict) -> list[dict]:
    """One row per figure: ``kernels.measure``'s (None when it did not run or does not
    measure it), ``uvm_sched.calibrate``'s, and their ratio probe / kernels."""
    fields = (kernels or {}).get("fields", {})
    rows = []
    for field, key in CALIBRATION_PAIRS.items():
        k, p = fields.get(field), probe.get(key)
        rows.append({"figure": field, "kernels": k, "calibrate": p,
                     "ratio": p / k if k and p else None})
    return rows


def missing(packages) -> list[str]:
    """The ones of ``packages`` (import names) this Python cannot import."""
    out = []
    for p in packages:
        try:
            if importlib.util.find_spec(p) is None:
                out.append(p)
        except (ImportError, ValueError):
            out.append(p)
    return out


_NO_MODULE = re.compile(r"ModuleNotFoundError: No module named '([^'.]+)")


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # already gone


def _run(cmd: list[str], timeout: float, env: dict | None = None) -> tuple[int, str, float]:
    """Run ``cmd`` with a hard time limit in a process group of its own; return
    (returncode, output tail, seconds).  returncode 124 means the limit was hit, 127 that
    the program could not be started.  At the limit, and after the command ends, the whole
    group is killed: a child it left behind (pytest's workers, a training run's data
    loaders) must not hold the GPU while the next step runs."""
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, errors="replace",
                                start_new_session=True)
    except OSError as e:  # the program itself is missing or not executable
        return 127, f"cannot run {cmd[0]}: {e}", time.monotonic() - t0
    try:
        out, _ = proc.communicate(timeout=timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid)
        out, _ = proc.communicate()
        out, rc = (out or "") + " [killed at the time limit]", 124
    _kill_group(proc.pid)
    return rc, (out or "")[-LOG_MAX_CHARS:], time.monotonic() - t0


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
        out.mkdir(parents=True, exist_ok=True)

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
        if log:  # the whole output beside the results: a failing test's traceback is
            # rarely in the last 2,000 characters
            path = self.out / "logs" / (re.sub(r"[^A-Za-z0-9_.-]", "_", name) + ".log")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(log)
            step["log_file"] = str(path.relative_to(self.out))
        self.steps.append(step)
        self.write()
        print(f"[{status:>7}] {name} ({seconds:.1f} s) {reason}", flush=True)
        return step

    def skip_without_gpu(self, name: str, step: str | None = None) -> bool:
        """Record ``name`` as skipped when there is no GPU (the packages its step kind
        needs that are missing are named too, so a dry run shows what a GPU run would
        lack)."""
        if self.gpu_reason is None:
            return False
        lack = missing(NEEDS.get(step or name, ()))
        self.record(name, "skipped", reason=f"skipped: no GPU ({self.gpu_reason})"
                    + (f"; would also need missing package(s): {', '.join(lack)}" if lack else ""))
        return True

    def skip_without_packages(self, name: str, step: str | None = None,
                              extra: tuple[str, ...] = ()) -> bool:
        """Record ``name`` as skipped when a package its step kind needs is missing."""
        lack = missing(NEEDS.get(step or name, ()) + extra)
        if not lack:
            return False
        self.record(name, "skipped", reason=f"skipped: missing package(s) {', '.join(lack)} "
                                             f"(pip install {' '.join(lack)})")
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
            gone = _NO_MODULE.findall(log)
            if gone:
                return self.record(name, "skipped", secs,
                                   f"skipped: missing package {gone[-1]} (exit {rc}; "
                                   f"pip install {gone[-1]})", data, log)
            last = log.strip().splitlines()[-1] if log.strip() else ""
            return self.record(name, "failed", secs, f"exit {rc}: {last}", data, log)
        return self.record(name, "ok", secs, "", data, log)

    def guarded(self, name: str, fn, *args) -> None:
        """Run one step function; an error of the kit itself is that step's failure,
        never the end of the kit."""
        try:
            fn(*args)
        except Exception as e:  # noqa: BLE001 - recorded with its type and text
            self.record(name, "failed", reason=f"kit error: {type(e).__name__}: {e}")

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
                  "| run | ms/iteration (median) | steps timed (armed from) | peak device bytes "
                  "| final loss | loss = default |",
                  "|---|---|---|---|---|---|"]
        for s in e2e:
            d = s["data"]
            armed = d.get("armed_from")
            timed = f"{d.get('measured_steps', '')}" + (
                f" (step {armed})" if armed is not None
                else " (never armed)" if "scheduler" in d else "")
            lines.append(f"| {s['name'][4:]} | {d.get('iter_ms_median', float('nan')):.2f} | "
                         f"{timed} | "
                         f"{d.get('peak_device_bytes', 0):,} | {d.get('losses', [None])[-1]} | "
                         f"{d.get('loss_matches_default', '')} |")
    cal = [s for s in doc["steps"] if s["name"] == "calibrate" and s["data"]]
    if cal:
        lines += ["", "## Calibration", "", "| field | value |", "|---|---|"]
        for k, v in cal[0]["data"].get("fields", {}).items():
            lines.append(f"| {k} | {v:.4g} |")
    own = [s for s in doc["steps"] if s["name"] == "calibrate:self" and s["data"]]
    if own and own[0]["data"].get("table"):
        lines += ["", "## kernels.measure beside uvm_sched.calibrate", "",
                  "| figure | kernels.measure | uvm_sched.calibrate | ratio |", "|---|---|---|---|"]
        for r in own[0]["data"]["table"]:
            cells = ["" if r[c] is None else f"{r[c]:.4g}" for c in ("kernels", "calibrate")]
            ratio = "" if r["ratio"] is None else f"{r['ratio']:.2f}"
            lines.append(f"| {r['figure']} | {cells[0]} | {cells[1]} | {ratio} |")
    sbs = [s for s in doc["steps"] if s["name"] == "sidebyside" and s["data"]]
    if sbs:
        lines += ["", "## Microbenchmarks beside their simulator twins "
                  f"(measured: {sbs[0]['data'].get('measured_source')})", "",
                  "| scenario | unit | measured | simulated | ratio |", "|---|---|---|---|---|"]
        gpu = sbs[0]["data"].get("measured_file") is not None
        for row in sbs[0]["data"].get("rows", []):
            m, r = row.get("measured"), row.get("ratio")
            shown = f"{m:.4g}" if m is not None else "not measured" if gpu else "no GPU"
            lines.append(f"| {row['scenario']} | {row['unit']} | {shown} | "
                         f"{row['simulated']:.4g} | "
                         f"{'' if r is None else f'{r:.2f}'} |")
    pred = [s for s in doc["steps"] if s["name"] in ("predict", "predict:all") and s["data"]]
    if pred:
        # predicted with the roofline as compute, and with the default run's measured
        # iteration times as compute (where that run was made)
        lines += ["", "## Simulator prediction beside measurement", "",
                  "| run | predicted ms | measured ms | ratio | predicted ms, measured compute "
                  "| ratio |", "|---|---|---|---|---|---|"]
        for row in pred[-1]["data"].get("rows", []):
            m, p = row.get("measured_ms"), row["predicted_ms"]
            q = row.get("predicted_ms_measured_compute")
            measured = "" if m is None else f"{m:.2f}"
            ratio = "" if m is None else f"{p / m:.2f}"
            timed = "" if q is None else f"{q:.2f}"
            ratio_q = "" if m is None or q is None else f"{q / m:.2f}"
            lines.append(f"| {row['run']} | {p:.2f} | {measured} | {ratio} | {timed} | "
                         f"{ratio_q} |")
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
    src = REPO / "tests" / "native" / "fake_cuda.c"  # it includes fake_clock.h beside it
    newest = max(p.stat().st_mtime for p in (src, src.with_name("fake_clock.h")) if p.exists())
    built = REPO / "tests" / "native" / "build" / "libcuda.so.1"
    if built.exists() and built.stat().st_mtime >= newest:
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
    limit = kit.time_left("library", LIMITS["library"])
    if limit is None:
        return
    res = kit.out / "library.json"
    res.unlink(missing_ok=True)
    rc, log, secs = _run([sys.executable, "-c", LIBRARY_PROBE, str(res)], limit, lib_env)
    try:
        data = json.loads(res.read_text()) if rc == 0 else None
    except (OSError, json.JSONDecodeError) as e:
        rc, log = 1, log + f"\nno result from the probe: {e}"
        data = None
    if data is None:
        last = log.strip().splitlines()[-1] if log.strip() else ""
        kit.record("library", "timeout" if rc == 124 else "failed", secs,
                   f"exit {rc}: {last}" + (f" ({how})" if how else ""), None, log)
        return
    reason = f"backend {data['backend']}: {data['backend_reason']}"
    if kit.dry_run and how:
        reason += f" [{how}]"
    # on a GPU the library must drive it: a host fallback there is a failure
    status = "failed" if (kit.gpu_reason is None and data["backend"] != "cuda") else "ok"
    kit.record("library", status, secs, reason, data, log)


def parse_args(argv=None) -> tuple[argparse.Namespace, set[str] | None]:
    """The command line: (the options, the steps ``--only`` names or None for all)."""
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
    return args, only


class Steps:
    """The kit's steps other than the library probe, one method each, sharing the options,
    the environment of the child processes and the default runs' losses (which the other
    runs of a model are compared with)."""

    def __init__(self, kit: Kit, args: argparse.Namespace) -> None:
        self.kit, self.args = kit, args
        self.env = dict(os.environ,
                        PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
                        PYTHONUNBUFFERED="1")
        self.cal_path = args.out / "calibration.json"
        self.steps = 8 if args.quick else 30
        self.e2e_done: dict[str, list | None] = {}  # model -> the default run's losses

    def build(self) -> None:
        # the library, built in place (that machine reaches no package registry)
        kit = self.kit
        if self.args.dry_run:
            kit.record("build", "skipped", reason="dry run: the library is already built")
        elif not kit.skip_without_packages("build"):
            kit.command_step("build", [sys.executable, "-m", "pip", "install", "-q",
                                       "--no-build-isolation", "--no-deps", "-e", "."],
                             LIMITS["build"], self.env)

    def compile(self) -> None:
        """Plan and simulate a small generated trace once, so the planner's and the
        simulator's compiled kernels are in numba's cache before the Scheduler's helper
        process needs them (on a fresh machine, compiling them kept the first plan from
        arming for 300 ResNet-50 steps: results/gpu_h200.md); the step's seconds are that
        first-run cost."""
        if self.kit.skip_without_packages("compile"):
            return
        res = self.args.out / "compile.json"
        self.kit.command_step("compile", [sys.executable, "-c", COMPILE_PROBE, str(res)],
                              LIMITS["compile"], self.env, json_out=res)

    def e2e(self, model: str, mode: str, budget: bool = False, shrink: bool = True) -> None:
        """One training run; ``budget``: at 50% of the default run's peak, on a device
        shrunk to it (oversubscribed) or, with ``shrink=False``, the plan's moves alone."""
        kit, args = self.kit, self.args
        suffix = ("_budget50" if shrink else "_plan50") if budget else ""
        name = f"e2e:{model}:{mode}" + suffix.replace("_", ":")
        if kit.skip_without_gpu(name, "e2e") or kit.skip_without_packages(name, "e2e"):
            return
        res = args.out / f"e2e_{model}_{mode}{suffix}.json"
        cmd = [sys.executable, "scripts/gpu_e2e.py", "--model", model, "--mode", mode,
               "--steps", str(self.steps), "--out", str(res)]
        cmd += (["--budget", "50%"] + ([] if shrink else ["--no-shrink"])) if budget else []
        limit = LIMITS["e2e-budget" if budget else "e2e"]
        if mode.startswith("uvm-"):
            # the plan is made in the background: train on until it ran armed a while, with
            # time left inside the step's limit to start, build the model and write
            cmd += ["--armed-steps", str(ARMED_STEPS), "--time-limit", str(limit - E2E_SETUP_S)]
        step = kit.command_step(name, cmd, limit, self.env, json_out=res)
        data = step["data"] or {}
        done = self.e2e_done
        if mode == "default":
            done[model] = data.get("losses")
        elif done.get(model) is not None and "losses" in data:
            # where the bytes live never changes the arithmetic: every run's losses equal
            # the default run's, budgeted ones included
            data["loss_matches_default"] = data["losses"] == done[model]
            data["loss_max_abs_diff"] = max(
                (abs(a - b) for a, b in zip(data["losses"], done[model])), default=0.0)
            kit.write()

    def budgeted(self, model: str, mode: str) -> None:
        kit = self.kit
        if self.args.oversubscribe and kit.gpu_reason is None:
            self.e2e(model, mode, budget=True)
        elif kit.gpu_reason is None:
            kit.record(f"e2e:{model}:{mode}:budget50", "skipped",
                       reason="oversubscription not allowed (pass --oversubscribe)")
            if mode != "uvm":  # demand paging has no plan to run without oversubscription
                self.e2e(model, mode, budget=True, shrink=False)

    def predict(self, name: str) -> None:
        # the simulator's prediction for the runs so far (runs on CPU too)
        if self.kit.skip_without_packages(name, "predict"):
            return
        pred = self.args.out / "prediction.json"
        cmd = [sys.executable, "scripts/gpu_e2e.py", "--predict", "--out", str(pred),
               "--results", str(self.args.out)]
        if self.cal_path.exists():
            cmd += ["--calibration", str(self.cal_path)]
        self.kit.command_step(name, cmd, LIMITS["predict"], self.env, json_out=pred)

    def gpu_tests(self) -> None:
        kit = self.kit
        if kit.skip_without_gpu("gpu-tests") or kit.skip_without_packages("gpu-tests"):
            return
        files = [f for f in GPU_TEST_FILES if (REPO / f).exists()]
        kit.command_step("gpu-tests", [sys.executable, "-m", "pytest", "-q", "-rA", "-m", "gpu",
                                       "-p", "no:cacheprovider",
                                       "--continue-on-collection-errors", *files],
                         LIMITS["gpu-tests"], self.env)

    def calibrate(self) -> None:
        kit = self.kit
        if kit.skip_without_gpu("calibrate") or kit.skip_without_packages("calibrate"):
            return
        rc, log, secs = _run([sys.executable, "-c", NVVM_PROBE], 60, self.env)
        if rc != 0:
            last = log.strip().splitlines()[-1] if log.strip() else f"exit {rc}"
            kit.record("calibrate", "skipped", secs,
                       f"skipped: numba finds no libNVVM to compile the kernels ({last}); "
                       "pip install 'numba-cuda[cu13]' (it brings cuda-toolkit[nvvm]; "
                       "torch's cu130 wheels bring no libNVVM)",
                       log=log)
            return
        kit.command_step("calibrate", [sys.executable, "-m", "kernels.measure", str(self.cal_path)]
                         + (["--oversubscribe"] if self.args.oversubscribe else []),
                         LIMITS["calibrate"], self.env, json_out=self.cal_path)

    def sidebyside(self) -> None:
        # each kernels/ microbenchmark beside its simulator twin (runs on CPU too: without
        # a calibration the measured column reads "no GPU")
        if self.kit.skip_without_packages("sidebyside"):
            return
        dest = self.args.out / "sidebyside.json"
        cmd = [sys.executable, "-m", "uvm_sched", "sidebyside", "-o", str(dest)]
        if self.cal_path.exists():
            cmd += ["--measured", str(self.cal_path)]
        self.kit.command_step("sidebyside", cmd, LIMITS["sidebyside"], self.env, json_out=dest)

    def self_calibrate(self) -> None:
        """The runtime's probe beside kernels.measure (when it ran): the table of both."""
        kit, out = self.kit, self.args.out / "self_calibration.json"
        if kit.skip_without_gpu("calibrate:self", "library"):
            return
        step = kit.command_step("calibrate:self", [sys.executable, "-c",
                                                   SELF_CALIBRATION_PROBE, str(out)],
                                LIMITS["calibrate:self"], self.env, json_out=out)
        if step["status"] == "ok" and step["data"]:
            kernels = json.loads(self.cal_path.read_text()) if self.cal_path.exists() else None
            step["data"] = {"figures": step["data"],
                            "table": calibration_table(kernels, step["data"])}
            (self.args.out / "calibration_compare.json").write_text(
                json.dumps(step["data"]["table"], indent=1))
            kit.write()

    def plan(self) -> list[tuple[str, str, Any, tuple]]:
        """(name, the step it belongs to, function, arguments) in the order they run: the
        proving steps first, then the GPU tests, calibration and the rest of the e2e matrix."""
        first = E2E_MODELS[0]
        plan: list[tuple[str, str, Any, tuple]] = []
        plan += [("build", "build", self.build, ()),
                 ("library", "library", library_step, (self.kit, self.env, self.args.fake_libcuda)),
                 ("compile", "compile", self.compile, ())]
        plan += [(f"e2e:{first}:default", "e2e", self.e2e, (first, "default")),
                 (f"e2e:{first}:uvm-oblivious:budget50", "e2e", self.budgeted,
                  (first, "uvm-oblivious")),
                 ("predict", "predict", self.predict, ("predict",))]
        plan += [("gpu-tests", "gpu-tests", self.gpu_tests, ()),
                 ("calibrate", "calibrate", self.calibrate, ()),
                 ("calibrate:self", "calibrate", self.self_calibrate, ()),
                 ("sidebyside", "sidebyside", self.sidebyside, ())]
        for model in E2E_MODELS:
            for mode in E2E_MODES:
                if (model, mode) != (first, "default"):
                    plan.append((f"e2e:{model}:{mode}", "e2e", self.e2e, (model, mode)))
            for mode in ("uvm", "uvm-oblivious"):
                if (model, mode) != (first, "uvm-oblivious"):
                    plan.append((f"e2e:{model}:{mode}:budget50", "e2e", self.budgeted,
                                 (model, mode)))
        return plan


def main(argv=None) -> int:
    args, only = parse_args(argv)
    kit = Kit(args.out, args.dry_run, gpu_reason(args.dry_run), args.deadline, only)
    steps = Steps(kit, args)
    for name, step, fn, fargs in steps.plan():
        if kit.wanted(step):
            kit.guarded(name, fn, *fargs)
    # the prediction again, beside every run the kit made after the first one
    ran = {s["name"] for s in kit.steps if s["name"].startswith("e2e:") and s["status"] == "ok"}
    if kit.wanted("predict") and len(ran) > 2:
        kit.guarded("predict:all", steps.predict, "predict:all")
    kit.write()
    print(f"wrote {args.out / 'results.json'} and {args.out / 'summary.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
