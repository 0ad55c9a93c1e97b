"""``uvm-sched sidebyside``: each ``kernels/`` microbenchmark beside its simulator twin.

The rule: one row per scenario of ``uvm_sched.sim.TWINS``, ``measured | simulated |
ratio`` (simulated over measured); the measured column comes from a ``kernels.measure``
result (``--measured calibration.json``, which the GPU kit writes) and reads "no GPU"
without one, so on a machine without a GPU the command prints the simulated column alone.
Rates are in GB/s (10^9 bytes per second), times per VA block in µs, first touch in ms
per GiB. The profile is the one the simulator would use (``--hw``), not the measurement's:
the table says how far that profile is from the device.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from . import _args, _inputs
from ._output import EXIT_OK, Out, UsageError, clean, part, table, writable, write_text

EXAMPLES = ("  uvm-sched sidebyside                              # simulated column alone\n"
            "  uvm-sched sidebyside --measured calibration.json --hw h200-pcie5 -o sbs.json\n")

NO_GPU = "no GPU"
# unit of a twin -> (how it is shown, the factor from the twin's unit)
_SHOWN = {"B/s": ("GB/s", 1e-9), "s": ("µs", 1e6), "s/GiB": ("ms/GiB", 1e3)}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--measured", metavar="FILE", default=None,
                   help="calibration.json written by kernels.measure (the GPU kit's "
                        "calibrate step); without it the measured column reads 'no GPU'")
    _args.hw_arg(p)
    p.add_argument("--gib", type=float, default=None,
                   help="buffer size of the twins in GiB (default: the measurement's, else 1)")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="also write the table as JSON (the --json document) to FILE")


def _figure(v, unit: str) -> str:
    if v is None:
        return ""
    shown, k = _SHOWN[unit]
    return f"{v * k:,.4g} {shown}"


def run(args: argparse.Namespace, out: Out) -> int:
    hw = _inputs.profile(args.hw)
    dest = writable(args.output, args.measured) if args.output else None
    side_by_side = part("uvm_sched.sim", "side_by_side", "the simulator's twins")
    measured = None
    if args.measured is not None:
        read = part("uvm_sched.sim._twins", "read_measurements", "the simulator's twins")
        try:
            measured = read(Path(args.measured))
        except ValueError as e:
            raise UsageError(str(e)) from None
    if args.gib is not None and not args.gib > 0:
        raise UsageError(f"--gib must be > 0, got {args.gib}")
    nbytes = None if args.gib is None else int(args.gib * (1 << 30))
    try:
        rows = side_by_side(measured, hw, nbytes)
    except ValueError as e:  # a buffer too small for the twins
        raise UsageError(str(e)) from None
    source = (measured.get("source") or args.measured) if measured else NO_GPU
    doc = clean({"hw": hw.name, "measured_source": source, "measured_file": args.measured,
                 "rows": rows})
    if dest is not None:
        write_text(dest, json.dumps(doc, indent=1) + "\n")
        out.note(f"wrote {dest}")
    if out.json:
        out.emit_json(doc)
        return EXIT_OK
    out.stdout.print(f"simulated on {hw.name}; measured: {source}", markup=False)
    cells = []
    for r in rows:
        m = _figure(r["measured"], r["unit"]) if measured else NO_GPU
        if measured and r["measured"] is None:
            m = "not measured"
        ratio = "" if r["ratio"] is None else f"{r['ratio']:.2f}"
        cells.append((r["scenario"], m, _figure(r["simulated"], r["unit"]), ratio))
    out.stdout.print(table(None, ("scenario", "measured", "simulated", "ratio"), cells,
                           right=(1, 2, 3)))
    if measured:
        out.stdout.print("ratio = simulated / measured (1.00: the simulator matches the "
                         "device on that mechanism)", markup=False)
    return EXIT_OK
