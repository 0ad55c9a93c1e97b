"""Iterations found against the truth on training-loop shapes (pattern/_evidence.py's Note
[Never invent an iteration]): single-step recordings whose inner loops repeat, multi-step
runs, per-step shapes that vary, with and without step markers -- and the same table across
the plausible range of the rules' constants (PEAK_SLACK, MIN_ITER_COVERAGE), so the
choice of each is visible.

    python benchmarks/bench_periods.py [--save]

Truth: the number of training steps the generator (``pattern._synth.step_trace``) ran. The
right answer with markers is the truth; without them it is the truth, or 1 ("no period")
where fewer than 3 steps leave no evidence of a period. "found" is
``len(analyze(t).iterations)``.
Writes ``results/periods.md`` and ``.json`` with ``--save``.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_quality import provenance  # noqa: E402

from uvm_sched.pattern import _evidence, analyze  # noqa: E402
from uvm_sched.pattern._synth import step_trace  # noqa: E402

SHAPES = {  # name -> (steps, step_trace options)
    "1 step: per-parameter optimizer loop (12 layers)": (1, dict(opt_temps=6)),
    "1 step: repeated backward blocks (31 layers)": (1, dict(layers=31, free_activations="after_backward")),
    "1 step: forward with autotuning (graph run twice)": (1, dict(autotune=8, backward=False, identical_layers=False)),
    "set-up + 2 unequal steps": (2, dict(seqs=(32, 48), state_in_setup=False, opt_temps=6)),
    "6 steps, per-parameter optimizer": (6, dict(opt_temps=6)),
    "6 steps, first allocates Adam state": (6, dict(state_in_setup=False)),
    "6 steps, autotuning before the first": (6, dict(autotune=8)),
    "6 steps, backward blocks": (6, dict(layers=31, free_activations="after_backward")),
    "6 steps, dynamic padding": (6, dict(seqs=(32, 40, 24, 48, 36, 44))),
    "9 steps, dynamic padding, 2 layers": (9, dict(layers=2, seqs=(32, 40, 24, 48, 36, 44, 28, 52, 20))),
    "4 steps, 24 layers": (4, dict(layers=24, opt_temps=6)),
    "1 step, 24 layers": (1, dict(layers=24, opt_temps=6)),
}
SWEEP = {"PEAK_SLACK": (1.1, 1.5, 2.0, 3.0), "MIN_ITER_COVERAGE": (0.6, 0.8, 0.9)}


def expected_plain(steps: int) -> int:
    return steps if steps >= _evidence.MIN_COPIES else 1


def found(steps: int, kw: dict, markers: bool) -> tuple[int, str]:
    p = analyze(step_trace(steps=steps, markers=markers, **kw))
    why = next((n for n in p.notes if n.startswith("no period")), "")
    return len(p.iterations), why


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--save", action="store_true", help="write results/periods.md and .json")
    args = ap.parse_args()
    rows = []
    for name, (steps, kw) in SHAPES.items():
        n_plain, why = found(steps, kw, markers=False)
        n_marked, _ = found(steps, kw, markers=True)
        rows.append({"shape": name, "true": steps, "expected": expected_plain(steps),
                     "found": n_plain, "found_marked": n_marked, "reason": why[:140]})
    sweep = []
    for const, values in SWEEP.items():
        keep = getattr(_evidence, const)
        for v in values:
            setattr(_evidence, const, v)
            try:
                got = [found(steps, kw, markers=False)[0] for steps, kw in SHAPES.values()]
            finally:
                setattr(_evidence, const, keep)
            right = sum(g == expected_plain(s) for g, (s, _) in zip(got, SHAPES.values()))
            sweep.append({"constant": const, "value": v, "default": v == keep,
                          "right": right, "shapes": len(SHAPES), "found": got})
    lines = ["# Iterations found vs the truth", "",
             "| shape | true | right without markers | found (no markers) | found (markers) "
             "| reason when one |",
             "|---|---:|---:|---:|---:|---|"]
    lines += [f"| {r['shape']} | {r['true']} | {r['expected']} | {r['found']} | "
              f"{r['found_marked']} | {r['reason']} |" for r in rows]
    lines += ["", "## The rules' constants across their range (shapes right, of "
              f"{len(SHAPES)}, without markers)", "", "| constant | value | right | found per shape |",
              "|---|---:|---:|---|"]
    lines += [f"| {s['constant']} | {s['value']}{' (default)' if s['default'] else ''} | "
              f"{s['right']}/{s['shapes']} | {s['found']} |" for s in sweep]
    text = "\n".join(lines)
    print(text)
    if args.save:
        prov = provenance()
        prov["simulated"] = False
        out = ROOT / "benchmarks" / "results"
        (out / "periods.md").write_text(
            text + f"\n\n{prov['date']}, commit {prov['commit']}, `{prov['command']}`\n")
        (out / "periods.json").write_text(json.dumps(
            {"provenance": prov, "rows": rows, "sweep": sweep}, indent=1))


if __name__ == "__main__":
    main()
