"""``uvm-sched export``: a trace converted for other viewers (PyTorch's memory_viz, Perfetto).

The rule: each format has one exporter in ``uvm_sched.trace`` and one default suffix here;
the command only picks them, checks the output before converting, and writes the file whole
or not at all.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from .._fmt import fmt_bytes
from . import _args, _inputs
from ._output import EXIT_OK, Out, output, part, writable

EXAMPLES = ("  uvm-sched export gpt2.parquet --to torch-snapshot -o gpt2.pickle   "
            "# pytorch.org/memory_viz\n"
            "  uvm-sched export gpt2.parquet --to perfetto -o gpt2.json          "
            "# ui.perfetto.dev\n")

EXPORTERS = {"torch-snapshot": "export_torch_snapshot", "perfetto": "export_perfetto"}
SUFFIX = {"torch-snapshot": ".pickle", "perfetto": ".json"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    _args.trace_arg(p)
    p.add_argument("--to", required=True, choices=sorted(EXPORTERS), help="output format")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="file to write (default: the trace's name with .pickle / .json)")


def run(args: argparse.Namespace, out: Out) -> int:
    # bad input first, before any missing part
    trace = _inputs.load_trace(args.trace, args.device, args.assume_tick_us)
    fn = part("uvm_sched.trace", EXPORTERS[args.to], f"the {args.to} exporter")
    dest = writable(args.output or (Path(args.trace).stem + SUFFIX[args.to]), args.trace)
    with out.progress(description="export") as bar:
        bar.step(f"writing {args.to}")
        with output(dest) as tmp:
            fn(trace, tmp)
    if out.json:
        out.emit_json({"path": str(dest), "format": args.to, "bytes": dest.stat().st_size})
    else:
        out.note(f"wrote {dest} ({args.to}, {fmt_bytes(dest.stat().st_size)})")
    return EXIT_OK
