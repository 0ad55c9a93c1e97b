"""``uvm_sched.calibrate()``: the link and the UVM fault path of this process's device,
measured in about 200 ms through the native core (``uvm_sched_calibrate`` in
``_native/calib.c``, whose note says how the device is made to touch managed memory without
a kernel of ours, and why), and the hardware profile they make.

Rule: a measured figure replaces the profile's constant, and its source says so
("measured by uvm_sched.calibrate on <device> at <time>: ..."); a figure the probe could not
measure (0) leaves the profile's value and source as they were, and ``figures`` says so.
Why: the constants the planner is most sensitive to (the link each way and both ways at
once, the fault path) vary between machines of one model by more than the shipped
profiles' ranges; measuring them where the plan runs beats any table.
"""
from __future__ import annotations

import ctypes
import dataclasses
import datetime as _dt
import logging
from typing import Any

from .hw import HardwareProfile, load_profile

__all__ = ["calibrate", "measure", "profile_from", "DUPLEX_FIELD"]

logger = logging.getLogger(__name__)

# the profile field of the link's aggregate rate with both directions busy, set when the
# HardwareProfile has it (the duplex cap); otherwise the figure is in the h2d/d2h sources
DUPLEX_FIELD = "duplex_Bps"
_MIN_MS, _MAX_MS = 20, 10_000  # = calib.c's 0.02..10 s


class _Out(ctypes.Structure):
    _fields_ = [(n, ctypes.c_double) for n in (
        "h2d_Bps", "d2h_Bps", "duplex_Bps", "duplex_h2d_Bps", "duplex_d2h_Bps",
        "fault_batch_s", "remote_Bps", "device_s", "wall_s")] + [
        (n, ctypes.c_uint64) for n in (
            "region_bytes", "duplex_h2d_bytes", "duplex_d2h_bytes", "fault_batches",
            "remote_bytes", "free_bytes", "total_bytes")] + [
        ("device_name", ctypes.c_char * 256)]


def measure(device: int = 0, budget_ms: float = 200) -> dict[str, Any]:
    """Run the probe on ``device`` within ``budget_ms`` ms of device time (20..10,000):
    its figures as a dict -- bytes per second (``h2d_Bps``, ``d2h_Bps`` alone;
    ``duplex_Bps`` both ways at once, ``duplex_h2d_Bps``/``duplex_d2h_Bps`` each way then),
    seconds (``fault_batch_s``, ``device_s``, ``wall_s``), bytes (``region_bytes`` ...,
    ``free_bytes``, ``total_bytes``), ``device_name`` and ``when`` (UTC, ISO 8601).
    ``UvmSchedError`` with the reason when there is no device (host backend) or the driver
    refuses; ``native.OutOfMemoryError`` is not raised: too little free memory is a
    ``UvmSchedError`` naming the bytes."""
    from . import native

    if isinstance(budget_ms, bool) or not isinstance(budget_ms, (int, float)) \
            or not _MIN_MS <= budget_ms <= _MAX_MS:
        raise ValueError(f"budget_ms must be a number of milliseconds in {_MIN_MS:,}.."
                         f"{_MAX_MS:,}, got {budget_ms!r}")
    dev = native._device(device)
    lib = native._load()
    fn = lib.uvm_sched_calibrate
    fn.restype, fn.argtypes = ctypes.c_int, [ctypes.c_int, ctypes.c_double,
                                             ctypes.POINTER(_Out)]
    out = _Out()
    when = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()
    status = fn(dev, budget_ms / 1e3, ctypes.byref(out))
    if status == native._ENOMEM:  # not an allocation of the user's: no OutOfMemoryError
        raise native.UvmSchedError(f"uvm_sched.calibrate: {native._last_error()}")
    native._raise(status, "uvm_sched.calibrate")
    fig: dict[str, Any] = {f[0]: getattr(out, f[0]) for f in _Out._fields_}
    fig["device_name"] = out.device_name.decode(errors="replace")
    fig["when"] = when
    fig["budget_ms"] = float(budget_ms)
    return fig


def _base_for(device_name: str) -> HardwareProfile:
    """The shipped profile of the device's model (compute peaks, page sizes and the
    rest the probe does not measure), h200-pcie5 (the Scheduler's default) when none
    matches."""
    name = device_name.upper()
    for key, profile in (("GH200", "gh200-c2c"), ("H200", "h200-pcie5"),
                         ("H100", "h100-pcie5"), ("A100", "a100-40gb-pcie4")):
        if key in name:
            return load_profile(profile)
    logger.info("no shipped profile for %r: the unmeasured constants are h200-pcie5's",
                device_name)
    return load_profile("h200-pcie5")


def profile_from(fig: dict[str, Any], base: Any) -> HardwareProfile:
    """``base`` (a profile or its name/path) with the figures of :func:`measure` in place
    of its link, fault-path and capacity constants, each source naming the measurement."""
    base = load_profile(base)
    at = f"measured by uvm_sched.calibrate on {fig['device_name']} at {fig['when']}"
    mb = 1 << 20
    both = (f"; both ways at once {fig['duplex_Bps'] / 1e9:.2f} GB/s in all (h2d "
            f"{fig['duplex_h2d_Bps'] / 1e9:.2f}, d2h {fig['duplex_d2h_Bps'] / 1e9:.2f})")
    measured = {  # field: (value, how)
        "h2d_prefetch_Bps": (fig["h2d_Bps"], f"cuMemPrefetchAsync of "
                             f"{fig['region_bytes'] / mb:,.0f} MiB to the device{both}"),
        "d2h_prefetch_Bps": (fig["d2h_Bps"], f"cuMemPrefetchAsync of "
                             f"{2 * fig['region_bytes'] / mb:,.0f} MiB to the host{both}"),
        "fault_batch_latency_s": (fig["fault_batch_s"], f"{fig['fault_batches']} one-byte "
                                  "cuMemsetD8Async on host-resident 2 MiB blocks, less the "
                                  "same on resident ones"),
        "remote_access_Bps": (fig["remote_Bps"], f"cuMemcpyDtoDAsync of "
                              f"{fig['remote_bytes'] / mb:,.0f} MiB from host-resident data "
                              "advised PreferredLocation=host + AccessedBy"),
        "device_capacity_bytes": (int(fig["total_bytes"]), "cuMemGetInfo total"),
        DUPLEX_FIELD: (fig["duplex_Bps"], f"two cuMemPrefetchAsync, one each way, at once "
                       f"({fig['duplex_h2d_bytes'] / mb:,.0f} + "
                       f"{fig['duplex_d2h_bytes'] / mb:,.0f} MiB)"),
    }
    known = {f.name for f in dataclasses.fields(HardwareProfile)}
    found = {field: (value, f"{at}: {how}") for field, (value, how) in measured.items()
             if field in known and value > 0}
    return base.with_measured({k: v for k, (v, _) in found.items()},
                              {k: src for k, (_, src) in found.items()},
                              name=f"{base.name}-calibrated",
                              description=f"{base.description}; link and fault path {at}")


def calibrate(device: int | None = None, budget_ms: float = 200,
              base: Any = None) -> HardwareProfile:
    """Measure this process's CUDA device (``device``: an ordinal; None = PyTorch's
    current device, else 0) in about ``budget_ms`` ms of device time -- prefetch
    bandwidth host->device and device->host, each alone and both at once, the fault-batch
    cost and the remote-access rate -- and return ``base`` (a profile or its name; None:
    the shipped profile of the device's model) with those constants replaced: usable by
    ``uvm_sched.sim.simulate``, ``uvm_sched.plan`` and ``Scheduler(hw=...)``. Raises
    ``native.UvmSchedError`` on the host backend (there is no device to measure)."""
    from ._runtime_setup import current_device

    fig = measure(current_device() if device is None else device, budget_ms)
    return profile_from(fig, _base_for(fig["device_name"]) if base is None else base)
