"""The native face's shape: one definition of the ring's event kinds, mirroring the C
header, and ``native.py`` importing nothing heavier than numpy (DESIGN.md's rule)."""
import ast
import re
from pathlib import Path

import uvm_sched
from uvm_sched import native
from uvm_sched._codes import NativeEvent
from uvm_sched.trace._model import EventKind

PKG = Path(uvm_sched.__file__).parent


def test_native_event_codes_mirror_the_c_header():
    header = (PKG / "_native" / "uvm_sched.h").read_text()
    enum = re.search(r"enum uvm_event_kind \{(.*?)\};", header, re.S).group(1)
    in_c = {m.group(1): int(m.group(2))
            for m in re.finditer(r"UVM_EV_(\w+)\s*=\s*(\d+)", enum)}
    assert in_c == {k.name: int(k) for k in NativeEvent}


def test_the_trace_kinds_share_the_native_codes():
    for kind in ("ALLOC", "FREE", "MARK"):
        assert int(EventKind[kind]) == int(NativeEvent[kind])


def test_event_kinds_names_every_native_code():
    for k in NativeEvent:
        if not NativeEvent.ACTION <= k <= NativeEvent.ACTION_END:
            assert native.EVENT_KINDS[int(k)] == k.name.lower()


def _heavy(modules):
    return [m for m in modules if re.search(r"(^|\.)(trace|planner|pandas|sim|pattern)(\.|$)", m)]


def test_native_py_imports_no_trace_planner_or_pandas_even_inside_functions():
    tree = ast.parse((PKG / "native.py").read_text())
    imported = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            mod = "." * node.level + (node.module or "")
            imported += [mod] + [f"{mod}.{a.name}" for a in node.names]
    assert _heavy(["pandas", ".trace._model", "..planner", "numpy", "._codes"]) == [
        "pandas", ".trace._model", "..planner"]  # the check can fail
    assert not _heavy(imported), f"native.py imports {_heavy(imported)}"


def test_moved_functions_stay_importable_from_native():
    from uvm_sched.native import action_log, arm_plan, replay  # noqa: F401
    assert {"action_log", "arm_plan", "replay"} <= set(native.__all__)
