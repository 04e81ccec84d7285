"""The probe: a few lines in a training script make its memory and phases visible.

    import gpumem_tui.probe
    probe = gpumem_tui.probe.attach(model, optimizer, batch=8, seq=512, task="train")

Importing this package does not import torch; :func:`attach` uses the torch the script already
loaded. See :func:`gpumem_tui.probe.core.attach` for what is published and streamed, and
:mod:`gpumem_tui.telemetry.probe_source` for the stream format the dashboard reads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpumem_tui.probe.core import Probe

__all__ = ["Probe", "ProbeError", "attach"]


def attach(model: Any, optimizer: Any = None, **kwargs: Any) -> Probe:
    """Attach a probe to ``model`` (and ``optimizer``); see :func:`gpumem_tui.probe.core.attach`."""
    from gpumem_tui.probe.core import attach as _attach

    return _attach(model, optimizer, **kwargs)


def __getattr__(name: str) -> Any:
    if name in ("Probe", "ProbeError"):
        from gpumem_tui.probe import core

        return getattr(core, name)
    raise AttributeError(f"module 'gpumem_tui.probe' has no attribute {name!r}")
