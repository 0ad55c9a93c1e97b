"""bench_reliability's shared parts: the limits, the case registry, the inputs made once
in the parent (``IN``, set by ``bench_reliability.main`` before any fork) and the outcome
helpers. The cases are in ``_rel_cases_*.py`` (one module per group of classes)."""
from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path

from _reliability import run_cli, small_trace

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


@contextlib.contextmanager
def host(**env):
    """The native library on the host backend (tests/native's fake CUDA), ``env`` set."""
    import fakecuda

    with fakecuda.backend("host", **env) as f:
        yield f
