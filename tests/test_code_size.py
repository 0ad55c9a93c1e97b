"""The size rule of the house (issue 19): no Python function over 120 lines and no file over
700, so that each reads in one look. Checked here for the trace package, the synthetic
trace generators, the GPU kit, the simulator's compiled kernels, the report page and the
scale benchmark (whose long functions and files were split into their documented steps
or cohesive modules), and ``native.py`` (the ctypes face, which must stay small).
Measured from the source with ``ast``: a function's lines run from its ``def`` to its last
statement, nested functions and methods counted on their own as well as inside their
parent."""
import ast
from pathlib import Path

import uvm_sched

PKG = Path(uvm_sched.__file__).parent
REPO = PKG.parent
MAX_FUNCTION_LINES = 120
MAX_FILE_LINES = 700


def _long_functions(src: str, limit: int = MAX_FUNCTION_LINES) -> list[tuple[str, int]]:
    """(qualified name, lines) of every function of ``src`` longer than ``limit`` lines."""
    out = []

    def visit(node, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    n = child.end_lineno - child.lineno + 1
                    if n > limit:
                        out.append((name, n))
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(src), "")
    return out


def _files():
    trace = sorted((PKG / "trace").rglob("*.py"))
    return trace + [PKG / "pattern" / "_synth.py", REPO / "scripts" / "gpu_check.py",
                    PKG / "sim" / "_fast_kernels.py", PKG / "sim" / "_fast_memory.py",
                    PKG / "viz" / "_report.py", REPO / "benchmarks" / "bench_scale.py"]


def test_the_size_check_finds_a_long_function_nested_or_not():
    body = "\n".join(f"        x{i} = {i}" for i in range(120))
    src = f"def short():\n    pass\n\nclass A:\n    def long(self):\n{body}\n"
    assert _long_functions(src) == [("A.long", 121)]
    assert _long_functions(src.replace("        x119 = 119\n", "")) == []


def test_no_function_of_the_trace_package_or_generators_is_over_120_lines():
    long = {f"{p.relative_to(REPO)}: {name}": n for p in _files()
            for name, n in _long_functions(p.read_text())}
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"


def test_no_file_of_the_trace_package_or_generators_is_over_700_lines():
    big = {str(p.relative_to(REPO)): n for p in _files() + [PKG / "native.py"]
           if (n := len(p.read_text().splitlines())) > MAX_FILE_LINES}
    assert not big, f"files over {MAX_FILE_LINES} lines: {big}"
