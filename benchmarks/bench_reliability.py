"""Reliability: bad inputs of every kind, really run, each outcome classified.

Each input runs in a forked child process (so a segfault, a hang or a memory blow-up is
observed, not suffered) with a time limit and a 6 GiB address-space limit, and ends as one
of: **clear error** (exit 2 with one line from the CLI, or the documented exception type
from the API, raised before any damage), **accepted** (a valid input, served right),
**crash** (a signal, an exit-1 "internal error", or an undocumented exception type),
**hang** (past the time limit), **wrong** (a bad input accepted, a value misread, or a
refusal that came only after allocating more than 512 MiB), **data loss** (an output
left truncated or missing its old contents, a temporary left behind, or an input
overwritten). The issue classes 1-11 of "Nothing lost, nothing silent" are the rows.

    python benchmarks/bench_reliability.py            # writes results/reliability.{md,json}
    python benchmarks/bench_reliability.py --out /tmp/before   # e.g. against an older tree
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import ctypes
import gzip
import io
import json
import multiprocessing as mp
import os
import resource
import shutil
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.append(str(REPO))  # after PYTHONPATH: the package under test can be another tree
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "tests" / "native"))
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402

import uvm_sched  # noqa: E402,F401 - first, so that PYTHONPATH (not bench_quality's path) picks it
from _reliability import full_disk, leftovers, readonly_dir, run_cli, small_trace  # noqa: E402

OUTCOMES = ("clear error", "accepted", "crash", "hang", "wrong", "data loss")
TIME_LIMIT_S = 30.0
MEMORY_LIMIT = 6 << 30
BLOWUP_BYTES = 512 << 20
MiB = 1 << 20
OLD = b'{"old": "contents that must survive"}\n'

CASES: list[tuple[str, str, object]] = []  # (class, input, function -> outcome)


def case(cls: str, what: str):
    def reg(fn):
        CASES.append((cls, what, fn))
        return fn
    return reg


# ---- shared inputs (made once in the parent, before any fork) ---------------------------
class Inputs:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.trace = root / "t.parquet"
        small_trace().save(self.trace)
        self.other = root / "other.parquet"
        small_trace(layers=3, batch=3).save(self.other)
        self.plan = root / "p.json"
        code, _, err = run_cli("plan", self.trace, "-q", "--budget", "90%", "-o", self.plan)
        assert code == 0, err
        self.plan_doc = json.loads(self.plan.read_text())
        from uvm_sched.trace import TraceBuilder

        b = TraceBuilder(name="no-allocs")
        for _ in range(3):
            b.mark()
            b.next_tick(5.0)
        self.empty = root / "empty.parquet"
        b.build().save(self.empty)
        self.fifo = root / "fifo"
        os.mkfifo(self.fifo)
        self.binary = root / "bin.toml"
        self.binary.write_bytes(bytes(range(256)) * 4)

    def fresh(self, name: str) -> Path:
        d = Path(tempfile.mkdtemp(prefix=name + "-", dir=self.root))
        return d


IN: Inputs | None = None


# ---- outcome helpers -------------------------------------------------------------------
def cli_outcome(args, *, expect_ok: bool = False) -> str:
    code, _, err = run_cli(*args)
    if code == 0:
        return "accepted" if expect_ok else "wrong"
    if code == 2 and "internal error" not in err and "Traceback" not in err:
        return "wrong" if expect_ok else "clear error"
    return "crash"


def api_outcome(fn, documented: tuple[type, ...], *, check=None) -> str:
    """fn() must raise one of ``documented``; accepted is wrong, unless ``check`` says the
    input was valid and the result right ("accepted")."""
    try:
        got = fn()
    except documented:
        return "clear error"
    except Exception:  # noqa: BLE001 - an undocumented type
        return "crash"
    if check is not None:
        return "accepted" if check(got) else "wrong"
    return "wrong"


# ---- 1. outputs written in place ----------------------------------------------------------
WRITERS = {
    "plan -o .json": (["plan", "{t}", "-q", "-o"], "out.json"),
    "plan -o .parquet": (["plan", "{t}", "-q", "-o"], "out.parquet"),
    "report -o": (["report", "{t}", "-q", "--no-sim", "-o"], "out.html"),
    "compare --plot": (["compare", "{t}", "-q", "--budget", "90%", "--plot"], "out.html"),
    "export perfetto": (["export", "{t}", "-q", "--to", "perfetto", "-o"], "out.json"),
    "export torch-snapshot": (["export", "{t}", "-q", "--to", "torch-snapshot", "-o"],
                              "out.pickle"),
}


def _writer_case(name: str, where: str):
    def run():
        args, dest_name = WRITERS[name]
        folder = IN.fresh("w") / "out"
        ctx = full_disk if where == "full disk" else readonly_dir
        with ctx(folder, keep={dest_name: OLD}):
            out = cli_outcome([a.format(t=IN.trace) for a in args] + [folder / dest_name])
            intact = (folder / dest_name).read_bytes() == OLD
            clean = leftovers(folder, {dest_name}) == []
        if not intact or not clean:
            return "data loss"
        return out
    return run


for _name in WRITERS:
    for _where in ("full disk", "read-only folder"):
        case("1 outputs written in place", f"{_name} on a {_where}")(_writer_case(_name, _where))
for _name in WRITERS:
    def _ok(name=_name):
        args, dest_name = WRITERS[name]
        d = IN.fresh("ok")
        (d / dest_name).write_bytes(OLD)
        out = cli_outcome([a.format(t=IN.trace) for a in args] + [d / dest_name], expect_ok=True)
        if (d / dest_name).read_bytes() == OLD or leftovers(d, {dest_name}):
            return "data loss"
        return out
    case("1 outputs written in place", f"{_name} over an old file (valid)")(_ok)


# ---- 2. output = input ------------------------------------------------------------------
SAME = [
    ["plan", "{t}", "-o", "{t}"], ["export", "{t}", "--to", "perfetto", "-o", "{t}"],
    ["export", "{t}", "--to", "torch-snapshot", "-o", "{t}"], ["compare", "{t}", "--plot", "{t}"],
    ["report", "{t}", "--no-sim", "-o", "{t}"],
    ["report", "{t}", "--plan", "{p}", "--no-sim", "-o", "{p}"],
    ["plan", "{t}", "-o", "{alias}"],
]
for _args in SAME:
    def _same(args=_args):
        d = IN.fresh("same")
        t, p = d / "t.parquet", d / "p.json"
        shutil.copy(IN.trace, t)
        shutil.copy(IN.plan, p)
        before = (t.read_bytes(), p.read_bytes())
        alias = d / ".." / d.name / "t.parquet"
        out = cli_outcome([a.format(t=t, p=p, alias=alias) for a in args] + ["-q"])
        if (t.read_bytes(), p.read_bytes()) != before:
            return "data loss"
        return out
    case("2 output path = input path", " ".join(_args))(_same)


# ---- 3. memory blow-up, devices, FIFOs --------------------------------------------------------
def _load_case(make):
    def run():
        from uvm_sched.trace import TraceError, load

        p = make(IN.fresh("load"))
        return api_outcome(lambda: load(p), (TraceError,))
    return run


def _bomb(d):
    p = d / "bomb.pickle"
    p.write_bytes(b"\x80\x02c__builtin__\nbytearray\nq\x00J\x00\x00\x00@\x85q\x01Rq\x02.")
    return p


def _sparse(d):
    p = d / "huge.json"
    with open(p, "wb") as f:
        f.write(b"{")
        f.truncate(20 << 30)
    return p


def _gzbomb(d):
    p = d / "bomb.json.gz"
    with gzip.open(p, "wb", compresslevel=9) as f:
        f.write(b'{"traceEvents": [')
        chunk = b" " * (1 << 20)
        for _ in range(2000):
            f.write(chunk)
        f.write(b"]}")
    return p


def _deep_json(d):
    p = d / "deep.json"
    p.write_bytes(b"[" * 200_000 + b"]" * 200_000)
    return p


def _deep_pickle(d):
    p = d / "deep.pickle"
    p.write_bytes(b"\x80\x04" + b"]" * 200_000 + b"a" * 199_999 + b".")
    return p


for _what, _make in [("39-byte pickle building bytearray(2**30)", _bomb),
                     ("20 GiB sparse file", _sparse), ("FIFO with no writer", lambda d: IN.fifo),
                     ("/dev/zero", lambda d: Path("/dev/zero")),
                     ("/dev/urandom", lambda d: Path("/dev/urandom")),
                     ("gzip of 2 GiB of spaces", _gzbomb), ("JSON nested 200,000 deep", _deep_json),
                     ("pickle nested 200,000 deep", _deep_pickle)]:
    case("3 memory blow-up / devices / FIFOs", _what)(_load_case(_make))


# ---- 4. Scheduler options ---------------------------------------------------------------------
def _sched_case(kw):
    def run():
        from uvm_sched.runtime import Scheduler

        with _host():
            try:
                s = Scheduler(hook=False, **kw)
            except (TypeError, ValueError):
                return "clear error"
            except Exception:  # noqa: BLE001
                return "crash"
            # accepted: does training survive it? (the bug: a TypeError at the 4th step)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    with s:
                        _loop(s, 6)
            except Exception:  # noqa: BLE001
                return "crash"
            return "wrong"
    return run


@contextlib.contextmanager
def _host(**env):
    import fakecuda

    with fakecuda.backend("host", **env) as f:
        yield f


def _loop(s, iters, layers=4, act=2 * MiB):
    from uvm_sched import native

    weights = [native.malloc(4 * MiB) for _ in range(layers)]
    for _ in range(iters):
        s.step()
        acts = [native.malloc(act) for _ in range(layers)]
        for a in reversed(acts):
            native.free(a)
    for w in weights:
        native.free(w)


for _kw in [dict(plan_opts={"bogus": 1}), dict(plan_opts={"pattern": None}),
            dict(plan_opts={"guard": -1}), dict(plan_opts={"rounds": 0}),
            dict(plan_opts={"discard": "yes"}), dict(budget="lots"), dict(budget="inf"),
            dict(budget=-5), dict(hw="no-such-gpu"), dict(warmup_iters=2.5),
            dict(relearn_after="2"), dict(hook="sometimes"), dict(mode="psychic")]:
    case("4 Scheduler options", repr(_kw))(_sched_case(_kw))


def _sched_ok():
    from uvm_sched.runtime import Scheduler

    with _host():
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with Scheduler(budget="90%", warmup_iters=2, hook=False) as s:
                _loop(s, 6)
                return "accepted" if s.state == "armed" else "wrong"


case("4 Scheduler options", "budget='90%', warmup_iters=2 (valid)")(_sched_ok)


# ---- 5. plan files ---------------------------------------------------------------------------
PLAN_EDITS = [("meta", "period_events", 2**29), ("meta", "period_events", 0),
              ("meta", "budget_bytes", -5), ("meta", "budget_bytes", "abc"),
              ("meta", "budget_bytes", 1e30), ("meta", "sync", "bogus"),
              ("meta", "mode", "clairvoyant"), ("meta", "alloc_sizes", [-1]),
              ("meta", "version", -5), ("row", "offset", -7), ("row", "bytes", -1),
              ("row", "block", -3), ("row", "tick", "x"), ("row", "persistent", "yes"),
              ("drop", "actions", None), ("drop", "meta", None), ("drop", "columns", None)]


def _plan_case(where, key, value):
    def run():
        from uvm_sched.planner import Plan, PlanError

        d = copy.deepcopy(IN.plan_doc)
        if where == "meta":
            d["meta"][key] = value
        elif where == "row":
            d["actions"][0][d["columns"].index(key)] = value
        else:
            d.pop(key)
        p = IN.fresh("plan") / "q.json"
        p.write_text(json.dumps(d))
        api = api_outcome(lambda: Plan.load(p), (PlanError,))
        cli = cli_outcome(["simulate", IN.trace, "--plan", p, "-q"])
        order = {"crash": 0, "data loss": 1, "wrong": 2, "hang": 3, "clear error": 4}
        return min(api, cli, key=order.get)
    return run


for _w, _k, _v in PLAN_EDITS:
    case("5 plan files trusted", f"{_w} {_k} = {_v!r}" if _w != "drop" else f"no {_k!r}")(
        _plan_case(_w, _k, _v))


def _other_trace(force):
    def run():
        code, _, err = run_cli("simulate", IN.other, "--plan", IN.plan, "-q",
                               *(["--force"] if force else []))
        if force:
            return "accepted" if code == 0 and "warning" in err else (
                "crash" if code == 1 else "wrong")
        return "clear error" if code == 2 else ("crash" if code == 1 else "wrong")
    return run


case("5 plan files trusted", "a plan for another trace")(_other_trace(False))
case("5 plan files trusted", "a plan for another trace, --force (valid: a warning)")(
    _other_trace(True))
case("5 plan files trusted", "the plan for this trace (valid)")(
    lambda: cli_outcome(["simulate", IN.trace, "--plan", IN.plan, "-q"], expect_ok=True))


# ---- 6. environment values -----------------------------------------------------------------
ENV_BAD = [("UVM_SCHED_LIMIT_BYTES", v) for v in ("1.5G", "32 M", "abc", "-1", "1e9",
                                                  "99999999999999999999")] + \
          [("UVM_SCHED_ARENA_BYTES", v) for v in ("2.5M", "8 MiB", "lots")] + \
          [("UVM_SCHED_RING_EVENTS", v) for v in ("1k5", "many")] + \
          [("UVM_SCHED_TRACE", v) for v in ("2", "enabled")] + \
          [("UVM_SCHED_VERBOSE", v) for v in ("3", "loud")]
ENV_GOOD = [("UVM_SCHED_LIMIT_BYTES", "16M", "limit_bytes", 16 << 20),
            ("UVM_SCHED_LIMIT_BYTES", "1G", "limit_bytes", 1 << 30),
            ("UVM_SCHED_LIMIT_BYTES", "16MiB", "limit_bytes", 16 << 20),
            ("UVM_SCHED_TRACE", "yes", "tracing", 1), ("UVM_SCHED_TRACE", "0", "tracing", 0),
            ("UVM_SCHED_RING_EVENTS", "4096", "ring_capacity", 4096)]


def _env_bad(var, value):
    def run():
        from uvm_sched import native

        try:
            with _host(**{var: value}):
                native.malloc(64)
        except ValueError as e:
            return "clear error" if var in str(e) and value in str(e) else "wrong"
        except Exception:  # noqa: BLE001
            return "crash"
        return "wrong"
    return run


def _env_good(var, value, stat, want):
    def run():
        from uvm_sched import native

        with _host(**{var: value}):
            return "accepted" if native.stats()[stat] == want else "wrong"
    return run


for _var, _val in ENV_BAD:
    case("6 environment values", f"{_var}={_val}")(_env_bad(_var, _val))
for _var, _val, _stat, _want in ENV_GOOD:
    case("6 environment values", f"{_var}={_val} (valid)")(_env_good(_var, _val, _stat, _want))


# ---- 7. Scheduler failures silent ---------------------------------------------------------
def _warns(env, kw, loop):
    def run():
        from uvm_sched.runtime import Scheduler

        with _host(**env):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                with Scheduler(hook=False, **kw) as s:
                    loop(s)
            said = [w for w in caught if "uvm_sched" in str(w.message)]
            return "clear error" if len(said) == 1 else "wrong"
    return run


def _big_iteration(s):
    from uvm_sched import native

    for _ in range(4):
        s.step()
        blocks = [native.malloc(4096) for _ in range(1500)]
        for b in blocks:
            native.free(b)


case("7 Scheduler failures silent", "budget of 1 byte")(
    _warns({}, dict(budget=1, warmup_iters=1), lambda s: _loop(s, 8)))
case("7 Scheduler failures silent", "ring of 1,024 records, 3,000 events per iteration")(
    _warns({"UVM_SCHED_RING_EVENTS": "1024"}, dict(budget="60%", warmup_iters=2), _big_iteration))
case("7 Scheduler failures silent", "UVM_SCHED_TRACE=0")(
    _warns({"UVM_SCHED_TRACE": "0"}, dict(budget="60%", warmup_iters=1), lambda s: _loop(s, 4)))


def _strict():
    from uvm_sched.runtime import Scheduler

    with _host():
        s = Scheduler(budget=1, warmup_iters=1, hook=False, strict=True).start()
        try:
            _loop(s, 4)
        except RuntimeError:
            return "clear error"
        return "wrong"


case("7 Scheduler failures silent", "budget of 1 byte, strict=True")(_strict)


# ---- 8. exit codes and exception types -------------------------------------------------------
CLI_BAD = [["plan", "{t}", "--budget", b] for b in ("inf", "-inf", "nan", "1e30GiB", "1e-9%", "0",
                                                    "150%", "lots")] + [
    ["compare", "{t}", "--budget", "50%,inf"], ["simulate", "{t}", "--budget", "1e400"],
    ["plan", "{t}", "--hw", "{bin}"], ["plan", "{t}", "--hw", "{fifo}"],
    ["plan", "{t}", "--hw", "no-such-gpu"], ["plan", "{e}"], ["simulate", "{e}"],
    ["compare", "{e}"], ["analyze", "{e}"], ["analyze", "{bin}"],
    ["simulate", "{t}", "--plan", "{t}"], ["plan", "{t}", "--sample-rate", "2"],
    ["plan", "{t}", "--noise", "nan"], ["compare", "{t}", "--policies", "bogus"],
    ["plan", "{t}", "-o", "/dev/null"], ["plan", "{t}", "-o", "{root}/no/such/p.json"],
]
for _args in CLI_BAD:
    def _cli_bad(args=_args):
        return cli_outcome([a.format(t=IN.trace, e=IN.empty, bin=IN.binary, fifo=IN.fifo,
                                     root=IN.root) for a in args] + ["-q"])
    case("8 exit codes / exception types", " ".join(_args).replace("{", "").replace("}", ""))(
        _cli_bad)


def _api_raw(make, fmt):
    def run():
        from uvm_sched.trace import TraceError, load

        p = make(IN.fresh("raw"))
        return api_outcome(lambda: load(p), (TraceError,))
    return run


def _csv_huge(d):
    (d / "kernels.csv").write_text("kernel_id,duration_us,inputs,outputs\n0,1.0,0,1\n")
    (d / "tensors.csv").write_text("tensor_id,bytes,is_global\n0," + "9" * 30 + ",0\n1,64,0\n")
    return d


def _kineto(step="ProfilerStep#1", nbytes=512, ts=2.0):
    def make(d):
        ev = [{"ph": "X", "name": step, "ts": 1.0, "dur": 9.0, "cat": "user_annotation"},
              {"ph": "i", "name": "[memory]", "ts": ts, "pid": 1, "tid": 1,
               "args": {"Bytes": nbytes, "Addr": 4096, "Device Id": 0, "Device Type": 1,
                        "Total Allocated": 0}}]
        p = d / "k.json"
        p.write_text(json.dumps({"traceEvents": ev}))
        return p
    return make


for _what, _make in [("CSV tensor of 10**30 bytes", _csv_huge),
                     ("5000-digit ProfilerStep#", _kineto(step="ProfilerStep#" + "9" * 5000)),
                     ("Kineto Bytes = 'abc'", _kineto(nbytes="abc")),
                     ("Kineto ts = null", _kineto(ts=None))]:
    case("8 exit codes / exception types", _what)(_api_raw(_make, ""))


# ---- 9. corrupt values ----------------------------------------------------------------------------
def _trace_case(cols_fn, tick_ns=None):
    def run():
        from uvm_sched.trace import Trace, TraceError

        return api_outcome(lambda: Trace(cols_fn(), tick_ns=tick_ns), (TraceError,))
    return run


def _sizes(size, n=4):
    return lambda: {"tick": np.repeat(np.arange(n), 2), "kind": np.tile([0, 1], n),
                    "block": np.repeat(np.arange(n), 2), "size": np.full(2 * n, size)}


case("9 corrupt values accepted", "sizes of 2**62")(_trace_case(_sizes(2**62)))
case("9 corrupt values accepted", "4,097 live blocks of 2**50 (total past 2**62)")(
    _trace_case(lambda: {"tick": np.arange(4097), "kind": np.zeros(4097, np.uint8),
                         "block": np.arange(4097), "size": np.full(4097, 2**50)}))
case("9 corrupt values accepted", "+inf device time")(
    _trace_case(_sizes(64, 1), tick_ns=[float("inf")]))
case("9 corrupt values accepted", "-inf device time")(
    _trace_case(_sizes(64, 1), tick_ns=[float("-inf")]))


def _schema(version):
    def run():
        import pyarrow.parquet as pq

        from uvm_sched.trace import TraceError, load

        p = IN.fresh("schema") / "t.parquet"
        t = pq.read_table(IN.trace)
        md = dict(t.schema.metadata)
        md[b"uvm_sched.schema_version"] = version
        pq.write_table(t.replace_schema_metadata(md), p)
        return api_outcome(lambda: load(p), (TraceError,))
    return run


for _v in (b"-5", b"0", b"99"):
    case("9 corrupt values accepted", f"Parquet schema version {_v.decode()}")(_schema(_v))
case("9 corrupt values accepted", "a valid trace (valid)")(
    lambda: api_outcome(lambda: __import__("uvm_sched.trace", fromlist=["load"]).load(IN.trace),
                        (ValueError,), check=lambda t: len(t) > 0))


# ---- 10. native arguments -----------------------------------------------------------------------
NATIVE_BAD = [
    ("free(p + 2**64)", lambda n, p: n.free(p + 2**64)),
    ("free(p - 2**64)", lambda n, p: n.free(p - 2**64)),
    ("free(p, size=-1)", lambda n, p: n.free(p, size=-1)),
    ("free(float(p))", lambda n, p: n.free(float(p))),
    ("malloc(1.5)", lambda n, p: n.malloc(1.5)),
    ("malloc('10')", lambda n, p: n.malloc("10")),
    ("malloc(True)", lambda n, p: n.malloc(True)),
    ("malloc(64, stream=-1)", lambda n, p: n.malloc(64, stream=-1)),
    ("block_info(p + 2**64)", lambda n, p: n.block_info(p + 2**64)),
    ("prefetch(p, 64.0)", lambda n, p: n.prefetch(p, 64.0)),
    ("arm(period_events=2**29)", lambda n, p: n.arm(np.zeros(0, n.PLAN_ROW_DTYPE), [64], 2**29)),
]


def _native_bad(fn):
    def run():
        from uvm_sched import native

        with _host():
            p = native.malloc(64)
            out = api_outcome(lambda: fn(native, p), (TypeError, ValueError))
            try:
                alive = native.block_info(p)["size"] == 64
            except ValueError:
                alive = False
            return out if alive else "wrong"
    return run


for _what, _fn in NATIVE_BAD:
    case("10 native arguments", _what)(_native_bad(_fn))


def _c_abi(call):
    def run():
        from uvm_sched import native

        with _host():
            native._load()
            lib = ctypes.CDLL(native.library_path())
            p = native.malloc(64)
            r = call(lib, p)
            return "clear error" if r else "wrong"
    return run


def _c_malloc(lib, p):
    lib.uvm_sched_malloc_status.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p,
                                            ctypes.c_void_p]
    return lib.uvm_sched_malloc_status(64, 0, None, None) == -1


def _c_block_info(lib, p):
    lib.uvm_sched_block_info.argtypes = [ctypes.c_void_p] * 4
    return lib.uvm_sched_block_info(p, None, None, None) == -1


def _c_stats(lib, p):
    lib.uvm_sched_stats.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    lib.uvm_sched_stats.restype = ctypes.c_size_t
    return lib.uvm_sched_stats(None, 1000) > 0


def _c_drain(lib, p):
    lib.uvm_sched_drain.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    lib.uvm_sched_drain.restype = ctypes.c_size_t
    return lib.uvm_sched_drain(None, 1000) == 0


def _c_arm(lib, p):
    lib.uvm_sched_exec_arm.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p,
                                       ctypes.c_size_t, ctypes.c_uint64, ctypes.c_int,
                                       ctypes.c_int, ctypes.c_int]
    return lib.uvm_sched_exec_arm(None, 3, None, 2, 4, 0, 0, 1) == -1


for _what, _call in [("uvm_sched_malloc_status(64, 0, NULL, NULL)", _c_malloc),
                     ("uvm_sched_block_info(p, NULL, NULL, NULL)", _c_block_info),
                     ("uvm_sched_stats(NULL, 1000)", _c_stats),
                     ("uvm_sched_drain(NULL, 1000)", _c_drain),
                     ("uvm_sched_exec_arm(NULL, 3, NULL, 2, ...)", _c_arm)]:
    case("10 native arguments", _what)(_c_abi(_call))


# ---- 11. driver failures ------------------------------------------------------------------
def _release_fault():
    import fakecuda

    from uvm_sched import native

    with fakecuda.backend("fake", UVM_SCHED_ARENA_BYTES="8M", FAKE_CUDA_FAIL="cuMemFree:1") as fake:
        p = native.malloc(6 * MiB)
        native.free(p)
        held = native.stats()["reserved_bytes"]
        try:
            n = native.release_cached()
        except native.UvmSchedError:
            ok = native.stats()["reserved_bytes"] == held and fake.live_allocations() == 1
            return "clear error" if ok else "wrong"
        return "wrong" if n > 0 and fake.live_allocations() else "clear error"


def _cross_stream_fault():
    import fakecuda

    from uvm_sched import native

    with fakecuda.backend("fake", UVM_SCHED_ARENA_BYTES="8M",
                          FAKE_CUDA_FAIL="cuEventRecord:1") as fake:
        fake.lib.fake_cuda_stream_create.restype = ctypes.c_void_p
        s1, s2 = fake.lib.fake_cuda_stream_create(), fake.lib.fake_cuda_stream_create()
        p = native.malloc(1024, stream=s1)
        try:
            native.free(p, stream=s2)
        except native.UvmSchedError:
            return "clear error" if native.block_info(p)["size"] == 1024 else "wrong"
        return "wrong"  # released without the wait


def _threads():
    from uvm_sched import native

    errors = []

    def work(seed):
        rng = np.random.default_rng(seed)
        live = []
        for i in range(25_000):
            if live and (len(live) > 64 or rng.random() < 0.45):
                p, n, tag = live.pop(int(rng.integers(len(live))))
                if ctypes.string_at(p, min(n, 8)) != tag[: min(n, 8)]:
                    errors.append(p)
                native.free(p, size=n)
            else:
                n = int(rng.choice([8, 100, 4096, 70_000, 3 * MiB]))
                p = native.malloc(n)
                tag = seed.to_bytes(4, "little") + (i & 0xFFFFFFFF).to_bytes(4, "little")
                ctypes.memmove(p, tag, min(n, 8))
                live.append((p, n, tag))
        for p, n, _ in live:
            native.free(p, size=n)

    with _host():
        ts = [threading.Thread(target=work, args=(s,)) for s in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        st = native.stats()
        ok = not errors and st["allocated_blocks"] == 0
        return "accepted" if ok else "wrong"


case("11 driver failures", "cuMemFree fails in release_cached()")(_release_fault)
case("11 driver failures", "cuEventRecord fails in a cross-stream free")(_cross_stream_fault)
case("11 driver failures", "8 threads x 25,000 malloc/free, contents checked (valid)")(_threads)


# ---- the runner -----------------------------------------------------------------------------
def _child(fn, conn) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10
    try:
        with contextlib.redirect_stderr(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = fn()
    except MemoryError:
        out = "crash"
    except BaseException as e:  # noqa: BLE001 - the case itself failed: a crash of the code
        out = f"crash:{type(e).__name__}: {e}"[:300]
    grew = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10) - rss0
    if out == "clear error" and grew > BLOWUP_BYTES:
        out = f"wrong:refused after growing by {grew:,} bytes"
    conn.send(out)
    conn.close()


def run_case(fn) -> tuple[str, str]:
    ctx = mp.get_context("fork")
    a, b = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_child, args=(fn, b))
    p.start()
    b.close()
    got = None
    if a.poll(TIME_LIMIT_S):
        try:
            got = a.recv()
        except EOFError:
            got = None
    p.join(5)
    if p.is_alive():
        p.kill()
        p.join()
        return "hang", f"still running after {TIME_LIMIT_S:.0f} s"
    if got is None:
        return "crash", f"died (exit {p.exitcode})"
    outcome, _, detail = got.partition(":")
    return outcome, detail


def _table(rows: list[dict]) -> tuple[list[str], dict]:
    classes = list(dict.fromkeys(r["class"] for r in rows))
    table = ["| class | inputs tried | " + " | ".join(OUTCOMES) + " |",
             "|---|---:|" + "---:|" * len(OUTCOMES)]
    totals = dict.fromkeys(OUTCOMES, 0)
    for c in classes:
        mine = [r for r in rows if r["class"] == c]
        counts = {o: sum(r["outcome"] == o for r in mine) for o in OUTCOMES}
        for o in OUTCOMES:
            totals[o] += counts[o]
        table.append(f"| {c} | {len(mine)} | " + " | ".join(str(counts[o]) for o in OUTCOMES) + " |")
    table.append(f"| **all** | **{len(rows)}** | " + " | ".join(f"**{totals[o]}**" for o in OUTCOMES)
                 + " |")
    return table, totals


def _before_section(path: str | None) -> list[str]:
    if not path:
        return []
    doc = json.loads(Path(path).read_text())
    p = doc["provenance"]
    table, _ = _table(doc["rows"])
    return [f"## Before: the same inputs against {p.get('label') or p['uvm_sched']}\n",
            f"Run {p['date']} with `PYTHONPATH` pointing at that tree ({p['command']}); "
            "a valid input that tree refuses (e.g. a flag it does not have) counts as wrong "
            "there.\n", "\n".join(table) + "\n"]


def main(argv=None) -> int:
    global IN
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(HERE / "results" / "reliability"),
                    help="path prefix of the .md and .json written")
    ap.add_argument("--only", help="run only the classes whose name contains this")
    ap.add_argument("--label", default="",
                    help="what the package under test is (e.g. 'commit e04f2c1, before the fix')")
    ap.add_argument("--before", metavar="JSON",
                    help="the .json of an earlier run (e.g. of the tree before a fix, with "
                         "PYTHONPATH pointing at it), shown beside this run's table")
    args = ap.parse_args(argv)
    from bench_quality import provenance, provenance_md

    prov = provenance(argv if argv is not None else sys.argv)
    prov["simulated"] = False
    prov["uvm_sched"] = str(Path(uvm_sched.__file__).parent)
    prov["label"] = args.label
    t0 = time.perf_counter()
    root = Path(tempfile.mkdtemp(prefix="uvm_reliability_"))
    rows: list[dict] = []
    try:
        IN = Inputs(root)
        for cls, what, fn in CASES:
            if args.only and args.only not in cls:
                continue
            t = time.perf_counter()
            outcome, detail = run_case(fn)
            if outcome not in OUTCOMES:
                outcome, detail = "crash", f"{outcome}: {detail}"
            rows.append({"class": cls, "input": what, "outcome": outcome, "detail": detail,
                         "seconds": round(time.perf_counter() - t, 3)})
            print(f"{outcome:12s} {cls} | {what}" + (f"  ({detail})" if detail else ""),
                  flush=True)
    finally:
        with contextlib.suppress(OSError):
            os.chmod(root, 0o755)
        shutil.rmtree(root, ignore_errors=True)
    prov["elapsed_s"] = round(time.perf_counter() - t0, 1)
    table, totals = _table(rows)
    bad = [r for r in rows if r["outcome"] in ("crash", "hang", "wrong", "data loss")]
    md = ["# Reliability: bad inputs, really run\n",
          "Produced by `benchmarks/bench_reliability.py`: every input below runs in a forked "
          f"child with a {TIME_LIMIT_S:.0f} s limit and a {MEMORY_LIMIT >> 30} GiB address-space "
          "limit. Outcomes: **clear error** (exit 2 with one line, or the documented exception "
          "type, before any damage); **accepted** (a valid input, served right: the controls); "
          "**crash** (signal, exit 1, undocumented exception); **hang**; **wrong** (bad input "
          f"accepted, a value misread, or refused only after growing by more than "
          f"{BLOWUP_BYTES >> 20} MiB); **data loss** (an output truncated or its old contents "
          "gone, a temporary left behind, an input overwritten).\n",
          provenance_md(prov).replace(
              "- all figures are **simulated** (uvm_sched.sim with the named hardware profile), "
              "not measured on a GPU\n", "") + f"- package under test: `{prov['uvm_sched']}`\n"
          + (f"- label: {args.label}\n" if args.label else "")
          + f"- elapsed: {prov['elapsed_s']} s\n",
          "\n".join(table) + "\n",
          *_before_section(args.before),
          "## Every input\n",
          "| class | input | outcome | detail |", "|---|---|---|---|"]
    md += [f"| {r['class']} | `{r['input'][:90]}` | {r['outcome']} | {r['detail'][:120]} |"
           for r in rows]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".md").write_text("\n".join(md) + "\n")
    out.with_suffix(".json").write_text(json.dumps({"provenance": prov, "rows": rows,
                                                     "totals": totals}, indent=1) + "\n")
    print("\n".join(table))
    print(f"wrote {out.with_suffix('.md')} and .json ({prov['elapsed_s']} s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
