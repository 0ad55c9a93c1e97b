"""One family for everything uvm_sched raises or warns: ``except uvm_sched.Error`` catches
any of its exceptions, ``warnings.simplefilter("error", uvm_sched.Warning)`` any of its
warnings.

Each exception class also keeps the builtin base it had before the family existed
(``TraceError`` is still a ``ValueError``, ``OutOfMemoryError`` a ``MemoryError``), so code
written against those bases keeps working.

Exceptions survive ``pickle`` (multiprocessing, test runners that ship exceptions between
processes): :meth:`Error.__reduce__` rebuilds the instance without calling its
``__init__``, from its ``args`` (the message) and its attributes (``size``, ``ptr``, ...).
A subclass whose ``__init__`` takes other arguments than the message therefore needs
nothing of its own; the default ``BaseException.__reduce__`` would call ``__init__`` with
the message alone and fail.

This module imports only the standard library: every part of the package may import it.
"""
from __future__ import annotations

import builtins
from typing import Any

__all__ = ["Error", "Warning"]


def _rebuild(cls: type[BaseException], args: tuple, state: dict[str, Any]) -> BaseException:
    """Unpickle an :class:`Error`: a bare instance of ``cls`` with ``args`` and ``state``."""
    exc = cls.__new__(cls, *args)
    exc.args = args
    exc.__dict__.update(state)
    return exc


class Error(Exception):
    """Base class of every exception uvm_sched defines."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.args, dict(self.__dict__)))


class Warning(builtins.UserWarning):  # noqa: A001 -- uvm_sched.Warning, as numpy/pandas name theirs
    """Base class of every warning uvm_sched issues (a fallback taken, input skipped)."""
