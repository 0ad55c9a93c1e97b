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
import io
import json
import multiprocessing as mp
import os
import resource
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.append(str(REPO))  # after PYTHONPATH: the package under test can be another tree
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "tests" / "native"))
sys.path.insert(0, str(HERE))

import uvm_sched  # noqa: E402,F401 - first, so that PYTHONPATH (not bench_quality's path) picks it
import _rel_common as rel  # noqa: E402
from _rel_common import (BLOWUP_BYTES, CASES, MEMORY_LIMIT, OUTCOMES, TIME_LIMIT_S,  # noqa: E402
                         Inputs)
# the cases register themselves in class order (1-3, 4-7, 8-9, 10-11)
import _rel_cases_files  # noqa: E402,F401
import _rel_cases_runtime  # noqa: E402,F401
import _rel_cases_errors  # noqa: E402,F401
import _rel_cases_native  # noqa: E402,F401


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
        rel.IN = Inputs(root)
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
