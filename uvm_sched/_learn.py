"""Learning and planning for the runtime, off the training thread.

``learn(request)`` turns recorded allocator events into a plan (trace, pattern, plan, the
tuning candidates' plans): seconds of work on an LLM-sized iteration. The ``Scheduler``
must not stall the training loop for that, and a Python thread would not do: while it
holds the GIL, every ctypes call of the loop (each malloc and free releases and retakes the
GIL) waits up to the interpreter's switch interval (5 ms), so the loop would crawl while it
plans. So ``Worker`` runs ``learn`` in a helper process by default (``kind="process"``):
one per Python process, started on first use with the interpreter running the
training loop (``python -c``: it imports only uvm_sched's trace/pattern/planner, never the
user's script, unlike multiprocessing's spawn), fed over pipes with pickle protocol 5 (the
event arrays go out of band, written from a helper thread that releases the GIL while it
writes). ``kind="thread"`` runs ``learn`` in the helper thread itself (no second process;
for environments that forbid one); if the process cannot be started, the worker falls
back to that with a logged warning.

Note [The first plan on a cold kernel cache]
The planner and the simulator run numba kernels, compiled into numba's cache the first time
they run: about two minutes on a fresh install (``uvm-sched warmup`` does it ahead), during
which a helper that plans with them gives nothing; on a fresh GPU machine no plan armed within
300 ResNet-50 steps. Their plain-Python references give the same plans (the agreement
tests), as fast as the compiled kernels on a CNN's few thousand events per iteration and ten
times slower on an LLM's hundreds of thousands. Which one finishes first is not known ahead
(the cache may be warm, the trace long), so the worker does not guess. Its helper compiles
every kernel as soon as it starts (``compile_kernels``: seconds on a warm cache); a request
that comes before that is done goes to a stand-in helper started with the plain-Python
kernels, and whichever answers first wins: the stand-in's plan, or the compiled helper's
"ready", after which the stand-in is killed and the request goes to the compiled helper.
The first plan thus costs at most what it cost before (the compile, then the compiled plan)
and, where the references are quick, seconds. The answer says which kernels made it
(``kernels``: "compiled" or "python").
"""
from __future__ import annotations

import atexit
import logging
import os
import pickle
import queue
import select
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

from ._warmup import PYTHON_KERNELS_ENV

__all__ = ["learn", "Worker", "Job", "main", "shared_worker"]

logger = logging.getLogger(__name__)


_PLANNED_LABELS = ("steady", "same structure, other sizes")


def _kind_undecided(pat, warmup_iters: int) -> bool:
    """Marked steps where the kind to plan is not yet the most common one: another kind
    (an eval batch every second step) met as often among the warm-up's steps, so that the
    plan could be the eval's and every train step would run unplanned. Decided by the
    next step that repeats either; after ``2 * warmup_iters`` steps (a loop whose kinds
    never settle) the analysis' choice stands, as for a learned period tried at each
    doubling of the events."""
    if pat.source != "markers" or len(pat.iterations) >= 2 * warmup_iters:
        return False
    planned = sum(len(k["iterations"]) for k in pat.kinds if k["label"] in _PLANNED_LABELS)
    others = [len(k["iterations"]) for k in pat.kinds if k["label"] == "other"]
    return bool(others) and max(others) >= planned


def learn(req: dict) -> dict:
    """Plan from recorded events. ``req``: ``events`` (list of EVENT_DTYPE arrays, in order),
    ``budget``, ``hw``, ``mode``, ``warmup_iters``, ``plan_opts``, ``touches`` (None, or
    (clocks, addresses, device type) of the dispatch tracer), ``tune`` (candidates),
    ``mode_reason`` (why this mode: the plan's ``meta["mode_reason"]``; auto whose tracer saw
    no op on a block plans oblivious and says so).
    Returns ``status`` "ok" (with ``plan``, ``pattern``, ``addrs``: persistent ordinal ->
    address, ``start_ev``: the allocator event where the learned iteration starts,
    ``start_level``: the bytes live there,
    ``samples``, ``cands``: [(label, plan)] for tuning, ``tuning_skipped``, ``kinds``:
    ``_runtime_kinds.kind_keys``), "wait" (a
    learned period with too few repetitions yet), or "error" (``error``: what failed)."""
    from .pattern import PatternError, analyze
    from .planner import PlanError, plan, tuning_candidates
    from .trace import EventKind
    from .trace._native import trace_from_events

    t0 = time.perf_counter()
    parts = req["events"]
    events = np.concatenate(parts) if len(parts) != 1 else parts[0]
    try:
        trace, addresses = trace_from_events(events, return_addresses=True)
        pat = analyze(trace)
        if pat.source != "markers" and len(pat.iterations) < req["warmup_iters"]:
            return {"status": "wait"}  # not enough repetitions yet to trust a learned period
        if _kind_undecided(pat, req["warmup_iters"]):
            return {"status": "wait"}  # which marked kind to plan: another step will tell
        opts = dict(req["plan_opts"])
        mode, why = req["mode"], req.get("mode_reason")
        if req["touches"] is not None:
            mode, why = _take_samples(req["touches"], trace, addresses, pat,
                                      int(events["tick"][0]), opts, mode, why)
        tune = tuple(c for c in req["tune"] if mode != "oblivious" or c != "oblivious")
        p = plan(trace, req["budget"], req["hw"], mode=mode, pattern=pat, **opts)
        if why:
            p.meta.update(mode_requested=req["mode"], mode_reason=why)
        cands, skipped = [], None
        if tune:
            if p.meta.get("sync") != "marker":
                # the clock is read at markers: without them there is nothing to time
                skipped = ("the plan syncs on the learned period, not on iteration "
                           "markers, and tuning times iterations between markers: "
                           "call Scheduler.step() each iteration (or let the optimizer "
                           "hook do it)")
            else:
                (first, _, _), *rest = tuning_candidates(tune, mode, opts)
                cands = [(first, None)] + [
                    (label, plan(trace, req["budget"], req["hw"], mode=m, pattern=pat, **o))
                    for label, m, o in rest]
    except (PatternError, PlanError, ValueError, ImportError) as e:
        # ImportError: a --no-deps install without pandas; the loop runs on, unplanned
        return {"status": "error", "error": f"{type(e).__name__}: {e}" + (
            f" (planning needs it: pip install {e.name})"
            if isinstance(e, ImportError) and e.name else "")}
    from ._armed import plan_table
    from ._runtime_kinds import kind_keys

    # persistent blocks: the plan names them by ALLOC ordinal in the trace
    alloc_blocks = trace.block[trace.kind == EventKind.ALLOC]
    ev_kind = trace.kind[trace.kind <= EventKind.FREE]
    start_ev = int(np.searchsorted(trace.tick[trace.kind <= EventKind.FREE], pat.start_tick))
    return {
        "status": "ok", "plan": p, "pattern": pat,
        "table": plan_table(p),  # (what arming converts: done here, off the loop's thread)
        "addrs": [int(a) for a in np.asarray(addresses)[alloc_blocks]],
        "start_ev": start_ev,
        # the bytes live where the learned iteration starts (the period's resync point)
        "start_level": int(np.sum(np.where(ev_kind[:start_ev] == EventKind.ALLOC, 1, -1)
                                  * trace.size[trace.kind <= EventKind.FREE][:start_ev]
                                  .astype(np.int64))),
        "samples": opts.get("samples") if mode == "sampled" else None,
        "cands": cands, "tuning_skipped": skipped,
        "kinds": kind_keys(pat, ev_kind),  # the steps' kinds (Scheduler.stats()["kinds"])
        "learn_s": time.perf_counter() - t0,
    }


def _take_samples(touches: tuple, trace, addresses, pat, k0: int, opts: dict, mode: str,
                  why: str | None) -> tuple[str, str | None]:
    """Turn the warm-up's touches (dispatch tracer) or GPU page faults (CUPTI) into
    ``opts["samples"]`` and settle the mode: ``(mode, why)``. Auto with nothing usable plans
    oblivious and says why; sampled mode raises (planning on would quietly be oblivious)."""
    from .planner import samples_from_faults, samples_from_touches

    clocks, taddrs, device_type = touches
    cupti = device_type == "cupti"
    if cupti and clocks is None:  # no CUPTI (stats()["fault_sampling"] says why)
        opts.pop("samples", None)
        return "oblivious", f"{mode}: oblivious, CUPTI is not available"
    if cupti:  # clocks: (ring ticks, addresses of blocks left open, (probed, open) locals)
        samples = samples_from_faults(trace, addresses, pat, clocks[0], taddrs, k0=k0,
                                      open_addrs=clocks[1], local=clocks[2])
        seen = (f"CUPTI reported {len(clocks[0]):,} GPU page faults in the warm-up and none "
                "inside a uvm_sched block of the learned iteration")
    else:
        samples = samples_from_touches(trace, addresses, pat, clocks, taddrs, k0=k0)
        seen = (f"the dispatch tracer saw no PyTorch op touch a uvm_sched block on device "
                f"type {device_type!r} during the warm-up ({len(clocks):,} touches recorded)")
    if len(samples):
        opts["samples"] = samples
        if mode != "auto":
            return mode, why
        return "sampled", (f"auto: sampled, {'CUPTI' if cupti else 'the dispatch tracer'} saw "
                           f"{samples['block'].nunique():,} blocks touched in the warm-up")
    if mode == "auto":
        return "oblivious", f"auto: oblivious, no access source: {seen}"
    raise ValueError(f"sampled mode: {seen}; are the model's tensors there, allocated "
                     "through uvm_sched.allocator()?")


class Job:
    """One request in flight: ``done`` is set when ``result`` (learn's dict) is there;
    ``wall_s`` is the time from submission to the result."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.result: dict | None = None
        self.wall_s = 0.0
        self.request_events: list = []  # the submitter's record of what it sent


# -- the wire: a frame is (pickle bytes, out-of-band buffers), lengths first ---------------
def _write_frame(f, obj) -> None:
    bufs: list = []
    data = pickle.dumps(obj, protocol=5, buffer_callback=bufs.append)
    raws = [b.raw() for b in bufs]
    head = struct.pack(f"<QQ{len(raws)}Q", len(data), len(raws), *(r.nbytes for r in raws))
    f.write(head)
    f.write(data)
    for r in raws:
        f.write(r)
    f.flush()


def _read_exact(f, n: int) -> bytearray:
    out = bytearray(n)
    view, got = memoryview(out), 0
    while got < n:
        k = f.readinto(view[got:])
        if not k:
            raise EOFError(f"the planning process closed its pipe ({got:,} of {n:,} bytes read)")
        got += k
    return out


def _read_frame(f):
    n, nb = struct.unpack("<QQ", _read_exact(f, 16))
    sizes = struct.unpack(f"<{nb}Q", _read_exact(f, 8 * nb)) if nb else ()
    data = _read_exact(f, n)
    return pickle.loads(data, buffers=[_read_exact(f, s) for s in sizes])


def main() -> None:
    """The helper process: requests in on stdin, results out on stdout, until stdin closes.
    Anything else that writes to stdout goes to stderr (the pipe carries frames only)."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    inp = sys.stdin.buffer
    while True:
        try:
            req = _read_frame(inp)
        except EOFError:
            return
        if req.get("ping"):  # (Worker: compile what learn runs, then say so)
            from ._warmup import compile_kernels
            from .trace import _native  # noqa: F401

            try:
                ready = {"status": "ready", **compile_kernels()}
            except Exception as e:  # the references stand in, as they do without numba
                ready = {"status": "ready", "compile_error": f"{type(e).__name__}: {e}"}
            _answer(out, ready)
            continue
        try:
            res = learn(req)
        except Exception as e:  # never let the loop's process die of a planner bug
            import traceback

            res = {"status": "error", "error": f"{type(e).__name__}: {e}",
                   "traceback": traceback.format_exc()}
        _answer(out, res)


def _answer(out, obj) -> None:
    """Write a frame back; when the loop's process is gone (it exits without waiting for
    a helper still compiling), end quietly: nobody reads the answer, and a traceback on
    the user's terminal after their script ended would report nothing wrong."""
    try:
        _write_frame(out, obj)
    except BrokenPipeError:
        os._exit(0)  # (not exit(): flushing the broken pipe again at shutdown would warn)


class Worker:
    """Runs ``learn`` requests one at a time off the calling thread; ``submit`` returns at
    once with a ``Job``. ``kind``: "process" (default) or "thread" (see module doc)."""

    def __init__(self, kind: str = "process") -> None:
        if kind not in ("process", "thread"):
            raise ValueError(f"worker must be 'process' or 'thread', got {kind!r}")
        self.kind = kind
        self._proc: subprocess.Popen | None = None  # the helper, with the compiled kernels
        self._compiling = False  # its "ready" has not come yet
        # the helper with the plain-Python kernels that answers while _proc compiles
        # (Note [The first plan on a cold kernel cache])
        self._stand_in: subprocess.Popen | None = None
        self._todo: queue.SimpleQueue = queue.SimpleQueue()  # (request, Job), in order
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()

    def warm(self) -> None:
        """Start the helper thread and, for "process", the helper process now, in the
        background (its imports and kernels take seconds: better during the warm-up
        iterations than after them; and starting a thread from ``step()`` costs
        milliseconds on a loaded machine)."""
        self._ensure_thread()
        if self.kind == "process":
            self._todo.put(({"ping": True}, Job()))

    def submit(self, req: dict) -> Job:
        job = Job()
        self._ensure_thread()
        self._todo.put((req, job))
        return job

    def _ensure_thread(self) -> None:
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="uvm_sched-learn",
                                                daemon=True)
                self._thread.start()

    def _serve(self) -> None:
        while True:
            req, job = self._todo.get()
            t0 = time.perf_counter()
            try:
                if req.get("ping"):
                    try:
                        self._start_helper()
                    except Exception as e:  # the first real request tries again, says why
                        logger.debug("uvm_sched: starting the planning process: %s", e)
                else:
                    job.result = self._remote(req) if self.kind == "process" else learn(req)
            except Exception as e:  # a failed learn leaves the loop unplanned, never broken
                if not sys.is_finalizing():  # (at exit: nobody waits for this plan)
                    logger.warning("uvm_sched: planning failed: %s: %s", type(e).__name__, e)
                job.result = {"status": "error", "error": f"{type(e).__name__}: {e}"}
            job.wall_s = time.perf_counter() - t0
            job.done.set()

    def _start_helper(self) -> subprocess.Popen:
        """The helper process, started (and told to compile its kernels) if not running."""
        if self._proc is not None and self._proc.poll() is not None:
            self._proc, self._compiling = None, False
        if self._proc is None:
            self._proc = _start_process()
            _write_frame(self._proc.stdin, {"ping": True})
            self._compiling = True
        return self._proc

    def _helper_ready(self, timeout_s: float) -> bool:
        """Whether the helper's kernels are compiled (its "ready" read, waiting at most
        ``timeout_s`` seconds for it). A helper that died compiling is dropped (False)."""
        if not self._compiling:
            return True
        assert self._proc is not None and self._proc.stdout is not None
        # (the helper writes one frame per request and nothing else: no bytes of a later
        # answer can sit in the reader's buffer, so select on its fd is exact)
        if not select.select([self._proc.stdout], [], [], timeout_s)[0]:
            return False
        try:
            ready = _read_frame(self._proc.stdout)
        except (OSError, EOFError, pickle.UnpicklingError) as e:
            logger.warning("uvm_sched: the planning process died compiling its kernels "
                           "(%s); the plain-Python kernels plan meanwhile", e)
            self._drop("_proc")
            self._compiling = False
            return False
        self._compiling = False
        if "compile_error" in ready:
            logger.warning("uvm_sched: compiling the planner's kernels failed (%s); they "
                           "run as plain Python", ready["compile_error"])
        return True

    def _remote(self, req: dict) -> dict:
        try:
            proc = self._start_helper()
        except OSError as e:
            logger.warning("uvm_sched: cannot start the planning process (%s); planning "
                           "on a thread of this process instead", e)
            self.kind = "thread"
            return learn(req)
        try:
            if not self._helper_ready(0):
                res = self._ask_stand_in(req)
                if res is not None:
                    return res
                # None only once the helper said "ready" (a helper that died compiling
                # leaves the stand-in to answer): restarting one here would send the request
                # to a helper whose "ready" is still to be read
                assert self._proc is not None
                proc = self._proc
            self._drop("_stand_in")  # the compiled kernels are there: no more need of it
            _write_frame(proc.stdin, req)
            res = _read_frame(proc.stdout)
        except (OSError, EOFError, pickle.UnpicklingError) as e:
            self.close()
            raise RuntimeError(f"the planning process failed: {e}") from None
        return _logged(res, "compiled")

    def _ask_stand_in(self, req: dict) -> dict | None:
        """The stand-in's answer to ``req``, or None when the helper's kernels compiled
        first (the stand-in is then killed). Note [The first plan on a cold kernel cache]."""
        if self._stand_in is None or self._stand_in.poll() is not None:
            self._stand_in = _start_process(python_kernels=True)
        stand_in = self._stand_in
        assert stand_in.stdout is not None
        _write_frame(stand_in.stdin, req)
        while True:
            waiting: list = [stand_in.stdout]
            if self._compiling and self._proc is not None:
                waiting.append(self._proc.stdout)
            ready = select.select(waiting, [], [])[0]
            if stand_in.stdout in ready:
                return _logged(_read_frame(stand_in.stdout), "python")
            if self._helper_ready(0):
                logger.info("uvm_sched: the kernels compiled before the plain-Python plan "
                            "was done; planning with them")
                self._drop("_stand_in")
                return None

    def _drop(self, which: str) -> None:
        """Kill the helper ``which`` ("_proc" or "_stand_in"), if there is one."""
        p = getattr(self, which)
        setattr(self, which, None)
        if p is not None and p.poll() is None:
            p.kill()
            p.wait()

    def close(self) -> None:
        """Close the helpers. One still compiling its kernels is not waited for: it ends
        on its own once they are in numba's cache (the next run's gain), reading the
        closed pipe."""
        for which in ("_proc", "_stand_in"):
            p = getattr(self, which)
            setattr(self, which, None)
            if p is not None:
                try:
                    if p.stdin is not None:
                        p.stdin.close()
                    if not (which == "_proc" and self._compiling):
                        p.wait(timeout=5)
                except Exception:  # already gone, or stuck: it must not outlive us
                    p.kill()
        self._compiling = False


def _logged(res: dict, kernels: str) -> dict:
    """``res`` (a helper's answer) with the kernels that made it; a traceback in it logged."""
    if "traceback" in res:
        logger.warning("uvm_sched: the planner raised in the planning process:\n%s",
                       res["traceback"])
    res["kernels"] = kernels
    return res


def helper_env(python_kernels: bool = False) -> dict[str, str]:
    """A helper process' environment: this one's, with the folder holding uvm_sched first
    on ``PYTHONPATH`` (the helper imports the same uvm_sched as the loop), and the
    plain-Python kernels switched on when ``python_kernels``."""
    root = str(Path(__file__).resolve().parents[1])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([root] + ([env["PYTHONPATH"]]
                                                  if env.get("PYTHONPATH") else []))
    if python_kernels:
        env.update(PYTHON_KERNELS_ENV)
    return env


def _start_process(python_kernels: bool = False) -> subprocess.Popen:
    # its own session: a Ctrl-C meant for the training loop does not kill it mid-plan
    return subprocess.Popen([sys.executable, "-c", "from uvm_sched._learn import main; main()"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            env=helper_env(python_kernels), start_new_session=True)


_shared: dict[str, Worker] = {}
_shared_lock = threading.Lock()


def shared_worker(kind: str) -> Worker:
    """The process-wide worker of a kind (one helper process serves every Scheduler)."""
    with _shared_lock:
        w = _shared.get(kind)
        if w is None:
            w = _shared[kind] = Worker(kind)
        return w


@atexit.register
def _close_all() -> None:
    for w in list(_shared.values()):
        w.close()
