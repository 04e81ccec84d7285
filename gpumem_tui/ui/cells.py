"""Cell text for the device panel, the process table and the detail view.

Every figure that is None shows its reason from the sample (``"N/A"``, ``"no permission"``,
``"GPU is lost"``) rather than a blank or an invented number. Untrusted text (commands, user
names, container ids) goes through :func:`gpumem_tui.support.text.printable` and into a
``rich.text.Text`` -- never through markup parsing.
"""

from __future__ import annotations

from collections.abc import Callable

from rich.text import Text

from gpumem_tui.telemetry.model import NOT_VISIBLE, DeviceSample, ProcessSample, ProcessStatus
from gpumem_tui.support.text import printable
from gpumem_tui.support.units import MiB

MISSING_STYLE = "dim"


class SharedCells:
    """One cell per key, shared by every row and poll that shows it (the process table's and
    the device panel's figures, issue 23): the table then neither measures nor styles a
    repeated figure again. A cell is never changed once made (the tables copy one before
    cutting it). Past ``limit`` cells the store starts afresh, so it stays bounded on a box
    whose figures never repeat."""

    def __init__(self, limit: int) -> None:
        self._cells: dict[object, Text] = {}
        #: the cells made so far, by key (the same dict): a caller that looks a cell up per
        #: row and poll reads it here first (a hit without a call), then asks :meth:`get`
        self.drawn = self._cells
        self._limit = limit

    def get(self, key: object, draw: Callable[..., Text], *args: object) -> Text:
        """The cell for ``key`` (hashable: everything the cell shows), drawn by ``draw(*args)``
        the first time it is asked for."""
        cell = self._cells.get(key)
        if cell is None:
            if len(self._cells) >= self._limit:
                self._cells.clear()  # in place: ``drawn`` stays this dict
            cell = self._cells[key] = draw(*args)
        return cell


def safe(text: str | None, limit: int = 4096) -> Text:
    """Untrusted text as a literal ``Text`` (no markup, no control characters)."""
    return Text(printable(text or "", limit=limit))


def missing(reason: str | None) -> Text:
    """The visible stand-in for a value that could not be read."""
    return Text(reason or "N/A", style=MISSING_STYLE)


def mib(value: int | None, reason: str | None = None) -> Text:
    """Bytes as whole MiB ("8123 MiB"), or the reason it is missing."""
    if value is None:
        return missing(reason)
    return Text(f"{value / MiB:,.0f} MiB", justify="right")


def percent(value: float | None, reason: str | None = None) -> Text:
    """A percentage with no decimals, or the reason."""
    if value is None:
        return missing(reason)
    return Text(f"{value:.0f}%", justify="right")


def duration(seconds: float | None) -> str:
    """Running time as ``D-HH:MM:SS`` / ``HH:MM:SS`` / ``MM:SS``."""
    if seconds is None or seconds < 0:
        return "N/A"
    total = int(seconds)
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"
    if hours:
        return f"{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{minutes:02d}:{secs:02d}"


def bar(fraction: float | None, width: int, used_style: str, free_style: str) -> Text:
    """A horizontal usage bar ``width`` cells wide (eighth-block resolution)."""
    if fraction is None or width <= 0:
        return Text("?" * max(width, 0), style=MISSING_STYLE)
    fraction = min(max(fraction, 0.0), 1.0)
    eighths = round(fraction * width * 8)
    full, part = divmod(eighths, 8)
    text = Text("█" * full, style=used_style)
    if part and full < width:
        text.append(" ▏▎▍▌▋▊▉"[part], style=f"{used_style} on {free_style}" if free_style else used_style)
        full += 1
    text.append(" " * (width - full), style=f"on {free_style}" if free_style else "")
    return text


def device_memory(dev: DeviceSample, compact: bool = False) -> Text:
    """"used / total MiB (pct%)" for a GPU (``compact``: "used/total MiB pct%"), or why not."""
    if dev.error:
        return Text(dev.error, style="bold")
    used, total = dev.memory_used_bytes, dev.memory_total_bytes
    if used is None or total is None:
        reason = dev.reason("memory_used_bytes") or dev.reason("memory_total_bytes")
        left = f"{used / MiB:,.0f}" if used is not None else (reason or "N/A")
        right = f"{total / MiB:,.0f}" if total is not None else (reason or "N/A")
        return Text(f"{left} / {right} MiB", style=MISSING_STYLE)
    pct = 100.0 * used / total if total else 0.0
    # Fixed width for a given total (used padded to the total's digits, 3-digit percent), like
    # nvidia-smi: the column does not jump as the figures change.
    total_text = f"{total / MiB:,.0f}"
    used_text = f"{used / MiB:,.0f}".rjust(len(total_text))
    if compact:
        return Text(f"{used_text}/{total_text} MiB {pct:3.0f}%")
    return Text(f"{used_text} / {total_text} MiB ({pct:3.0f}%)")


def device_fraction(dev: DeviceSample) -> float | None:
    """Used / total memory of a GPU, None when either is unknown."""
    if dev.error or dev.memory_used_bytes is None or not dev.memory_total_bytes:
        return None
    return dev.memory_used_bytes / dev.memory_total_bytes


def temperature(dev: DeviceSample) -> Text:
    if dev.temperature_c is None:
        return missing(dev.error and "-" or dev.reason("temperature_c"))
    return Text(f"{dev.temperature_c:.0f}°C", justify="right")


def power(dev: DeviceSample) -> Text:
    """"draw / limit W", each side with its own reason when missing."""
    if dev.error:
        return missing("-")
    draw = f"{dev.power_draw_w:.0f}" if dev.power_draw_w is not None else (dev.reason("power_draw_w") or "N/A")
    limit = f"{dev.power_limit_w:.0f}" if dev.power_limit_w is not None else (dev.reason("power_limit_w") or "N/A")
    style = MISSING_STYLE if dev.power_draw_w is None or dev.power_limit_w is None else ""
    # The draw padded to the limit's digits: a fixed width for a given GPU (see device_memory).
    return Text(f"{draw.rjust(len(limit))} / {limit} W", style=style)


def status_text(proc: ProcessSample) -> str | None:
    """What to say about a process whose host details are missing, or None when fine."""
    if proc.status is ProcessStatus.OK:
        return None
    if proc.status is ProcessStatus.NOT_IN_NAMESPACE:
        return None  # "?" in each host column; the table says why once (model.namespace_note)
    return proc.status.value


def command(proc: ProcessSample, limit: int = 512) -> Text:
    """The command line, literal, prefixed by the process state when it is not OK."""
    state = status_text(proc)
    text = Text()
    if state is not None:
        text.append(f"[{state}]", style="italic")
        if proc.command:
            text.append(" ")
    if proc.command:
        text.append_text(safe(proc.command, limit=limit))
    elif state is None:
        text.append_text(missing(proc.reason("command") or _status_reason(proc)))
    return text


def container(proc: ProcessSample, limit: int = 4096) -> Text:
    """The container / pod label and the PID the process has inside it ("docker 1a2b3c4d5e6f
    pid 42"), literal; "-" (dim) when it runs in no container we can name."""
    label = proc.container or ""
    if proc.container_pid is not None:
        label = f"{label} pid {proc.container_pid}".strip()
    return safe(label, limit=limit) if label else Text("-", style="dim")


def user(proc: ProcessSample) -> Text:
    if proc.user is None:
        return missing(proc.reason("user") or _status_reason(proc))
    return safe(proc.user, limit=64)


def _status_reason(proc: ProcessSample) -> str:
    if proc.status is ProcessStatus.NO_PERMISSION:
        return "no permission"
    if proc.status is ProcessStatus.NOT_IN_NAMESPACE:
        return NOT_VISIBLE
    if proc.status is ProcessStatus.EXITED:
        return "-"
    return "N/A"
