"""The size rule of the house (issue 19): no Python function over 120 lines and no file
over 700 (Python or C), so that each reads in one look -- a long explanation goes into a
named note, a long function into its documented steps. Checked from the source with ``ast``
over the whole package (as imported: the source tree, or the installed wheel), the
benchmarks and the scripts. A function's lines run from its ``def`` to its last line
(decorators left out); nested functions and methods count on their own as well as inside
their parent."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

import uvm_sched

PKG = Path(uvm_sched.__file__).resolve().parent
ROOT = Path(__file__).resolve().parents[1]  # benchmarks/ and scripts/ beside tests/
MAX_FUNCTION_LINES = 120
MAX_FILE_LINES = 700


def oversized(files: list[Path]) -> list[str]:
    """'path: N lines' for every file over MAX_FILE_LINES and 'path:LINE name(): N lines'
    for every Python function or method over MAX_FUNCTION_LINES."""
    found = []
    for path in files:
        text = path.read_text(encoding="utf-8")
        if (n := len(text.splitlines())) > MAX_FILE_LINES:
            found.append(f"{path.name}: {n} lines")
        if path.suffix != ".py":
            continue
        for node in ast.walk(ast.parse(text, filename=str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    found.append(f"{path}:{node.lineno} {node.name}(): {length} lines")
    return found


def _python_files() -> list[Path]:
    files = sorted(PKG.rglob("*.py"))
    for folder in ("benchmarks", "scripts"):
        files += sorted((ROOT / folder).rglob("*.py"))
    return files


def test_the_size_check_finds_a_long_method_and_a_long_file(tmp_path):
    body = "\n".join(f"        x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    long = tmp_path / "long.py"
    long.write_text(f"def short():\n    pass\n\nclass A:\n    def long(self):\n{body}\n")
    big = tmp_path / "big.c"
    big.write_text("/* */\n" * (MAX_FILE_LINES + 1))
    assert oversized([long, big]) == [f"{long}:5 long(): {MAX_FUNCTION_LINES + 1} lines",
                                      f"big.c: {MAX_FILE_LINES + 1} lines"]
    long.write_text(long.read_text().replace("        x119 = 119\n", ""))
    assert oversized([long]) == []


def test_no_python_function_over_120_lines_and_no_file_over_700():
    files = _python_files()
    # the check covers what it claims: the package's parts, the benchmarks and the GPU kit
    names = {p.relative_to(p.parents[1]).as_posix() for p in files}
    assert {"cli/_output.py", "planner/_core.py", "trace/_recorder.py", "sim/_engine.py",
            "benchmarks/bench_scale.py", "scripts/gpu_check.py"} <= names, sorted(names)[:20]
    assert oversized(files) == []


def test_no_c_file_of_the_native_core_over_700_lines():
    files = sorted(p for ext in ("*.c", "*.h", "*.cpp") for p in (PKG / "_native").glob(ext))
    if not files:
        pytest.skip("the native sources are not installed with the package (a wheel): the "
                    "source-tree run checks them")
    assert oversized(files) == []
