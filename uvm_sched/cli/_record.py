"""``uvm-sched record``: a zoo model's training iterations on meta tensors, or a user's
training script as it runs (``uvm-sched record -- python train.py ARGS``).

The rule: the script runs unchanged, in a child Python inside ``uvm_sched.trace.recording()``
(``uvm_sched.trace._live``), so nothing of it has to be edited and its own output never mixes
into ``--json`` (it goes to stderr then). The output file and the hardware profile are
checked before the recording starts: minutes of recording must not end in "cannot write".
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from .._fmt import fmt_seconds
from . import _args, _inputs
from ._output import (EXIT_FAIL, EXIT_OK, EXIT_USAGE, PROG, Out, UsageError, clean, output, part,
                      writable)

EXAMPLES = ("  uvm-sched record -o train.parquet -- python train.py --epochs 1\n"
            "  uvm-sched record --list\n"
            "  uvm-sched record resnet50 --batch 32 -o resnet50.parquet\n"
            "  uvm-sched record gpt2_small --batch 8 --seq 512 --iters 4 -o gpt2.parquet\n")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", nargs="?", metavar="MODEL", help="zoo model name (see --list)")
    p.add_argument("script", nargs="*", metavar="-- python SCRIPT ARGS",
                   help="run this training script unchanged and record it (iterations = its "
                        "optimizer steps, or its uvm_sched.step() calls)")
    p.add_argument("--device", help="-- python: the tensors' device to record (cpu, cuda; "
                                    "default cuda when available)")
    p.add_argument("--list", action="store_true", help="list the zoo's models and exit")
    p.add_argument("--batch", type=_args.positive_int,
                   help="batch size (default: the model's training size, as in the benchmark "
                        "tables; --list shows each model's)")
    p.add_argument("--seq", type=_args.positive_int, help="tokens per sample (text models; default "
                                                          "as --batch)")
    p.add_argument("--image", type=_args.positive_int, help="image side in pixels (vision models; "
                                                            "default as --batch)")
    p.add_argument("--iters", type=_args.positive_int, default=3,
                   help="iterations to record (default 3)")
    p.add_argument("--amp", action="store_true", help="mixed precision (bf16 autocast)")
    _args.hw_arg(p)
    p.add_argument("-o", "--output", metavar="FILE",
                   help="Parquet trace to write (default MODEL.parquet)")


def run(args: argparse.Namespace, out: Out) -> int:
    zoo_names = part("uvm_sched.trace.zoo", "names", "the model zoo")
    zoo_info = part("uvm_sched.trace.zoo", "info", "the model zoo")
    names = list(zoo_names())
    if args.list:
        infos = [zoo_info(n) for n in names]
        if out.json:
            out.emit_json({"models": names,
                           "defaults": {i["name"]: _inputs.sizes_of(i) for i in infos}})
        else:
            w = max(map(len, names))
            out.stdout.print("\n".join(
                f"{i['name']:<{w}}  {_inputs.sizes_text(_inputs.sizes_of(i)):<24}  {i['about']}"
                for i in infos), markup=False)
        return EXIT_OK
    if args.model and (args.script or _is_python(args.model)) and args.model not in names:
        return _record_script(args, out, [args.model, *args.script])
    if not args.model:
        raise UsageError("record needs a MODEL (uvm-sched record --list shows the zoo) or a "
                         "script: uvm-sched record -- python train.py ARGS")
    if args.script:
        raise UsageError(f"record takes a zoo MODEL or `-- python SCRIPT ARGS`, not both "
                         f"(got {args.model!r} and {' '.join(args.script)!r})")
    if args.model not in names:
        raise UsageError(f"unknown model {args.model!r}; the zoo has: {', '.join(names)}")
    dest = writable(args.output or f"{args.model}.parquet")
    _inputs.profile(args.hw)  # an unknown profile is a usage error before minutes of recording
    record = part("uvm_sched.trace.zoo", "record", "the model zoo")
    opts = _inputs.zoo_sizes(args.model, args.batch, args.seq, args.image)
    t0 = time.perf_counter()
    with out.progress(description=f"recording {args.model}") as bar:
        bar.step(f"recording {args.model} on meta tensors")
        trace = record(args.model, iters=args.iters, hw=args.hw, amp=args.amp, **opts)
    elapsed = time.perf_counter() - t0
    with output(dest) as tmp:
        trace.save(tmp)
    info = _inputs.trace_info(trace)
    used = _inputs.sizes_of(trace.meta)
    if out.json:
        out.emit_json(clean({"path": str(dest), "model": args.model, "record_s": elapsed,
                             "sizes": used, **info}))
    else:
        given = set(opts)
        defaults = [k for k in used if k not in given]
        words = {"batch": "batch", "seq": "tokens", "image": "image side"}
        out.stdout.print(f"{args.model} at {_inputs.sizes_text(used)}"
                         + (f" ({', '.join(words[k] for k in defaults)}: the model's default, "
                            "as in the benchmark tables)" if defaults else ""), markup=False)
        out.stdout.print(_inputs.trace_line(info), markup=False)
        out.note(f"wrote {dest} (recorded in {fmt_seconds(elapsed)})")
    return EXIT_OK


def _is_python(word: str) -> bool:
    return os.path.basename(word).startswith("python")


def _record_script(args: argparse.Namespace, out: Out, command: list[str]) -> int:
    """``uvm-sched record -- python SCRIPT ARGS``: the script runs unchanged in a child
    Python inside ``uvm_sched.trace.recording()`` (uvm_sched.trace._live)."""
    import shutil
    import subprocess

    if not _is_python(command[0]):
        raise UsageError(f"record runs a Python script: `uvm-sched record -- python SCRIPT "
                         f"ARGS` (or `python -m MODULE ARGS`), got {command[0]!r}")
    if len(command) < 2:
        raise UsageError("record -- python needs a script: uvm-sched record -- python "
                         "train.py ARGS")
    exe = shutil.which(command[0])
    if exe is None:
        raise UsageError(f"no Python named {command[0]!r} on PATH")
    if command[1] != "-m" and not Path(command[1]).is_file():
        raise FileNotFoundError(f"no such script: {command[1]}")
    name = Path(command[2] if command[1] == "-m" and len(command) > 2 else command[1]).stem
    dest = writable(args.output or f"{name}.parquet")
    _inputs.profile(args.hw)
    t0 = time.perf_counter()
    child = [exe, "-m", "uvm_sched.trace._live", str(dest), args.hw, args.device or "-", "--",
             *command[1:]]
    # the script's own prints must not mix into --json output on stdout
    rc = subprocess.call(child, stdout=sys.stderr if out.json else None)
    elapsed = time.perf_counter() - t0
    if rc != 0:
        sys.stderr.write(f"{PROG} record: the script exited with status {rc}; no trace "
                         "written\n")
        return EXIT_USAGE if rc == 2 else EXIT_FAIL
    trace = _inputs.load_trace(str(dest), None, None)
    info = _inputs.trace_info(trace)
    m = trace.meta
    if out.json:
        out.emit_json(clean({"path": str(dest), "command": command, "record_s": elapsed,
                             "optimizer_steps": m.get("optimizer_steps"),
                             "markers": len(trace.iteration_starts),
                             "steps_signal": m.get("steps_signal"), "route": m.get("route"),
                             "time_source": m.get("time_source"), **info}))
    else:
        out.stdout.print(f"{' '.join(command)}: {m.get('optimizer_steps', 0):,} optimizer "
                         f"step(s), {len(trace.iteration_starts):,} iteration marker(s) from "
                         f"{m.get('steps_signal')}", markup=False)
        out.stdout.print(_inputs.trace_line(info), markup=False)
        out.stdout.print(f"device time: {m.get('time_source')}", markup=False)
        out.note(f"wrote {dest} (recorded in {fmt_seconds(elapsed)})")
    return EXIT_OK
