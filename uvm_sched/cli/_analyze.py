"""``uvm-sched analyze``: what a trace holds and the iteration pattern learned from it
(period, block classes, lifetimes).

The rule: a multi-GPU run saves one trace per process, and each is analysed and reported on
its own (one rank's pattern says nothing about another's); with one trace the JSON is that
trace's document, with several a ``ranks`` list of them.
"""
from __future__ import annotations

import argparse

from . import _args, _inputs
from ._output import EXIT_OK, Out, clean, part

EXAMPLES = ("  uvm-sched analyze gpt2.parquet\n  uvm-sched analyze snapshot.pickle --json\n"
            "  uvm-sched analyze trace0.parquet trace1.parquet   (one per rank)\n")


def add_arguments(p: argparse.ArgumentParser) -> None:
    _args.trace_arg(p, several="trace file(s); several: one per rank, reported per rank")


def run(args: argparse.Namespace, out: Out) -> int:
    # one trace per rank (a multi-GPU run saves one per process): each reported on its own
    traces = [_inputs.load_trace(path, args.device, args.assume_tick_us) for path in args.trace]
    analyze = part("uvm_sched.pattern", "analyze", "pattern analysis")
    reports = []
    with out.progress(total=len(traces), description="analysing") as bar:
        for path, trace in zip(args.trace, traces):
            bar.step(f"learning the iteration pattern of {path}")
            reports.append((path, trace, analyze(trace)))
            bar.advance()
    if out.json:
        docs = [{"trace": _inputs.trace_info(t), "pattern": p.summary()} for _, t, p in reports]
        out.emit_json(clean(docs[0] if len(docs) == 1 else
                            {"ranks": [dict(d, path=path, rank=t.meta.get("rank"),
                                            device=t.meta.get("device"))
                                       for d, (path, t, _) in zip(docs, reports)]}))
        return EXIT_OK
    for path, trace, pattern in reports:
        if len(reports) > 1:
            out.stdout.print(f"== rank {trace.meta.get('rank', '?')}, device "
                             f"{trace.meta.get('device', '?')}: {path}", markup=False)
        out.stdout.print(_inputs.trace_line(_inputs.trace_info(trace)), markup=False)
        out.stdout.print(str(pattern), markup=False)
    return EXIT_OK
