"""One error family: every exception class uvm_sched defines derives from uvm_sched.Error
(and keeps its builtin base), every warning from uvm_sched.Warning, and each exception
round-trips through pickle with its message and its numbers."""
from __future__ import annotations

import importlib
import inspect
import pickle
import pkgutil
import warnings

import pytest

import uvm_sched
from uvm_sched import native


def _package_classes(base: type) -> list[type]:
    found = {}
    for info in pkgutil.walk_packages(uvm_sched.__path__, "uvm_sched."):
        if info.name.endswith("__main__"):
            continue
        try:
            mod = importlib.import_module(info.name)
        except ImportError:  # an optional framework (cupy) is absent: its module is thin
            continue
        for _, obj in inspect.getmembers(mod, inspect.isclass):
            if issubclass(obj, base) and obj.__module__.startswith("uvm_sched"):
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return [found[k] for k in sorted(found)]


EXCEPTIONS = _package_classes(BaseException)


def test_the_package_defines_the_classes_this_test_knows():
    names = {c.__name__ for c in EXCEPTIONS}
    # a floor, not the list: a new class is checked by the tests below automatically
    assert {"TraceError", "PatternError", "PlanError", "BudgetError", "ProfileError",
            "FreeError", "UvmSchedError", "OutOfMemoryError", "UnsupportedError",
            "Error", "Warning"} <= names


@pytest.mark.parametrize("cls", EXCEPTIONS, ids=lambda c: c.__name__)
def test_every_exception_is_a_uvm_sched_error_and_every_warning_a_uvm_sched_warning(cls):
    if issubclass(cls, Warning):
        assert issubclass(cls, uvm_sched.Warning)
    else:
        assert issubclass(cls, uvm_sched.Error)


@pytest.mark.parametrize("name, builtin", [
    ("trace.TraceError", ValueError), ("pattern.PatternError", ValueError),
    ("planner.PlanError", ValueError), ("sim.BudgetError", ValueError),
    ("hw.ProfileError", ValueError), ("native.FreeError", ValueError),
    ("native.UvmSchedError", RuntimeError), ("native.UnsupportedError", RuntimeError),
    ("native.OutOfMemoryError", MemoryError),
])
def test_each_error_keeps_its_builtin_base(name, builtin):
    mod, attr = name.split(".")
    cls = getattr(importlib.import_module(f"uvm_sched.{mod}"), attr)
    assert issubclass(cls, builtin) and issubclass(cls, uvm_sched.Error)


def _instance(cls):
    if cls is native.OutOfMemoryError:
        return cls(4096, 1 << 30, 2 << 30, "CUDA_ERROR_OUT_OF_MEMORY")
    if cls is native.FreeError:
        return cls(0x7F00_0000_1000, 999, "size", "allocated with 1,000 bytes")
    params = inspect.signature(cls.__init__).parameters
    assert cls.__init__ is BaseException.__init__ or len(params) <= 2 or any(
        p.kind is p.VAR_POSITIONAL for p in params.values()), (
        f"{cls.__name__} takes arguments this test does not know how to build: add it above")
    return cls("a message with 1,234 bytes")


@pytest.mark.parametrize("cls", EXCEPTIONS, ids=lambda c: c.__name__)
def test_every_exception_round_trips_through_pickle(cls):
    exc = _instance(cls)
    exc.extra = 7  # attributes set after construction travel too
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is cls
    assert str(back) == str(exc) and back.args == exc.args
    assert vars(back) == vars(exc)
    assert "__reduce__" in vars(uvm_sched.Error)


def test_the_numbers_of_an_out_of_memory_error_survive_pickling():
    e = pickle.loads(pickle.dumps(native.OutOfMemoryError(4096, 1 << 30, None)))
    assert (e.size, e.reserved, e.limit) == (4096, 1 << 30, None)
    assert "4,096 bytes" in str(e)
    f = pickle.loads(pickle.dumps(native.FreeError(0x1000, None, "double_free", "double free")))
    assert (f.ptr, f.size, f.reason) == (0x1000, None, "double_free")


def test_except_uvm_sched_error_catches_an_import_error_and_except_valueerror_still_does(tmp_path):
    bad = tmp_path / "t.parquet"
    bad.write_bytes(b"not parquet")
    with pytest.raises(uvm_sched.Error):
        uvm_sched.trace.load(bad)
    with pytest.raises(ValueError):
        uvm_sched.trace.load(bad)


def test_compare_without_the_planner_warns_with_a_uvm_sched_warning(monkeypatch):
    from uvm_sched import planner, sim

    monkeypatch.delattr(planner, "plan")
    trace = _tiny_trace()
    with pytest.warns(uvm_sched.Warning, match="leaves out 'uvm-sched'"):
        sim.compare(trace, budgets=["100%"])


def _tiny_trace():
    from uvm_sched.trace import TraceBuilder

    b = TraceBuilder()
    for _ in range(2):
        b.mark()
        blk = b.alloc(1 << 20)
        b.access(blk)
        b.next_tick(1_000)  # a device time: a trace without a clock is not simulated
        b.free(blk)
    return b.build()


def test_warnings_can_be_made_errors_by_the_family():
    with warnings.catch_warnings():
        warnings.simplefilter("error", uvm_sched.Warning)
        with pytest.raises(uvm_sched.Warning):
            warnings.warn("x", uvm_sched.Warning)


def test_the_version_is_the_installed_distributions():
    import importlib.metadata

    assert uvm_sched.__version__ == importlib.metadata.version("uvm_sched")
