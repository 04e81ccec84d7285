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


def status_inputs(app: Any, width: int | None = None) -> tuple[Any, ...]:
    """The arguments of :func:`status_from` for ``app`` (the GpuMemApp): everything its status
    line shows, so the app builds the line again only when they change (~0.2 ms a poll).
    ``width``: the terminal's columns when ``app.size`` is not up to date yet (the app's own
    ``on_resize`` runs before Textual's ``App._on_resize`` records the new size)."""
    snap = app.snapshot
    filter_query: str | None = None
    problems: tuple[str, ...] = ()
    if app.is_mounted:
        table = app.table
        if table.filter.active or table.filter.problems:
            filter_query = app.filter_box.value
        problems = tuple(table.filter.problems)
    if snap is None:
        figures: tuple[Any, ...] = (True, None, 0, None, None, 0, False)
    else:
        figures = (False, snap.nvml_error, len(snap.devices), snap.driver_version, snap.cuda_driver_version,
                   len(snap.processes), bool(snap.probes))
    return (*figures, app.table.hidden_rows, app.banner, filter_query, problems, bool(app.readonly),
            bool(app.side_pane_hidden and not app.side_pane_toggled), app.poll_error,
            max(20, (width or app.size.width or 160) - 2))


def dashboard_status(app: Any) -> Text:
    """The status line of ``app`` (the GpuMemApp)."""
    return status_from(*status_inputs(app))


def status_from(waiting: bool, nvml_error: str | None, devices: int, driver_version: str | None,
                cuda_driver_version: str | None, processes: int, probes: bool, hidden_rows: int,
                banner: str | None, filter_query: str | None, filter_problems: tuple[str, ...],
                readonly: bool, estimator_hint: bool, poll_error: str | None, width: int) -> Text:
    """The dashboard's status line in ``width`` cells (:func:`fit`: what the user set or must act
    on stays, driver versions and the banner go first). ``waiting``: no snapshot yet, else its
    NVML error, GPU count, versions, process count and whether it has probes; ``hidden_rows``:
    processes not listed; ``filter_query``: the filter's text while one (or its error) is set;
    ``estimator_hint``: the pane left with the width."""
    from gpumem_tui.support.text import printable

    parts = [segment(Text("gpumem-tui ", style="bold"), TITLE)]  # its space: the first separator
    if waiting:
        parts.append(segment("waiting for the first sample…", NVML))
    elif nvml_error:
        error = printable(nvml_error, 300)
        # Text.assemble: the label bold, the error plain (Text + Text would make all bold)
        full = Text.assemble(("NVML not available: ", "bold"), error)
        short = Text.assemble(("no NVML: ", "bold"), error if len(error) <= 40 else error[:39] + "…")
        parts.append(segment(full, NVML, short, reword=True))
        parts.append(segment(f"showing {processes} host processes", PROCESSES,
                                f"{processes} host processes", reword=True))
        if not banner and not probes:
            parts.append(segment("`gpumem-tui demo` runs a built-in training job to watch", DEMO_HINT))
    else:
        parts.append(segment(f"{devices} GPU{'s' if devices != 1 else ''}", NVML))
        if driver_version:
            parts.append(segment(f"driver {printable(driver_version, 32)}", DRIVER))
        if cuda_driver_version:
            parts.append(segment(f"CUDA {printable(cuda_driver_version, 32)}", DRIVER))
        count = f"{processes} processes"
        parts.append(segment(f"{count} ({hidden_rows} not listed: / filters)" if hidden_rows else count,
                                PROCESSES, f"{count} ({hidden_rows} not listed)" if hidden_rows else None))
    if banner:
        banner = printable(banner, 200)
        parts.append(segment(banner, BANNER, banner[:29] + "…" if len(banner) > 30 else None))
    if filter_query is not None:
        query = printable(filter_query.strip(), 80)
        parts.append(segment(f"filter: {query}", FILTER,
                                f"filter: {query[:23]}…" if len(query) > 24 else None))
    if filter_problems:
        parts.append(segment(printable("; ".join(filter_problems), 200), FILTER_PROBLEM,
                                style="bold"))
    if readonly:
        parts.append(segment("read-only", READ_ONLY))
    if estimator_hint:
        parts.append(segment("e: estimator", ESTIMATOR_HINT))  # the pane left with the width
    if poll_error:
        error = printable(poll_error, 300)
        parts.append(segment(Text.assemble(("poll failed: ", "bold"), f"{error} (retrying)"),
                                POLL_ERROR, Text("poll failed (retrying)", style="bold")))
    return fit(parts, width, first_separator="")
