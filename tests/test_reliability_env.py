"""Every UVM_SCHED_* value is read strictly: one that does not parse stops the library from
starting, with an error naming the variable, the value and an accepted example -- never a
silent 1 byte for "1.5G" or tracing off for "yes" (issue class 6)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent / "native"))
import fakecuda  # noqa: E402

from uvm_sched import native  # noqa: E402

VARS = ("UVM_SCHED_LIMIT_BYTES", "UVM_SCHED_ARENA_BYTES", "UVM_SCHED_RING_EVENTS")


def _start(**env):
    """Start the host backend with ``env``; the error text, or the native stats."""
    try:
        with fakecuda.backend("host", **env):  # starts the library with env
            return native.stats()
    except ValueError as e:
        return str(e)


@pytest.mark.parametrize("var", VARS)
@pytest.mark.parametrize("value", ["1.5G", "32 M", "abc", "-1", " 8M", "8M ", "8X", "0x",
                                   "99999999999999999999", "17179869184T", "1e9", "8MB6"])
def test_a_count_that_does_not_parse_names_variable_value_and_example(var, value):
    got = _start(**{var: value})
    assert isinstance(got, str), f"{var}={value!r} was accepted: {got}"
    assert var in got and repr(value)[1:-1] in got and f"e.g. {var}=512M" in got


@pytest.mark.parametrize("value,expect", [("16M", 16 << 20), ("16MiB", 16 << 20),
                                          ("16mb", 16 << 20), ("1G", 1 << 30),
                                          ("4194304", 4 << 20), ("0x400000", 4 << 20),
                                          ("2T", 2 << 40), ("8K", 8 << 10), ("0", 0)])
def test_a_count_with_a_unit_is_read_exactly(value, expect):
    got = _start(UVM_SCHED_LIMIT_BYTES=value)
    assert isinstance(got, dict), got
    assert got["limit_bytes"] == expect


@pytest.mark.parametrize("value,on", [("1", 1), ("0", 0), ("yes", 1), ("no", 0), ("TRUE", 1),
                                      ("off", 0), ("On", 1)])
def test_tracing_reads_the_usual_spellings_of_on_and_off(value, on):
    got = _start(UVM_SCHED_TRACE=value)
    assert isinstance(got, dict), got
    assert got["tracing"] == on


@pytest.mark.parametrize("value", ["2", "enabled", "y e s", "-1", "0.0"])
def test_tracing_refuses_anything_else(value):
    got = _start(UVM_SCHED_TRACE=value)
    assert isinstance(got, str) and "UVM_SCHED_TRACE" in got and "e.g. UVM_SCHED_TRACE=0" in got


@pytest.mark.parametrize("value", ["3", "loud", "-1"])
def test_verbose_is_0_1_or_2(value):
    got = _start(UVM_SCHED_VERBOSE=value)
    assert isinstance(got, str) and "UVM_SCHED_VERBOSE" in got


def test_an_unknown_backend_is_refused_by_name():
    with pytest.raises(ValueError, match="unknown backend"):
        with fakecuda.backend("gpu-please"):
            pass


_UNIT = {"k": 10, "m": 20, "g": 30, "t": 40}


@settings(max_examples=80, deadline=None)
@given(st.text(alphabet="0123456789.xXkKmMgGtTiIbB -+e", min_size=1, max_size=8))
def test_any_value_is_read_exactly_or_refused(value):
    """The rule in one regular expression: a decimal or 0x number, an optional K/M/G/T with
    an optional iB/B (or a lone B); anything else, or a count past 64 bits, is refused."""
    import re

    m = re.fullmatch(r"(0[xX][0-9a-fA-F]+|[0-9]+)(?:([kKmMgGtT])(?:[iI][bB]|[bB])?|[bB])?", value)
    want = None
    if m is not None:
        digits = m.group(1)
        want = int(digits, 16 if digits[:2].lower() == "0x" else 10)
        want <<= _UNIT.get((m.group(2) or "").lower(), 0)
        if want >= 1 << 64:
            want = None
    got = _start(UVM_SCHED_LIMIT_BYTES=value)
    if want is None:
        assert isinstance(got, str) and "UVM_SCHED_LIMIT_BYTES" in got, (value, got)
    else:
        assert isinstance(got, dict) and got["limit_bytes"] == want, (value, got)
