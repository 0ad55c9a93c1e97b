"""bench_reliability cases, classes 8-9: exit codes and exception types, corrupt
values."""
from __future__ import annotations

import json

import numpy as np

import _rel_common as rel
from _rel_common import api_outcome, case, cli_outcome


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
        return cli_outcome([a.format(t=rel.IN.trace, e=rel.IN.empty, bin=rel.IN.binary, fifo=rel.IN.fifo,
                                     root=rel.IN.root) for a in args] + ["-q"])
    case("8 exit codes / exception types", " ".join(_args).replace("{", "").replace("}", ""))(
        _cli_bad)


def _api_raw(make, fmt):
    def run():
        from uvm_sched.trace import TraceError, load

        p = make(rel.IN.fresh("raw"))
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

        p = rel.IN.fresh("schema") / "t.parquet"
        t = pq.read_table(rel.IN.trace)
        md = dict(t.schema.metadata)
        md[b"uvm_sched.schema_version"] = version
        pq.write_table(t.replace_schema_metadata(md), p)
        return api_outcome(lambda: load(p), (TraceError,))
    return run


for _v in (b"-5", b"0", b"99"):
    case("9 corrupt values accepted", f"Parquet schema version {_v.decode()}")(_schema(_v))
case("9 corrupt values accepted", "a valid trace (valid)")(
    lambda: api_outcome(lambda: __import__("uvm_sched.trace", fromlist=["load"]).load(rel.IN.trace),
                        (ValueError,), check=lambda t: len(t) > 0))
