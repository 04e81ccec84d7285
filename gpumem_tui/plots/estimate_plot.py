"""``gpumem-tui estimate --plot``: one step's predicted memory, phase by phase, stacked by component.

x: the phases of the step in order (training: forward, backward, optimizer step; inference:
prefill, decode); each bar is that phase's largest moment, as :class:`Estimate.phases
<gpumem_tui.estimator.estimate.Phase>` holds it, split into the estimator's components
(bottom to top in the dashboard's band order, ``ui/memory_bar.BAND_SEGMENTS``). y: MiB or GiB
(binary). The peak is written above its bar; ``--fit`` adds the budget as a horizontal line.
For a parallel job the bars are one rank's (the largest rank role), and the title says
"per rank".
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

from gpumem_tui.estimator.estimate import Estimate, Phase
from gpumem_tui.plots.canvas import Style, byte_axis, format_size, legend_lines, new_figure, render
from gpumem_tui.plots.options import PlotOptions
from gpumem_tui.support.text import printable

#: (component key of ``Estimate.components_bytes``, name on screen (DESIGN.md terms), style),
#: bottom to top: the model states, the KV cache, what is live only during the step, then
#: what the CUDA runtime and the caching allocator add (so the top of "optimizer temporaries"
#: is the torch-allocated figure and the top of the bar the NVML-used one on ``--device cuda``)
BANDS: tuple[tuple[str, str, Style], ...] = (
    ("parameters", "parameters", Style("#", 12)),
    ("gradients", "gradients", Style("=", 10)),
    ("optimizer_states", "optimizer states", Style("%", 13)),
    ("kv_cache", "KV cache", Style("&", 11)),
    ("activations", "activations", Style("+", 14)),
    ("logits_and_loss", "logits & loss", Style("*", 6)),
    ("optimizer_intermediates", "optimizer temporaries", Style("~", 5)),
    ("cuda_context", "CUDA context", Style(":", 8)),
    ("allocator_reserve", "allocator reserve", Style(".", 7)),
)
LIMIT_STYLE = Style("─", 9)
_PHASE_NAMES = {"optimizer_step": "optimizer step"}
# rows of the figure that are not canvas: title, the frame's top and bottom, tick labels, axis labels
_FRAME_ROWS = 5


@dataclass(frozen=True)
class Limit:
    """A memory budget drawn as a line: ``budget_bytes``, described by ``label`` (e.g.
    ``"24GiB"`` or ``"GPU 0 (H100) free"``)."""

    budget_bytes: int
    label: str


def estimate_plot(estimate: Estimate, options: PlotOptions, *, per_rank: str | None = None,
                  limit: Limit | None = None) -> str:
    """The chart and its legend as text, every line at most ``options.width`` columns.

    Args:
        estimate: one device's (one rank's) estimate; its ``phases`` are the bars.
        options: size and colour (:func:`gpumem_tui.plots.options.plot_options`).
        per_rank: for a parallel job, which rank the bars are (the largest rank role's name,
            e.g. ``"every rank"``); None for one device.
        limit: the ``--fit`` budget, drawn as a horizontal line; None draws none.
    """
    # an estimate without phases (none the project makes today) is drawn as its peak alone
    phases = estimate.phases or (Phase(estimate.peak_phase, estimate.peak_bytes, dict(estimate.components_bytes)),)
    names = [_PHASE_NAMES.get(p.name, p.name.replace("_", " ")) for p in phases]
    top = max([estimate.peak_bytes, *(p.live_bytes for p in phases), limit.budget_bytes if limit else 0])
    canvas_rows = max(1, options.height - _FRAME_ROWS)
    # room above the highest bar for its peak label, 1.5 rows up (below)
    axis = byte_axis(top / max(0.5, 1 - 1.6 / canvas_rows))
    figure = new_figure(options)
    shown = [(key, name, style) for key, name, style in BANDS if any(p.components.get(key, 0) > 0 for p in phases)]
    for i, phase in enumerate(phases):
        _draw_bar(figure, i + 1, phase.components, shown, axis, options)
    peak_at = next((i for i, p in enumerate(phases) if p.name == estimate.peak_phase), None)
    if peak_at is not None:
        row = axis.upper / canvas_rows
        # 1.5 rows up: clear of the bar's top row wherever the value falls within its row
        figure.draw(figure.text(peak_at + 1, axis.scale(phases[peak_at].live_bytes) + 1.5 * row,
                                f"peak {format_size(estimate.peak_bytes)}", alignment="center"))
    if limit is not None:
        # a segment drawn after the bars, so the budget shows where it cuts through them
        y = axis.scale(limit.budget_bytes)
        figure.draw(figure.segment((0.5, len(phases) + 0.5), (y, y), marker=LIMIT_STYLE.marker(options)))
    figure.ruler("y").lim(0, axis.upper)
    figure.ruler("y").ticks(list(axis.ticks), labels=list(axis.labels))
    figure.ruler("x").lim(0.5, len(phases) + 0.5)
    figure.ruler("x").ticks(list(range(1, len(phases) + 1)), labels=names)
    figure.label(axis.unit, axis="y")
    figure.label("phase (bar: its largest moment)", axis="x")
    figure.title(_title(estimate, per_rank, options.width))
    peak_name = names[peak_at] if peak_at is not None else estimate.peak_phase
    entries = [(style.sample(options), f"{name} {format_size(estimate.components_bytes.get(key, 0))}")
               for key, name, style in shown]
    if limit is not None:
        entries.append((LIMIT_STYLE.sample(options), f"budget {printable(limit.label, 60)}: "
                        f"{format_size(limit.budget_bytes)}"))
    heading = f"{axis.title()}; bands bottom to top, sizes at the peak ({printable(peak_name, 40)}):"
    return "\n".join([render(figure, options), *textwrap.wrap(heading, options.width),
                      *legend_lines(entries, options.width)])


def _draw_bar(figure, x: int, components: dict[str, int], shown, axis, options: PlotOptions) -> None:  # type: ignore[no-untyped-def]
    """One phase's stacked bar at ``x``. A terminal row holds one band: a band thinner than a
    row shares it with its neighbours and the last one drawn shows, so the bands are drawn
    smallest first and the largest band touching a row is the one seen there."""
    spans, base = [], 0
    for key, _name, style in shown:
        size = max(0, components.get(key, 0))
        if size:
            spans.append((size, base, style))
        base += size
    for size, low, style in sorted(spans, key=lambda span: span[0]):
        figure.draw(figure.rectangle((x - 0.4, x + 0.4), (axis.scale(low), axis.scale(low + size)),
                                     marker=style.marker(options)))


def _title(estimate: Estimate, per_rank: str | None, width: int) -> str:
    model = printable(estimate.model, 60)
    where = f" per rank ({per_rank})" if per_rank else ""
    if estimate.method != "detailed":  # a seed rule: no context, reserve or temporaries
        figure = f"method {estimate.method}"
    else:
        figure = "NVML used" if estimate.device == "cuda" else "live tensor bytes"
    title = f"{model}{where}: one step predicted, {figure}"
    return title if len(title) <= width else title[: width - 1] + "…"
