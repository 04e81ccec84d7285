"""The estimate as a picture: bands for the memory chart and a stacked bar for the pane.

:data:`BAND_SEGMENTS` groups the estimator's components bottom to top;
:func:`bands_from_estimate` turns an estimate into the chart's cumulative bands and
:class:`MemoryBar` draws the same groups as one bar against a GPU's total memory.

Colours come only from theme variables, looked up at render time so that a theme switch
restyles the bar: ``$band-parameters``, ``$band-gradients``, ``$band-optimizer-states``,
``$band-kv-cache``, ``$band-activations``, ``$band-cuda-context``, ``$bar-free`` and
``$line-total`` (defined by gpumem-tui's themes and ``gpumem_tui.ui.themes.APP_VARIABLES``;
a host app without them should return them from ``App.get_theme_variable_defaults``; until
then each falls back to a standard Textual variable: primary, secondary, accent, warning,
success, panel-lighten-3, panel, error).

Units on screen are binary (KiB, MiB, GiB = 2**10, 2**20, 2**30 bytes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.text import Text
from textual.color import Color, ColorParseError
from textual.widget import Widget

from gpumem_tui.support.units import format_bytes

__all__ = ["BAND_SEGMENTS", "COMPONENT_LABELS", "MemoryBar", "bands_from_estimate", "estimate_components", "estimate_peak", "segment_bytes", "theme_colour"]

#: Stacked groups of estimator components, bottom to top:
#: (label, components, theme variable, fallback Textual variable).
#: Temporaries (logits and loss buffers, optimizer intermediates) sit with the activations:
#: together they are what is live at the peak beyond the model states, so the top of that band
#: is the predicted torch *allocated* peak and the top of the last band the predicted peak in
#: NVML terms (CUDA context and allocator reserve included; ESTIMATOR.md).
BAND_SEGMENTS: tuple[tuple[str, tuple[str, ...], str, str], ...] = (
    ("parameters", ("parameters",), "band-parameters", "primary"),
    ("gradients", ("gradients",), "band-gradients", "secondary"),
    ("optimizer states", ("optimizer_states",), "band-optimizer-states", "accent"),
    ("KV cache", ("kv_cache",), "band-kv-cache", "warning"),
    (
        "activations & temporaries",
        ("activations", "logits_and_loss", "optimizer_intermediates"),
        "band-activations",
        "success",
    ),
    ("CUDA context & reserve", ("cuda_context", "allocator_reserve"), "band-cuda-context", "panel-lighten-3"),
)

_BAND_LABELS = {
    "parameters": "parameters",
    "gradients": "+ gradients",
    "optimizer states": "+ optimizer states",
    "KV cache": "+ KV cache",
    "activations & temporaries": "+ activations (peak)",
    "CUDA context & reserve": "+ CUDA context & reserve",
}

COMPONENT_LABELS = {
    "parameters": "parameters",
    "gradients": "gradients",
    "optimizer_states": "optimizer states",
    "optimizer_intermediates": "optimizer temporaries",
    "activations": "activations",
    "logits_and_loss": "logits & loss",
    "kv_cache": "KV cache",
    "cuda_context": "CUDA context",
    "allocator_reserve": "allocator reserve",
}

_FALLBACKS = {variable: fallback for _, _, variable, fallback in BAND_SEGMENTS}
_FALLBACKS.update({"bar-free": "panel", "line-total": "error"})


def estimate_components(estimate: Any) -> dict[str, int]:
    comps = estimate.get("components_bytes") if isinstance(estimate, Mapping) else getattr(
        estimate, "components_bytes", None
    )
    return {str(k): int(v or 0) for k, v in dict(comps or {}).items()}


def estimate_peak(estimate: Any) -> int:
    value = estimate.get("peak_bytes") if isinstance(estimate, Mapping) else getattr(estimate, "peak_bytes", None)
    return int(value) if value is not None else sum(estimate_components(estimate).values())


def segment_bytes(estimate: Any) -> list[tuple[str, int, str]]:
    """(segment label, bytes, theme variable) for every segment, zeros included."""
    comps = estimate_components(estimate)
    return [(label, sum(comps.get(c, 0) for c in members), variable) for label, members, variable, _ in BAND_SEGMENTS]


def bands_from_estimate(estimate: Any) -> list[tuple[str, int, str]]:
    """Cumulative prediction bands for the memory chart overlay.

    Args:
        estimate: an ``Estimate`` (or its ``to_json()`` dict) whose ``components_bytes`` is the
            breakdown at the predicted peak.

    Returns:
        ``[(label, cumulative_bytes, theme_variable), ...]`` bottom to top: parameters;
        + gradients; + optimizer states; + KV cache; + activations at the peak (with the logits
        / loss buffers and optimizer temporaries, so this top is the predicted torch-allocated
        peak); + CUDA context and allocator reserve (this top is the predicted NVML-used peak).
        Bands that add nothing are left out, except parameters. ``cumulative_bytes`` is
        non-decreasing; theme variables are names without the ``$`` (e.g. ``band-gradients``).
    """
    bands: list[tuple[str, int, str]] = []
    total = 0
    for label, size, variable in segment_bytes(estimate):
        if size <= 0 and bands:
            continue
        total += max(size, 0)
        bands.append((_BAND_LABELS[label], total, variable))
    return bands


def theme_colour(widget: Widget, variable: str, fallback: str | None = None) -> str:
    """The app's theme colour ``$variable`` as a hex string (falls back to ``$fallback``, then
    to the known fallback for gpumem-tui's own variables, then to the foreground).

    Never raises: a missing or unparseable variable falls through to the next.
    """
    try:
        variables = widget.app.theme_variables
    except Exception:  # noqa: BLE001 - not mounted: no app, no theme
        variables = {}
    for name in (variable, fallback, _FALLBACKS.get(variable), "foreground"):
        if not name:
            continue
        value = variables.get(name)
        if not value:
            continue
        try:
            return Color.parse(value).hex6
        except ColorParseError:
            continue
    return "default"


class MemoryBar(Widget):
    """A stacked horizontal bar of the predicted components against a memory total.

    Line 1: one coloured run per segment, scaled to ``max(total, peak)``; free memory up to
    the total is drawn in ``$bar-free``; memory beyond the total is hatched (``▒``).
    Line 2: a ruler marking the total (``▲``) with its size, or the scale when there is none.
    """

    DEFAULT_CSS = """
    MemoryBar {
        height: 2;
        width: 1fr;
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._segments: list[tuple[str, int, str]] = []
        self._total: int | None = None
        self._stale = False
        self.render_count = 0

    def set_data(self, segments: Sequence[tuple[str, int, str]], total: int | None, stale: bool = False) -> None:
        """Draw ``segments`` ((label, bytes, theme variable)) against ``total`` bytes (or None)."""
        self._segments = [(label, max(int(size), 0), var) for label, size, var in segments]
        self._total = total if total and total > 0 else None
        self._stale = stale
        self.refresh()

    def render(self) -> Text:
        self.render_count += 1
        width = max(self.size.width, 8)
        used = sum(size for _, size, _ in self._segments)
        scale = max(used, self._total or 0)
        if scale <= 0:
            return Text("no estimate yet", style="italic")
        cells: list[tuple[str, str]] = []
        running = 0
        edge = 0
        for _, size, variable in self._segments:
            running += size
            new_edge = round(running / scale * width)
            colour = theme_colour(self, variable)
            cells.extend(("█", colour) for _ in range(new_edge - edge))
            edge = new_edge
        free = theme_colour(self, "bar-free")
        cells.extend(("░", free) for _ in range(width - edge))
        total_cell = None
        if self._total is not None:
            total_cell = min(round(self._total / scale * width), width)
            for i in range(total_cell, edge):  # beyond the GPU: hatched
                cells[i] = ("▒", cells[i][1])
            if 0 < total_cell < edge:  # the GPU's last cell, marked where the bar overflows it
                end = total_cell - 1
                cells[end] = ("┃", f"bold {theme_colour(self, 'line-total')} on {cells[end][1]}")
        bar = Text()
        for char, colour in cells:
            bar.append(char, style=f"{colour} dim" if self._stale else colour)
        ruler = self._ruler(width, total_cell, scale)
        return Text("\n").join([bar, ruler])

    def _ruler(self, width: int, total_cell: int | None, scale: int) -> Text:
        line_colour = theme_colour(self, "line-total")
        if total_cell is None:
            label = f" {format_bytes(scale)} (no GPU total)"
            return Text("─" * max(0, width - len(label)) + label, style="dim")
        label = f"GPU {format_bytes(self._total)}"
        pos = max(0, min(total_cell, width) - 1)
        ruler = Text()
        if pos + 2 + len(label) <= width:
            ruler.append("─" * pos, style="dim")
            ruler.append("▲ " + label, style=line_colour)
        else:
            ruler.append("─" * max(0, pos + 1 - len(label) - 2), style="dim")
            ruler.append(label + " ▲", style=line_colour)
        ruler.truncate(width)
        return ruler
