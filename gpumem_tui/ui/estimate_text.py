"""The texts the estimator pane shows under its bar: the fit line, the breakdown, the notes.

Pure functions of an estimate (no widget state), so they can be read and tested alone.
Everything that comes from a config file or a probe is shown literally (``Text``, never
markup). Units on screen are binary (GiB = 2**30 bytes) and say so.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from rich.text import Text

from gpumem_tui.support.text import printable
from gpumem_tui.ui.memory_bar import BAND_SEGMENTS, COMPONENT_LABELS, estimate_components, estimate_peak
from gpumem_tui.support.units import format_bytes

__all__ = ["breakdown_text", "count_text", "fit_line", "in_form_words", "notes_text"]

_FLAG = re.compile(r"--([a-z][a-z0-9-]*)")


def in_form_words(message: str, labels: Mapping[str, str]) -> str:
    """A message written for the CLI (``--batch must be >= 1``) in the form's words.

    Each ``--flag`` becomes the label of the form field of that name (``labels``: spec field
    -> label, e.g. ``grad_ckpt`` -> "ckpt"), else the flag's name without dashes.
    """

    def word(match: re.Match[str]) -> str:
        name = match.group(1).replace("-", "_")
        return labels.get(name, name.replace("_", " "))

    return _FLAG.sub(word, message)


def fit_line(peak: int, budget: int | None, where: str = "") -> tuple[str, str]:
    """``(css state, text)`` saying whether ``peak`` bytes fit in ``budget`` bytes.

    The state is ``-fits``, ``-nofit`` or ``-nobudget`` (no budget known). ``where`` names the
    budget's GPU, e.g. " (GPU 0 H100)".
    """
    if budget is None:
        return "-nobudget", f"peak {format_bytes(peak, precision=2)}: select a GPU or type a GPU memory to check the fit"
    if peak <= budget:
        spare = budget - peak
        return "-fits", (
            f"fits: peak {format_bytes(peak, precision=2)} of {format_bytes(budget, precision=2)}{where}, "
            f"{format_bytes(spare, precision=2)} ({100 * spare / budget:.0f}%) to spare"
        )
    over = peak - budget
    return "-nofit", (
        f"does not fit: peak {format_bytes(peak, precision=2)} is {format_bytes(over, precision=2)} "
        f"({100 * over / budget:.0f}%) over {format_bytes(budget, precision=2)}{where}"
    )


def breakdown_text(est: Any, colour_of: Callable[[str], str]) -> Text:
    """One line per non-zero component (grouped as the bar stacks them), then the peak line.

    ``colour_of`` maps a theme variable (``band-gradients``) to a colour.
    """
    comps = estimate_components(est)
    out = Text()
    width = max(len(v) for v in COMPONENT_LABELS.values())
    for _, members, variable, _ in BAND_SEGMENTS:
        colour = colour_of(variable)
        for i, comp in enumerate(members):
            size = comps.get(comp, 0)
            if size <= 0:
                continue
            out.append("■ " if i == 0 or not out else "  ", style=colour)
            out.append(f"{COMPONENT_LABELS[comp]:<{width}} {format_bytes(size, precision=2):>11}\n")
    phase = getattr(est, "peak_phase", None)
    total = getattr(est, "total_params", None)
    trainable = getattr(est, "trainable_params", None)
    summary = f"peak {format_bytes(estimate_peak(est), precision=2)}"
    if phase:
        summary += f" in {phase}"
    if total:
        summary += f" · {count_text(total)} params"
        if trainable is not None and trainable != total:
            summary += f" ({count_text(trainable)} trainable)"
    out.append(summary, style="bold")
    out.append("  (GiB = 2^30 B)", style="dim")
    return out


def notes_text(est: Any, warnings: list[str], labels: Mapping[str, str]) -> Text:
    """Warnings (``! ...``, at most 4, in the form's words) and then every assumption.

    The assumptions are written out rather than hidden in a tooltip: over SSH, from a
    keyboard, a tooltip cannot be reached.
    """
    lines = [f"! {in_form_words(w, labels)}" for w in warnings[:4]]
    assumptions = [
        in_form_words(str(a), labels) for a in (getattr(est, "assumptions", None) or ()) if str(a) not in warnings
    ]
    if assumptions:
        lines.append("assumed:")
        lines += [f"· {a}" for a in assumptions]
    return Text("\n".join(printable(line, limit=300) for line in lines))


def count_text(n: int | float) -> str:
    """12_345_678 -> "12.35 M" (decimal: parameter counts are counts, not bytes)."""
    if not isinstance(n, (int, float)) or not math.isfinite(n):
        return "?"
    for unit, factor in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= factor:
            return f"{n / factor:.2f} {unit}"
    return str(int(n))
