"""bench_reliability cases, classes 1-3: outputs written in place, output = input,
memory blow-ups, devices and FIFOs as inputs."""
from __future__ import annotations

import gzip
import shutil
from pathlib import Path


import _rel_common as rel
from _rel_common import OLD, api_outcome, case, cli_outcome
from _reliability import full_disk, leftovers, readonly_dir


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
        folder = rel.IN.fresh("w") / "out"
        ctx = full_disk if where == "full disk" else readonly_dir
        with ctx(folder, keep={dest_name: OLD}):
            out = cli_outcome([a.format(t=rel.IN.trace) for a in args] + [folder / dest_name])
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
        d = rel.IN.fresh("ok")
        (d / dest_name).write_bytes(OLD)
        out = cli_outcome([a.format(t=rel.IN.trace) for a in args] + [d / dest_name], expect_ok=True)
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
        d = rel.IN.fresh("same")
        t, p = d / "t.parquet", d / "p.json"
        shutil.copy(rel.IN.trace, t)
        shutil.copy(rel.IN.plan, p)
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

        p = make(rel.IN.fresh("load"))
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
                     ("20 GiB sparse file", _sparse), ("FIFO with no writer", lambda d: rel.IN.fifo),
                     ("/dev/zero", lambda d: Path("/dev/zero")),
                     ("/dev/urandom", lambda d: Path("/dev/urandom")),
                     ("gzip of 2 GiB of spaces", _gzbomb), ("JSON nested 200,000 deep", _deep_json),
                     ("pickle nested 200,000 deep", _deep_pickle)]:
    case("3 memory blow-up / devices / FIFOs", _what)(_load_case(_make))
