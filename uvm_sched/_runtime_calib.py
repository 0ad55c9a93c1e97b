"""The Scheduler's calibration: ``uvm_sched.calibrate`` run once, at ``start()``, and the
plans made with the profile it measured.

Rule: ``calibrate="auto"`` (the default) measures when the native backend is ``cuda`` (a
device is there) and not on ``host`` (nothing to measure); ``True`` measures on ``cuda``
and says why not elsewhere; ``False`` never. A probe that fails (a driver refusal, too
little free device memory) costs nothing but the warning: the Scheduler plans with its
configured profile, and ``stats()["calibration"]`` says why. Why at ``start()``, not at
the first learn where a plan first needs the profile: the probe holds the allocator for up
to its budget of device time (200 ms), which inside ``step()`` would stall the training
loop; before the loop it costs the loop nothing.
"""
from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger("uvm_sched.runtime")

BUDGET_MS = 200


class Calibrator:
    """Whether to calibrate, and what it measured (``report()``, JSON-ready)."""

    def __init__(self, want: Any) -> None:
        if want not in ("auto", True, False):
            raise ValueError(f"calibrate must be 'auto', True or False, got {want!r}")
        self.want = want
        self.profile: Any = None  # the measured HardwareProfile, once there is one
        self._report: dict[str, Any] = {"status": "off" if want is False else "pending"}

    def hw(self, hw: Any, device: int | None) -> Any:
        """The profile to plan with: ``hw`` measured on ``device`` the first time (see the
        module's rule), ``hw`` itself when calibration is off or failed."""
        if self._report["status"] != "pending":
            return self.profile if self.profile is not None else hw
        from . import native

        backend = native.backend()
        if backend != "cuda":
            self._report = {"status": "off", "why": f"the {backend} backend has no device "
                            f"to measure ({native.backend_reason()})"}
            if self.want is True:
                logger.warning("calibrate=True: not calibrated, %s", self._report["why"])
            return hw
        # (imported only where a probe runs: without a bytecode cache an import costs
        # milliseconds of the thread that makes it)
        from ._calibrate import measure, profile_from

        try:
            fig = measure(device or 0, BUDGET_MS)
            self.profile = profile_from(fig, hw)
        except (native.UvmSchedError, ValueError) as e:
            self._report = {"status": "failed", "error": str(e)}
            logger.warning("calibration failed, planning with the profile %r: %s", hw, e)
            return hw
        self._report = {"status": "measured", "profile": self.profile.name, **fig}
        logger.info("calibrated on %s in %.0f ms of device time: h2d %.1f GB/s, d2h %.1f "
                    "GB/s, both %.1f GB/s, fault batch %.1f us, remote %.1f GB/s",
                    fig["device_name"], fig["device_s"] * 1e3, fig["h2d_Bps"] / 1e9,
                    fig["d2h_Bps"] / 1e9, fig["duplex_Bps"] / 1e9, fig["fault_batch_s"] * 1e6,
                    fig["remote_Bps"] / 1e9)
        return self.profile

    def report(self) -> dict[str, Any]:
        """``status`` (``off``/``pending``/``measured``/``failed``) and, once measured, the
        figures of ``uvm_sched._calibrate.measure`` and the profile's name; ``why`` or
        ``error`` otherwise."""
        return dict(self._report)
