"""Device profiles: every estimator rule that depends on the device the step runs on.

A :class:`DeviceProfile` is read by :mod:`gpumem_tui.estimator.components` and
:mod:`gpumem_tui.estimator.estimate`; they never test ``spec.device`` themselves. Profiles:
``cpu`` (:mod:`.cpu`, what ``measure --on cpu`` runs), ``meta`` (:mod:`.meta`, the kernels
``measure --on meta`` traces: the CPU rules with SDPA always on the math path) and ``cuda``
(:mod:`.cuda`, a thin profile over the CUDA rule modules).
"""

from __future__ import annotations

from gpumem_tui.estimator.devices import cpu, cuda, meta
from gpumem_tui.estimator.devices.profile import DeviceProfile

__all__ = ["DeviceProfile", "profile_for"]

_PROFILES = {"cpu": cpu.PROFILE, "meta": meta.PROFILE, "cuda": cuda.PROFILE}


def profile_for(device: str) -> DeviceProfile:
    """The profile of ``device`` ("cpu", "meta" or "cuda").

    Raises:
        KeyError: an unknown device name (the spec validates names first).
    """
    return _PROFILES[device]
