"""The calibration script (kernels/measure.py) cannot rot between GPU sessions: it imports
without a GPU, refuses the host backend with the reason, every call it makes into
uvm_sched.native binds to the real signature with valid literal arguments, and every
numba.cuda function it uses exists with the keywords it passes."""
from __future__ import annotations

import ast
import inspect
import os
import subprocess
import sys

import pytest

from conftest import REPO

from uvm_sched import native
from uvm_sched.planner import ACTIONS

SRC = (REPO / "kernels" / "measure.py").read_text()
TREE = ast.parse(SRC)


def _calls_on(attr_owner: str):
    """Calls ``<...>.<attr_owner>.<name>(...)`` or ``<attr_owner>.<name>(...)`` in
    measure.py, as (name, call node)."""
    out = []
    for node in ast.walk(TREE):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        owner = node.func.value
        if ((isinstance(owner, ast.Attribute) and owner.attr == attr_owner)
                or (isinstance(owner, ast.Name) and owner.id == attr_owner)):
            out.append((node.func.attr, node))
    return out


def _bind(fn, call: ast.Call):
    """Bind the call's shape (positional count, keyword names) to fn's signature, with
    literal values where the source has them."""
    args = [a.value if isinstance(a, ast.Constant) else object() for a in call.args]
    kw = {k.arg: (k.value.value if isinstance(k.value, ast.Constant) else object())
          for k in call.keywords}
    return inspect.signature(fn).bind(*args, **kw)


def test_measure_imports_without_a_gpu():
    import kernels.measure as m

    assert callable(m.measure) and callable(m.main)


def test_every_native_call_binds_to_the_real_signature():
    calls = _calls_on("native")
    used = {name for name, _ in calls}
    assert {"prefetch", "advise", "discard", "release_cached", "stream_handle"} <= used, used
    for name, call in calls:
        if name == "UnsupportedError":
            continue
        fn = getattr(native, name)  # AttributeError = a function that does not exist
        bound = _bind(fn, call)
        a = bound.arguments
        if name == "prefetch" and isinstance(a.get("to"), str):
            assert a["to"] in ("device", "host"), ast.unparse(call)
        if name == "advise":
            assert a["advice"] in ACTIONS and a["advice"].startswith("advise_"), ast.unparse(call)
    # the exception it catches is the one discard raises
    assert "native.UnsupportedError" in SRC and issubclass(native.UnsupportedError, Exception)


def test_advice_set_during_the_measurement_is_unset_before_the_free():
    sets = [c for n, c in _calls_on("native") if n == "advise"
            and not any(k.arg == "unset" for k in c.keywords)]
    unsets = [c for n, c in _calls_on("native") if n == "advise"
              and any(k.arg == "unset" for k in c.keywords)]
    assert {c.args[2].value for c in sets} == {c.args[2].value for c in unsets}


def test_the_numba_cuda_calls_exist_with_the_keywords_used():
    # the real numba.cuda (not the simulator): names and keywords only, no device needed
    from numba import cuda

    for name, call in _calls_on("cuda"):
        fn = getattr(cuda, name)
        kws = {k.arg for k in call.keywords}
        try:
            params = inspect.signature(fn).parameters
        except (TypeError, ValueError):
            continue  # a builtin without a signature
        if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            assert kws <= set(params), (name, kws, list(params))


def test_measure_refuses_the_host_backend_with_the_reason(tmp_path):
    env = dict(os.environ, UVM_SCHED_BACKEND="host", PYTHONPATH=str(REPO))
    r = subprocess.run([sys.executable, "-m", "kernels.measure", str(tmp_path / "cal.json")],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "calibration needs the cuda backend" in r.stderr and "host emulation" in r.stderr
    assert not (tmp_path / "cal.json").exists()


@pytest.mark.gpu
def test_calibration_on_the_gpu_gives_a_profile_the_simulator_accepts(tmp_path):
    from uvm_sched.hw import load_profile

    out = tmp_path / "cal.json"
    r = subprocess.run([sys.executable, "-m", "kernels.measure", str(out), "--gib", "0.25",
                        "--repeats", "2"], cwd=REPO, capture_output=True, text=True,
                       timeout=300, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert r.returncode == 0, r.stderr[-3000:]
    prof = load_profile("h200-pcie5").recalibrated(out)
    assert prof.h2d_prefetch_Bps > 1e9 and prof.fault_batch_latency_s < 1e-2
