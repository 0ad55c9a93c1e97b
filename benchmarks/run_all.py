"""Run every benchmark in turn: each benchmarks/bench_*.py, then the G10 comparison.

Each runs in its own process (so one failure or one heavy import does not affect the next),
with its output streamed; a summary of exit codes and durations comes at the end, and the
exit code is 1 when any benchmark failed.

    python benchmarks/run_all.py                      # everything (tens of minutes)
    python benchmarks/run_all.py --only quality,g10   # a subset, by name
    python benchmarks/run_all.py --quick              # pass --quick to those that take it
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def scripts() -> list[Path]:
    """The benchmarks, in the order they run: bench_*.py by name, then g10_compare.py."""
    out = sorted(HERE.glob("bench_*.py"))
    g10 = HERE / "g10_compare.py"
    if g10.exists():
        out.append(g10)
    return out


def short(p: Path) -> str:
    return p.stem.removeprefix("bench_").removesuffix("_compare")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="comma-separated names (e.g. quality,g10,alloc)")
    ap.add_argument("--quick", action="store_true",
                    help="pass --quick to the benchmarks whose --help mentions it")
    ap.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    args = ap.parse_args(argv)

    todo = scripts()
    if args.list:
        print("\n".join(f"{short(p):>10}  {p.relative_to(HERE.parent)}" for p in todo))
        return 0
    if args.only:
        want = set(args.only.split(","))
        unknown = want - {short(p) for p in todo}
        if unknown:
            ap.error(f"unknown benchmark(s) {sorted(unknown)}; have {[short(p) for p in todo]}")
        todo = [p for p in todo if short(p) in want]

    summary = []
    for script in todo:
        cmd = [sys.executable, str(script)]
        if args.quick:
            helptext = subprocess.run(cmd + ["--help"], capture_output=True, text=True).stdout
            if "--quick" in helptext:
                cmd.append("--quick")
        print(f"\n=== {' '.join(cmd[1:])}", flush=True)
        t0 = time.perf_counter()
        rc = subprocess.run(cmd, cwd=HERE.parent).returncode
        summary.append((short(script), rc, time.perf_counter() - t0))

    print("\n=== summary")
    for name, rc, secs in summary:
        print(f"{name:>10}  {'ok' if rc == 0 else f'FAILED (exit {rc})':<16} {secs:8.1f} s")
    return 0 if all(rc == 0 for _, rc, _ in summary) else 1


if __name__ == "__main__":
    sys.exit(main())
