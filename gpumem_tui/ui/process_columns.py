"""The process table's columns (:class:`Column`: header, sort key, cell, the fields a cell
shows) and the row identity: what :mod:`gpumem_tui.ui.process_table` (the widget) and
:mod:`gpumem_tui.ui.process_rows` (building its rows, with the first processes) share.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import Any, NamedTuple

from rich.text import Text

from gpumem_tui.telemetry.model import ProcessSample
from gpumem_tui.ui import cells


class Column(NamedTuple):
    """A process table column: key, header, sort key (None = unknown) and cell renderer.

    A NamedTuple, not a frozen dataclass: as immutable, and its class is made at import without
    the methods a frozen dataclass compiles from source (~3 M instructions of the start-up)."""

    key: str
    label: str
    sort_key: Callable[[ProcessSample, float], Any]
    render: Callable[[ProcessSample, float], Text | str]
    numeric: bool = False  # first sort is descending for numbers
    #: the sample fields the cell shows (besides ``status`` and ``field_errors``, which any
    #: cell may show): while they are equal the rendered cell is kept. Empty: always render.
    fields: tuple[str, ...] = ()
    #: the (dotted) attribute that ``sort_key`` reads, when it reads only that: the sort then
    #: reads it with ``operator.attrgetter``, in C, not one Python call per process and sort
    sort_attr: str | None = None

    @property
    def shown_fields(self) -> Callable[[ProcessSample], Any] | None:
        """Reads :attr:`fields` of a sample in one call (``operator.attrgetter``), for the
        comparison made per row and column at every poll; None when ``fields`` is empty."""
        return attrgetter(*self.fields) if self.fields else None


def _running(p: ProcessSample, now: float) -> float | None:
    return None if p.start_time is None else now - p.start_time


COLUMNS: tuple[Column, ...] = (
    Column("gpu", "GPU", lambda p, _: p.device_index,
           lambda p, _: Text("-" if p.device_index is None else str(p.device_index), justify="right"),
           fields=("device_index",), sort_attr="device_index"),
    Column("pid", "PID", lambda p, _: p.pid, lambda p, _: Text(str(p.pid), justify="right"), True,
           fields=("pid",), sort_attr="pid"),
    Column("user", "USER", lambda p, _: p.user, lambda p, _: cells.user(p), fields=("user",), sort_attr="user"),
    Column("type", "TYPE", lambda p, _: p.type.value, lambda p, _: Text(p.type.value), fields=("type",),
           sort_attr="type.value"),
    Column("mem", "GPU MEM", lambda p, _: p.used_memory_bytes,
           lambda p, _: cells.mib(p.used_memory_bytes, p.reason("used_memory_bytes")), True,
           fields=("used_memory_bytes",), sort_attr="used_memory_bytes"),
    Column("sm", "SM%", lambda p, _: p.sm_percent,
           lambda p, _: cells.percent(p.sm_percent, p.reason("sm_percent")), True, fields=("sm_percent",),
           sort_attr="sm_percent"),
    Column("cpu", "CPU%", lambda p, _: p.cpu_percent,
           lambda p, _: cells.percent(p.cpu_percent, p.reason("cpu_percent")), True, fields=("cpu_percent",),
           sort_attr="cpu_percent"),
    Column("rss", "RSS", lambda p, _: p.rss_bytes, lambda p, _: cells.mib(p.rss_bytes, p.reason("rss_bytes")), True,
           fields=("rss_bytes",), sort_attr="rss_bytes"),
    Column("time", "TIME", _running, lambda p, now: Text(cells.duration(_running(p, now)), justify="right"), True),
    Column("container", "CONTAINER", lambda p, _: p.container,
           lambda p, _: cells.container(p, limit=32), fields=("container", "container_pid"), sort_attr="container"),
    Column("command", "COMMAND", lambda p, _: p.command, lambda p, _: cells.command(p), fields=("command",),
           sort_attr="command"),
)
COLUMN_KEYS = tuple(c.key for c in COLUMNS)
NARROW_WIDTH = 110
NARROW_HIDDEN = frozenset({"type", "rss", "time", "container"})
_BY_KEY = {c.key: c for c in COLUMNS}
#: Columns whose cell is drawn from its fields, the status and the field errors alone (a figure,
#: never decorated): one cell per value, shared by rows and polls (process_rows.decorated_cell).
SHARED_CELL_COLUMNS = frozenset({"gpu", "pid", "mem", "sm", "cpu", "rss"})
#: Most shared cells a table keeps; past it the store starts afresh.
SHARED_CELLS_LIMIT = 4096
_FIELDS = {c.key: c.shown_fields for c in COLUMNS}


def _is_group(entry: object) -> bool:
    """True for a job's group row (:class:`gpumem_tui.ui.job_rows.JobRow`): the table's entries
    are those and ProcessSample rows, so this needs no import of job_rows, which comes with the
    first rows (a first start compiles it then, not for the first frame)."""
    return entry is not None and not isinstance(entry, ProcessSample)


def row_key(p: ProcessSample) -> str:
    """Stable row identity: the same process on two GPUs is two rows."""
    return f"{p.pid}:{'-' if p.device_index is None else p.device_index}"


_GPU_INDEX = attrgetter("device_index")
_CONTAINER = attrgetter("container")
_CONTAINER_PID = attrgetter("container_pid")

#: Most rows the table holds (issue 13, item 20). Past this many, the first rows in sort order
#: are shown (plus the selected one) and the rest are counted in ``hidden_rows``; the filter
#: (gpu:N, user:NAME, words) narrows what is shown. A bound on the work of every poll: each
#: held row's cells are rendered and measured when its figures change.
MAX_ROWS = 500
