"""The dashboard's status and replay lines, built to fit the terminal's width.

A status line is a list of :class:`Segment` s joined by `` · ``. Each has a priority and
may have a shorter form; :func:`fit` uses the short forms of the least important segments
first, then drops the least important ones, until the line fits. What the user set or must
act on (a filter and its error, a failed poll, `e` opening the hidden estimator pane) has the
highest priorities, so it is what stays at 80 columns; the driver and CUDA versions go first.

Headless apart from Rich's Text: no Textual import, so it is tested without an app.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from rich.text import Text

SEPARATOR = " · "

# Priorities (higher stays longer).
TITLE = 100
POLL_ERROR = 95
FILTER = 90
FILTER_PROBLEM = 89
ESTIMATOR_HINT = 85
NVML = 70
PROCESSES = 60
READ_ONLY = 55
BANNER = 40
DRIVER = 30
DEMO_HINT = 10


class Segment(NamedTuple):
    """One item of the status line: ``text`` (literal Text), its ``priority`` (see the
    constants above) and an optional ``short`` form used when the line is too long.
    ``reword``: the short form says the same in fewer words, so it is taken before any
    segment is dropped (otherwise it loses something and is taken only as a last step
    before the segment goes).

    A NamedTuple, not a frozen dataclass: as immutable, and its class is made at import without
    the methods a frozen dataclass compiles from source (~3 M instructions of the start-up)."""

    text: Text
    priority: int
    short: Text | None = None
    reword: bool = False


def segment(text: str | Text, priority: int, short: str | Text | None = None, style: str = "",
            reword: bool = False) -> Segment:
    """A :class:`Segment` from plain strings (never parsed as markup)."""

    def as_text(value: str | Text) -> Text:
        return value if isinstance(value, Text) else Text(value, style=style)

    return Segment(as_text(text), priority, None if short is None else as_text(short), reword)


def fit(segments: Sequence[Segment], width: int, first_separator: str = SEPARATOR) -> Text:
    """Join ``segments`` (in their order) into one line of at most ``width`` cells.

    First the short forms that only reword (``reword``) are taken, from the lowest priority
    up; then, from the lowest priority up, each segment is replaced by its short form, and
    dropped if the line is still too long, until the line fits: a segment loses something
    only once every less important one is gone. The highest-priority segment is never dropped, but cut with
    "…" when even it alone is too wide. Ties: the later segment gives way first.
    ``first_separator`` goes between the first two parts shown (the status line puts only a
    space after its title).
    """
    chosen: list[Text | None] = [s.text for s in segments]

    def length() -> int:
        parts = [t for t in chosen if t is not None]
        glue = len(first_separator) + len(SEPARATOR) * (len(parts) - 2) if len(parts) > 1 else 0
        return sum(t.cell_len for t in parts) + glue

    order = sorted(range(len(segments)), key=lambda i: (segments[i].priority, -i))
    for index in order:
        if length() <= width:
            break
        if segments[index].reword and segments[index].short is not None:
            chosen[index] = segments[index].short
    for index in order:  # least important first: its short form, else it goes
        if length() <= width:
            break
        if segments[index].short is not None:
            chosen[index] = segments[index].short
        if length() > width and index != order[-1]:
            chosen[index] = None
    line = Text(no_wrap=True, overflow="ellipsis")
    for count, part in enumerate(t for t in chosen if t is not None):
        if count:
            line.append(first_separator if count == 1 else SEPARATOR)
        line.append_text(part)
    if line.cell_len > width > 0:
        line.truncate(width - 1)
        line.append("…")
    return line


def speed_text(speed: float) -> str:
    """``×0.5``, ``×1``, ``×2``, ``×0.125``: the replay speed factor as typed."""
    return f"×{speed:g}"


def replay_line(*, paused: bool, ended: bool, position: object, duration: object, speed: object,
                keys: bool) -> Text:
    """The replay line: state (playing / paused / ended), position of duration in seconds,
    speed factor, and (``keys``) the replay keys."""
    text = Text("replay ", style="bold")
    text.append("■ ended" if ended else "⏸ paused" if paused else "▶ playing")
    if isinstance(position, (int, float)):
        text.append(f" · {position:.1f} s")
        if isinstance(duration, (int, float)):
            text.append(f" / {duration:.1f} s")
    if isinstance(speed, (int, float)):
        text.append(f" · {speed_text(speed)}")
    if keys:
        text.append(" · space pause · ←/→ seek 10 s · +/- speed")
    return text


def dashboard_status(app: Any) -> Text:
    """The dashboard's status line: NVML state, counts, filter and its error, poll errors,
    the `e` hint, fitted to ``app``'s width by :func:`fit` (what the user set or must act on
    stays; driver versions and the banner give way first). ``app`` is the GpuMemApp."""
    from gpumem_tui.support.text import printable

    snap = app.snapshot
    parts = [segment(Text("gpumem-tui ", style="bold"), TITLE)]  # its space: the first separator
    if snap is None:
        parts.append(segment("waiting for the first sample…", NVML))
    elif snap.nvml_error:
        error = printable(snap.nvml_error, 300)
        # Text.assemble: the label bold, the error plain (Text + Text would make all bold)
        full = Text.assemble(("NVML not available: ", "bold"), error)
        short = Text.assemble(("no NVML: ", "bold"), error if len(error) <= 40 else error[:39] + "…")
        parts.append(segment(full, NVML, short, reword=True))
        parts.append(segment(f"showing {len(snap.processes)} host processes", PROCESSES,
                                f"{len(snap.processes)} host processes", reword=True))
        if not app.banner and not snap.probes:
            parts.append(segment("`gpumem-tui demo` runs a built-in training job to watch", DEMO_HINT))
    else:
        parts.append(segment(f"{len(snap.devices)} GPU{'s' if len(snap.devices) != 1 else ''}", NVML))
        if snap.driver_version:
            parts.append(segment(f"driver {printable(snap.driver_version, 32)}", DRIVER))
        if snap.cuda_driver_version:
            parts.append(segment(f"CUDA {printable(snap.cuda_driver_version, 32)}", DRIVER))
        count = f"{len(snap.processes)} processes"
        hidden = app.table.hidden_rows
        parts.append(segment(f"{count} ({hidden} not listed: / filters)" if hidden else count,
                                PROCESSES, f"{count} ({hidden} not listed)" if hidden else None))
    if app.banner:
        banner = printable(app.banner, 200)
        parts.append(segment(banner, BANNER, banner[:29] + "…" if len(banner) > 30 else None))
    if app.is_mounted:
        table = app.table
        if table.filter.active or table.filter.problems:
            query = printable(app.filter_box.value.strip(), 80)
            parts.append(segment(f"filter: {query}", FILTER,
                                    f"filter: {query[:23]}…" if len(query) > 24 else None))
        if table.filter.problems:
            parts.append(segment(printable("; ".join(table.filter.problems), 200), FILTER_PROBLEM,
                                    style="bold"))
    if app.readonly:
        parts.append(segment("read-only", READ_ONLY))
    if app.side_pane_hidden and not app.side_pane_toggled:
        parts.append(segment("e: estimator", ESTIMATOR_HINT))  # the pane left with the width
    if app.poll_error:
        error = printable(app.poll_error, 300)
        parts.append(segment(Text.assemble(("poll failed: ", "bold"), f"{error} (retrying)"),
                                POLL_ERROR, Text("poll failed (retrying)", style="bold")))
    return fit(parts, max(20, (app.size.width or 160) - 2), first_separator="")
