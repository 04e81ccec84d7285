"""Readable views of an :class:`~gpumem_tui.estimator.estimate.Estimate`: plain text (a REPL's
``repr``), a Rich renderable (``rich.print``, Textual) and HTML (Jupyter's ``_repr_html_``).

Pure: Rich is imported only by :func:`as_rich`. Bytes are shown in binary units (MiB / GiB =
2**20 / 2**30 bytes, :func:`gpumem_tui.support.units.format_bytes`) and say so; every text that came
from outside (a model name is a config path or a ``_name_or_path``) is shown literally:
control characters escaped (:func:`gpumem_tui.support.text.printable`), never read as Rich markup,
HTML-escaped in HTML.
"""

from __future__ import annotations

import html
from typing import Any

from gpumem_tui.estimator.estimate import COMPONENT_KEYS, Estimate
from gpumem_tui.support.text import printable
from gpumem_tui.support.units import format_bytes

_FIGURE_NOTE = {
    "cuda": "peak = NVML used (torch reserved + CUDA context); allocated = torch.cuda.max_memory_allocated",
    "cpu": "peak = live tensor bytes (torch MemTracker's figure)",
    "meta": "peak = live tensor bytes (torch MemTracker's figure)",
}


def _setup_line(est: Estimate, spec: Any) -> str:
    if spec is None:
        return f"on {est.device}"
    parts = [spec.task, f"b={spec.batch}", f"s={spec.seq}", spec.dtype]
    if getattr(spec, "mixed_precision", False):
        parts.append("mixed precision")
    if spec.task != "inference":
        parts.append(spec.optimizer)
    if spec.grad_ckpt != "none":
        parts.append(f"checkpointing {spec.grad_ckpt}")
    return " ".join(parts) + f" on {est.device}"


def rows(est: Estimate) -> list[tuple[str, int]]:
    """``(component, bytes)`` at the peak, in :data:`COMPONENT_KEYS` order, zeros left out."""
    return [(key, int(est.components_bytes.get(key, 0))) for key in COMPONENT_KEYS if est.components_bytes.get(key)]


def as_text(est: Estimate, spec: Any = None) -> str:
    """Several lines: model and setup, the peak and its phase, the components at the peak, the
    phases, what the peak figure is."""
    name = printable(est.model, limit=120)
    lines = [
        f"Estimate({name}: {_setup_line(est, spec)})",
        f"  peak {format_bytes(est.peak_bytes)} in {est.peak_phase}"
        f" (allocated {format_bytes(est.allocated_peak_bytes)}; binary units, 1 GiB = 2**30 B)",
    ]
    width = max((len(key) for key, _ in rows(est)), default=10)
    lines += [f"  {key.replace('_', ' '):<{width}}  {format_bytes(n):>11}" for key, n in rows(est)]
    lines.append("  phases: " + ", ".join(f"{p.name} {format_bytes(p.live_bytes)}" for p in est.phases))
    lines.append(f"  {_FIGURE_NOTE.get(est.device, '')}".rstrip())
    return "\n".join(lines)


def as_rich(est: Estimate, spec: Any = None) -> Any:
    """A ``rich.table.Table`` of the components at the peak (every cell a literal
    ``rich.text.Text``, so no text is read as markup)."""
    from rich.table import Table
    from rich.text import Text

    table = Table(
        title=Text(f"{printable(est.model, limit=120)}: {_setup_line(est, spec)}"),
        caption=Text(f"peak in {est.peak_phase}; binary units (1 GiB = 2**30 B)\n"
                     f"{_FIGURE_NOTE.get(est.device, '')}"),
        caption_justify="left",
    )
    table.add_column("component")
    table.add_column("bytes at the peak", justify="right")
    for key, n in rows(est):
        table.add_row(Text(key.replace("_", " ")), Text(format_bytes(n)))
    table.add_row(Text("peak", style="bold"), Text(format_bytes(est.peak_bytes), style="bold"))
    return table


def as_html(est: Estimate, spec: Any = None) -> str:
    """An HTML table (every text escaped with :func:`html.escape`)."""
    def esc(text: str) -> str:
        return html.escape(printable(text, limit=200))

    body = "".join(
        f"<tr><td>{esc(key.replace('_', ' '))}</td><td style='text-align:right'>{esc(format_bytes(n))}</td></tr>"
        for key, n in rows(est)
    )
    phases = ", ".join(f"{p.name} {format_bytes(p.live_bytes)}" for p in est.phases)
    return (
        f"<div><b>{esc(est.model)}</b>: {esc(_setup_line(est, spec))}<br>"
        f"peak <b>{esc(format_bytes(est.peak_bytes))}</b> in {esc(est.peak_phase)} (binary units)"
        f"<table><tr><th>component</th><th>bytes at the peak</th></tr>{body}</table>"
        f"<small>phases: {esc(phases)}<br>{esc(_FIGURE_NOTE.get(est.device, ''))}</small></div>"
    )
