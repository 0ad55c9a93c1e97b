"""The planner and the pattern analysis stay readable in one look: no function over
MAX_FUNCTION_LINES lines and no module over MAX_MODULE_LINES (issue 19's size rule; a long
explanation goes into a named note, a long function into its steps)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "uvm_sched"
MAX_FUNCTION_LINES = 120
MAX_MODULE_LINES = 700
CHECKED = ("planner", "pattern")


def _modules() -> list[Path]:
    return sorted(p for part in CHECKED for p in (PACKAGE / part).glob("*.py"))


def _long_functions(path: Path, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """``name:line (n lines)`` of every function or method in ``path`` over ``limit``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n = (node.end_lineno or node.lineno) - node.lineno + 1
            if n > limit:
                out.append(f"{node.name}:{node.lineno} ({n} lines)")
    return out


def test_the_checked_parts_have_their_modules():
    names = {p.name for p in _modules()}
    assert {"_core.py", "_planner.py", "_fast_kernels.py", "_analyze.py"} <= names


@pytest.mark.parametrize("path", _modules(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_planner_or_pattern_function_is_over_120_lines(path):
    assert not _long_functions(path), path


@pytest.mark.parametrize("path", _modules(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_planner_or_pattern_module_is_over_700_lines(path):
    n = len(path.read_text().splitlines())
    assert n <= MAX_MODULE_LINES, f"{path}: {n} lines"


def test_the_size_check_finds_a_long_method_and_not_a_short_function(tmp_path):
    body = "\n".join(f"        x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    src = tmp_path / "long.py"
    src.write_text(f"def short():\n    return 1\n\n\nclass K:\n    def long(self):\n{body}\n"
                   "        return x0\n")
    assert _long_functions(src) == [f"long:6 ({MAX_FUNCTION_LINES + 2} lines)"]
