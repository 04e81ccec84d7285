"""The process table: one row per (process, GPU), sortable by any column, filterable.

Sorting: ``s`` / ``S`` move the sort to the next / previous column, ``r`` reverses it, and a
click on a column header sorts by that column (a second click reverses). Unknown values
(None) always sort last.

Default order, the same at every terminal size: GPU memory (NVML used), largest first. Where
no process has a GPU (no NVML, or no GPU process) the GPU columns are hidden and the order is
host RSS, largest first: the memory the host can see, and a figure known from the first poll
(CPU % needs two, so sorting by it moves every row after the first poll). RSS is therefore
never among the columns a narrow table drops while the GPU columns are hidden. Filtering: a query of space-separated terms; ``user:NAME`` and
``gpu:N`` (repeatable, OR within a kind) narrow by user and GPU index, any other word must
appear (case-insensitive) in the command, user, PID, container or launch (job id, from the
process's environment).

Jobs (issue 21): the processes of one torchrun / accelerate launch (gpumem_tui.analysis.jobs)
are one group row, placed where its first rank sorts, collapsed at first. ``g``, Enter or a
click on the group row expands it: one row per rank, in rank order, each labelled with its
predicted vs measured peak (gpumem_tui.ui.job_rows). A process of no job is drawn as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import repeat
from operator import attrgetter
from typing import TYPE_CHECKING, Any, NamedTuple

from rich.text import Text
from textual import events
from textual.binding import Binding

if TYPE_CHECKING:  # annotations only: the jobs come from the poll (JobTracker, loaded on use)
    from gpumem_tui.analysis.jobs import Job
    from gpumem_tui.ui.job_rows import JobRow  # its module comes with the first rows
from gpumem_tui.telemetry.model import ProcessSample
from gpumem_tui.ui import cells
from gpumem_tui.ui.line_table import LineTable


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
#: never decorated): one cell per value, shared by rows and polls (ProcessTable._render).
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


class ProcessFilter(NamedTuple):
    """A parsed filter query (see the module docstring).

    A NamedTuple, not a frozen dataclass: as immutable, and its class is made at import without
    the methods a frozen dataclass compiles from source (~3 M instructions of the start-up)."""

    users: frozenset[str] = frozenset()
    gpus: frozenset[int] = frozenset()
    words: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()

    @classmethod
    def parse(cls, query: str) -> ProcessFilter:
        """Parse ``query``; a malformed ``gpu:`` term is reported in ``problems`` and ignored."""
        users: set[str] = set()
        gpus: set[int] = set()
        words: list[str] = []
        problems: list[str] = []
        for term in query.split():
            low = term.lower()
            if low.startswith("user:") and len(term) > 5:
                users.add(term[5:])
            elif low.startswith("gpu:"):
                try:
                    gpus.add(int(term[4:]))
                except ValueError:
                    problems.append(f"gpu:{term[4:]!s} is not a GPU index")
            else:
                words.append(low)
        return cls(frozenset(users), frozenset(gpus), tuple(words), tuple(problems))

    @property
    def active(self) -> bool:
        return bool(self.users or self.gpus or self.words)

    def matches(self, p: ProcessSample) -> bool:
        if self.users and p.user not in self.users:
            return False
        if self.gpus and p.device_index not in self.gpus:
            return False
        if self.words:
            haystack = " ".join(
                s for s in (p.command, p.user, str(p.pid), p.container,
                           None if p.container_pid is None else str(p.container_pid),
                           None if p.launch is None else p.launch.job_id) if s
            ).lower()
            return all(w in haystack for w in self.words)
        return True


def sort_processes(
    processes: Iterable[ProcessSample], column: str, reverse: bool, now: float, limit: int | None = None
) -> list[ProcessSample]:
    """Sort by ``column`` (a key of COLUMNS); None last in both directions; ties by PID.

    With ``limit``, only the first ``limit`` of that order: the keys are computed once and
    sorted as plain values to find the cut-off, and only the processes up to it are sorted
    whole (64 000 processes: ~25 ms instead of ~100 ms at every poll).
    """
    col = _BY_KEY[column]
    processes = list(processes)
    # No tuple per process: 64 000 short-lived tuples a poll set off the garbage collector's
    # full passes over every snapshot object, which cost more than the sort itself. A column
    # that sorts by an attribute reads it in C (attrgetter), not one Python call per process.
    if col.sort_attr is not None:
        sort_key: Callable[[ProcessSample], Any] = attrgetter(col.sort_attr)
        keys = list(map(sort_key, processes))
    else:
        keys = list(map(col.sort_key, processes, repeat(now)))
        sort_key = _keyed(col.sort_key, now)
    known = [p for p, k in zip(processes, keys) if k is not None]
    if limit is not None and len(known) > limit:
        present = [k for k in keys if k is not None]
        present.sort(reverse=reverse)
        cut = present[limit - 1]  # ties at the cut stay in: the PID order decides among them
        if reverse:
            known = [p for p, k in zip(processes, keys) if k is not None and k >= cut]
        else:
            known = [p for p, k in zip(processes, keys) if k is not None and k <= cut]
    # ties by (PID, GPU index, -1 for none); attrgetter's tuples where no GPU index is None
    known.sort(key=_pid_then_gpu if None in map(_GPU_INDEX, known) else _PID_GPU)
    known.sort(key=sort_key, reverse=reverse)
    if limit is not None and len(known) >= limit:
        return known[:limit]
    unknown = [p for p, k in zip(processes, keys) if k is None]
    unknown.sort(key=_PID)
    ordered = known + unknown
    return ordered if limit is None else ordered[:limit]


_GPU_INDEX = attrgetter("device_index")
_CONTAINER = attrgetter("container")
_CONTAINER_PID = attrgetter("container_pid")
#: per tuple of visible column keys: (position, column, its fields reader or None, shared
#: cell?) of each, made once per set of columns (ProcessTable._cells_for runs per row and poll)
_PLANS: dict[tuple[str, ...], list[tuple[int, Column, Callable[[ProcessSample], Any] | None, bool]]] = {}


def _plan(columns: tuple[str, ...]) -> list[tuple[int, Column, Callable[[ProcessSample], Any] | None, bool]]:
    plan = _PLANS[columns] = [(i, _BY_KEY[k], _FIELDS[k], k in SHARED_CELL_COLUMNS) for i, k in enumerate(columns)]
    return plan


#: a row's decoration when it has neither a warning nor a rank label
_NO_FLAG: tuple[str | None, str | None] = (None, None)
_PID = attrgetter("pid")
_PID_GPU = attrgetter("pid", "device_index")


def _pid_then_gpu(p: ProcessSample) -> tuple[int, int]:
    return p.pid, p.device_index if p.device_index is not None else -1


def _keyed(sort_key: Callable[[ProcessSample, float], Any], now: float) -> Callable[[ProcessSample], Any]:
    return lambda p: sort_key(p, now)


#: Most rows the table holds (issue 13, item 20). Past this many, the first rows in sort order
#: are shown (plus the selected one) and the rest are counted in ``hidden_rows``; the filter
#: (gpu:N, user:NAME, words) narrows what is shown. A bound on the work of every poll: each
#: held row's cells are rendered and measured when its figures change.
MAX_ROWS = 500


class ProcessTable(LineTable):
    """The process table (see the module doc); the app feeds it with :meth:`show`. Holds
    at most :data:`MAX_ROWS` rows; ``hidden_rows`` counts the matching processes left out.
    Row keys: :func:`row_key`."""

    hidden_rows = 0

    #: the keys the help screen lists (the navigation keys are LineTable's usual ones)
    SORT_BINDINGS = [
        Binding("s", "sort_next", "Sort", id="sort_next", tooltip="Sort by the next column"),
        Binding("S", "sort_prev", "Sort back", show=False, id="sort_prev",
                tooltip="Sort by the previous column"),
        Binding("r", "sort_reverse", "Reverse", show=False, id="sort_reverse",
                tooltip="Reverse the sort order"),
    ]
    #: shown in the footer only while a job's group row is listed
    JOB_BINDINGS = [
        Binding("g", "toggle_job", "Job ranks", id="toggle_job",
                tooltip="Expand or collapse the selected job's rank rows (also Enter or a click on its row)"),
    ]
    BINDINGS = SORT_BINDINGS + JOB_BINDINGS

    DEFAULT_CSS = """
    ProcessTable { height: 1fr; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sort_column = "mem"
        self.sort_reverse = True
        self.filter = ProcessFilter()
        self._processes: tuple[ProcessSample, ...] = ()
        self._now = 0.0
        self.shown: list[ProcessSample] = []
        self.visible_columns: tuple[str, ...] = COLUMN_KEYS
        self._shown_key: tuple[Any, ...] | None = None
        self._sources: dict[str, ProcessSample] = {}  # row key -> sample its cells show
        self._sources_columns: tuple[str, ...] = ()
        # pid -> a short warning shown before the command (e.g. a leak: "+12 MiB/step")
        self.flags: dict[int, str] = {}
        self._flags_shown: dict[str, tuple[str | None, str | None]] = {}
        self._pending: dict[str, ProcessSample] = {}  # row key -> newer sample, not yet drawn
        self._job_of: dict[int, Job] = {}  # pid -> its job (processes of no job are absent)
        self.expanded: set[str] = set()  # job ids whose rank rows are shown
        #: the rows in display order: a process, or a job's group row
        self.entries: list[ProcessSample | JobRow] = []
        self._groups_listed = False  # a group row is among the entries (jobs_shown)
        self._group_cells: dict[str, tuple[JobRow, tuple[str, ...], list[Text]]] = {}
        #: a cell per (column, the fields it shows, status, field errors) (see :meth:`_render`)
        self._shared_cells = cells.SharedCells(SHARED_CELLS_LIMIT)
        self._header_key: tuple[Any, ...] = ()  # (columns, sort column, reverse) of _header_cells
        self._header_cells: list[Text] = []

    @property
    def selected_key(self) -> str | None:
        """Row key of the row under the cursor, or None when the table is empty."""
        return self.cursor_key

    @property
    def selected(self) -> ProcessSample | None:
        """The process under the cursor; None on a job's group row (it is several processes:
        nothing to signal or chart as one) or in an empty table."""
        entry = self.entries[self.cursor_row] if self.entries else None
        return entry if isinstance(entry, ProcessSample) else None

    @property
    def selected_job(self) -> Job | None:
        """The job of the row under the cursor (its group row or one of its ranks), or None."""
        entry = self.entries[self.cursor_row] if self.entries else None
        if _is_group(entry):
            return entry.job
        return None if entry is None else self._job_of.get(entry.pid)

    @property
    def jobs_shown(self) -> bool:
        """True while a job's group row is listed (the footer then shows its key)."""
        return self._groups_listed

    def header_label(self, column: int | str) -> str:  # type: ignore[override]
        """The header of ``column`` (a visible column's key, or a position) as drawn.

        Raises: ValueError for a key that is not visible; IndexError for a position."""
        if isinstance(column, str):
            column = self.visible_columns.index(column)
        return super().header_label(column)

    @property
    def effective_sort(self) -> tuple[str, bool]:
        """(column, reverse) actually applied: a hidden sort column falls back to a shown one
        (RSS, else CPU %, else PID), so the arrow in the header always says what is applied.
        GPU memory, the default, is hidden only with the other GPU columns, when RSS is shown:
        the default order is GPU memory, else RSS, at every size (see the module doc)."""
        if self.sort_column in self.visible_columns:
            return self.sort_column, self.sort_reverse
        for fallback in ("rss", "cpu", "pid"):
            if fallback in self.visible_columns:
                return fallback, fallback != "pid"
        return self.sort_column, self.sort_reverse

    def show(self, processes: tuple[ProcessSample, ...], now: float, keep: str | None = None,
             jobs: tuple[Job, ...] = ()) -> None:
        """Replace the rows. The cursor goes to row ``keep`` (scrolled into view) if given and
        listed, else stays on its row without scrolling (see :meth:`LineTable.set_rows`).
        ``jobs``: the launches among ``processes`` (gpumem_tui.analysis.jobs), drawn as
        group rows."""
        job_of = {rank.pid: job for job in jobs for rank in job.ranks}
        # The same rows again (a quiet box) change nothing on screen: skip filtering, sorting
        # and rendering. Time matters only through the TIME column of timed processes.
        timed = "time" in self.visible_columns and any(p.start_time is not None for p in processes)
        view = self.screen_view()  # the size, looked up once for the whole poll
        key = (int(now) if timed else None, view[0], tuple(sorted(self.flags.items())) if self.flags else ())
        if keep is None and self.shown and key == self._shown_key and processes == self._processes \
                and job_of == self._job_of:
            self._now = now
            return
        self._shown_key = key
        self._job_of = job_of
        self._processes = processes
        self._now = now
        self._rebuild(keep, view)

    def select_pid(self, pid: int) -> bool:
        """Move the cursor to the first row of ``pid`` (its job's group row while that is
        collapsed); False if it is not shown."""
        for index, entry in enumerate(self.entries):
            if _is_group(entry):
                if not entry.expanded and any(p.pid == pid for p in entry.members):
                    self.move_cursor(row=index)
                    return True
            elif entry.pid == pid:
                self.move_cursor(row=index)
                return True
        return False

    def toggle_job(self, job_id: str) -> None:
        """Expand job ``job_id``'s rank rows, or collapse them; the cursor goes to its group row."""
        if job_id in self.expanded:
            self.expanded.discard(job_id)
        else:
            self.expanded.add(job_id)
        from gpumem_tui.ui.job_rows import group_key

        self._rebuild(group_key(job_id))

    def action_toggle_job(self) -> None:
        job = self.selected_job
        if job is not None:
            self.toggle_job(job.job_id)

    def action_select(self) -> None:
        """Enter: on a group row, expand or collapse it; on a process, its details."""
        entry = self.entries[self.cursor_row] if self.entries else None
        if _is_group(entry):
            self.toggle_job(entry.job.job_id)
        else:
            super().action_select()

    def on_click(self, event: events.Click) -> None:
        """A click on a group row expands or collapses it at once; elsewhere as LineTable."""
        index = self._row_at(event)
        if index is not None and 0 <= index < len(self.entries) and _is_group(self.entries[index]):
            event.stop()
            event.prevent_default()  # Textual would run LineTable.on_click too: a second toggle
            self.move_cursor(index)
            self.action_select()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "toggle_job":
            return self.jobs_shown  # hidden where there is no job: the footer stays short
        return True

    def set_filter(self, query: str) -> ProcessFilter:
        """Show only the processes ``query`` matches (see the module doc); returns it parsed."""
        self.filter = ProcessFilter.parse(query)
        self._rebuild(self.cursor_key)  # the user acted: show where the selection went
        return self.filter

    def set_sort(self, column: str, reverse: bool | None = None) -> None:
        """Sort by ``column``; ``reverse`` None: the same column again flips the order, a
        new one starts descending for numbers. Raises: ValueError for an unknown column."""
        if column not in _BY_KEY:
            raise ValueError(f"unknown column {column!r}")
        if reverse is None:
            current, current_reverse = self.effective_sort
            reverse = (not current_reverse) if column == current else _BY_KEY[column].numeric
        self.sort_column, self.sort_reverse = column, reverse
        self._rebuild(self.cursor_key)  # the user acted: show where the selection went

    def on_header_click(self, column: int) -> None:
        self.set_sort(self.visible_columns[column])

    def _wanted_columns(self, width: int | None = None) -> tuple[str, ...]:
        """Columns worth their width: no GPU columns without GPU processes, no empty CONTAINER.
        ``width``: the table's, if the caller has it (else looked up)."""
        hidden: set[str] = set()
        processes = self._processes
        # the passes over every process run in C (map of attrgetter), not a generator's steps
        if processes and {*map(_GPU_INDEX, processes)} == {None}:
            hidden |= {"gpu", "mem", "sm"}
        if not (any(map(_CONTAINER, processes)) or any(map(_CONTAINER_PID, processes))):
            hidden.add("container")
        if width is None:
            width = self.size.width
        if width and width < NARROW_WIDTH:
            # the command matters more; the detail view has them all. Without GPU columns RSS
            # is the memory column and the default order: it stays (and has their room).
            hidden |= NARROW_HIDDEN - ({"rss"} if "mem" in hidden else set())
        return tuple(k for k in COLUMN_KEYS if k not in hidden)

    def on_resize(self) -> None:
        if self._processes and self._wanted_columns() != self.visible_columns:
            self._rebuild(None)
        super().on_resize()

    def _rebuild(self, keep: str | None, view: tuple[int, range] | None = None) -> None:
        """Filter, sort and render the rows, and hand them to the table. ``view``:
        :meth:`screen_view` if the caller just read it."""
        if view is None:
            view = self.screen_view()
        on_screen = view[1]
        self.visible_columns = self._wanted_columns(view[0])
        matches = self.filter.matches
        rows = [p for p in self._processes if matches(p)] if self.filter.active else list(self._processes)
        column, reverse = self.effective_sort
        ordered = sort_processes(rows, column, reverse, self._now, limit=MAX_ROWS)
        self.hidden_rows = max(0, len(rows) - MAX_ROWS)
        selection = keep if keep is not None else self.cursor_key
        if self.hidden_rows and selection and all(row_key(p) != selection for p in ordered):
            ordered += [p for p in rows if row_key(p) == selection][:1]  # the selection stays listed
        old_keys = set(self._cells)
        had_jobs = self.jobs_shown
        self.entries, self.shown = self._grouped(ordered)
        # group rows come only with jobs: no pass over the rows per poll without one
        self._groups_listed = bool(self._job_of) and any(map(_is_group, self.entries))
        if keep is not None and keep not in {self._entry_key(e) for e in self.entries}:
            job = next((j for p in ordered if row_key(p) == keep and (j := self._job_of.get(p.pid))), None)
            if job is not None:  # its job is collapsed
                from gpumem_tui.ui.job_rows import group_key

                keep = group_key(job.job_id)
        if had_jobs != self.jobs_shown:
            self.refresh_bindings()
        cells_by_key = self._render_rows(on_screen)
        if self._header_key != (self.visible_columns, column, reverse):  # made again only when they change
            self._header_key = (self.visible_columns, column, reverse)
            self._header_cells = [
                # every header keeps two cells for the arrow, so sorting moves no column
                Text(_BY_KEY[k].label + ((" ▼" if reverse else " ▲") if k == column else "  "), style="bold")
                for k in self.visible_columns
            ]
        headers = self._header_cells
        # The selected row is the charted one: a re-sort that moves it out of view scrolls
        # just enough to keep it in sight (the view stays put while it is in sight).
        # (set_rows without ``keep`` neither scrolls nor resizes: the view read above holds)
        in_sight = self.cursor_row in on_screen
        self.set_rows(headers, cells_by_key, keep, grow_only=old_keys == cells_by_key.keys(), view=view)
        if in_sight and keep is None and self.cursor_row not in on_screen:
            self._scroll_cursor_into_view(on_screen)

    @staticmethod
    def _entry_key(entry: ProcessSample | JobRow) -> str:
        return entry.key if _is_group(entry) else row_key(entry)

    def _grouped(self, ordered: list[ProcessSample]) -> tuple[list[ProcessSample | JobRow], list[ProcessSample]]:
        """(rows in display order, processes listed): each job's group row where its first
        rank sorts, then (expanded) its ranks in rank order; the processes listed include
        the ranks of a collapsed job."""
        job_of = self._job_of
        if not job_of:
            return list(ordered), ordered
        from gpumem_tui.ui.job_rows import JobRow  # with the first job: not in the first frame

        members: dict[str, list[ProcessSample]] = {}
        for p in ordered:
            job = job_of.get(p.pid)
            if job is not None:
                members.setdefault(job.job_id, []).append(p)
        entries: list[ProcessSample | JobRow] = []
        listed: list[ProcessSample] = []
        for p in ordered:
            job = job_of.get(p.pid)
            if job is None:
                entries.append(p)
                listed.append(p)
                continue
            ranks = members.pop(job.job_id, None)
            if ranks is None:
                continue  # its group row is placed already
            rank_of = {r.pid: r.rank for r in job.ranks}
            ranks.sort(key=lambda q: (rank_of.get(q.pid, 0), q.pid))
            expanded = job.job_id in self.expanded
            entries.append(JobRow(job, tuple(ranks), expanded))
            if expanded:
                entries.extend(ranks)
            listed.extend(ranks)
        return entries, listed

    def _render_rows(self, on_screen: range) -> dict[str, list[Text]]:
        """Cells of every shown row, in order. A row whose sample is unchanged keeps its
        cells list (only TIME moves with the clock); a changed one re-renders only the
        cells whose fields changed. A changed row off screen keeps its cells until it is
        drawn (:meth:`_row_cells`): with hundreds of rows changing every second, rendering rows
        nobody sees was most of the table's work. ``on_screen``: :meth:`rows_on_screen`."""
        same_columns = self._sources_columns == self.visible_columns
        sources = self._sources if same_columns else {}
        old_cells = self._cells if same_columns else {}
        pending = self._pending if same_columns else {}
        on_screen = on_screen or range(len(self.entries))  # before any layout: all
        timed = "time" in self.visible_columns
        new_rows: dict[str, list[Text]] = {}
        new_sources: dict[str, ProcessSample] = {}
        new_pending: dict[str, ProcessSample] = {}
        # only the rows with a flag or a rank label: most have neither (_NO_FLAG by default)
        flags_shown: dict[str, tuple[str | None, str | None]] = {}
        group_cells_now: dict[str, tuple[JobRow, tuple[str, ...], list[Text]]] = {}
        if self._job_of:  # with the first job: not in the first frame
            from gpumem_tui.ui.job_rows import group_cells, rank_label
        job_of, flags, flags_before = self._job_of, self.flags, self._flags_shown
        no_flag = _NO_FLAG
        groups = self._groups_listed
        for index, p in enumerate(self.entries):
            if groups and _is_group(p):
                key = p.key
                held = self._group_cells.get(key)
                group_cells_now[key] = held if held is not None and held[:2] == (p, self.visible_columns) \
                    else (p, self.visible_columns, group_cells(p, self.visible_columns))
                new_rows[key] = group_cells_now[key][2]
                continue
            pid, gpu = p.pid, p.device_index
            key = f"{pid}:{'-' if gpu is None else gpu}"  # row_key(p), without a call per row
            job = job_of.get(pid) if job_of else None
            if job is not None:
                flag = (flags.get(pid), next((rank_label(r) for r in job.ranks if r.pid == pid), None))
            else:  # most rows: no rank label, and no flag tuple made per row
                warning = flags.get(pid) if flags else None
                flag = no_flag if warning is None else (warning, None)
            if flag is not no_flag:
                flags_shown[key] = flag
            old = sources.get(key)  # the sample the row's cells show
            previous = old_cells.get(key) if old is not None and flags_before.get(key, no_flag) == flag else None
            if previous is not None and index not in on_screen and (
                    key in pending or (timed and p.start_time is not None) or old != p):  # the sample compare last: ~3 us
                new_rows[key], new_sources[key], new_pending[key] = previous, old, p  # drawn later
                continue
            new_rows[key] = self._cells_for(p, old, previous, flag)
            new_sources[key] = p
        self._sources = new_sources
        self._sources_columns = self.visible_columns
        self._flags_shown = flags_shown
        self._pending = new_pending
        self._group_cells = group_cells_now
        return new_rows

    def _cells_for(self, p: ProcessSample, old: ProcessSample | None, previous: list[Text] | None,
                   flag: tuple[str | None, str | None]) -> list[Text]:
        """The cells of ``p``'s row in the visible columns; ``old`` / ``previous``: the sample
        and cells the row shows now (None: render every cell). The cells list is
        ``previous`` itself while every cell reads the same (the table then sees an unchanged
        row); else a copy with only the changed cells new: a cell whose fields are the same
        is kept, and TIME, drawn from the clock, while its text is the same."""
        now = self._now
        plan = _PLANS.get(self.visible_columns) or _plan(self.visible_columns)
        if previous is None or old is None or old.status != p.status or old.field_errors != p.field_errors:
            return [self._render(col, p, now, flag) for _, col, _, _ in plan]
        status, errors = p.status, p.field_errors
        shared = self._shared_cells
        drawn = shared.drawn
        cells_: list[Text] | None = None  # a copy of previous, made at the first cell that changes
        for index, col, fields, is_shared in plan:
            if fields is None:  # TIME: kept while it reads the same
                cell = self._render(col, p, now, flag)
                if cell.plain == previous[index].plain:
                    continue
            else:
                value = fields(p)
                if value == fields(old):
                    continue
                if is_shared:  # a figure's cell: the lookup _render makes, without its calls
                    key = (col.key, value, status, errors)
                    cell = drawn.get(key)
                    if cell is None:
                        cell = shared.get(key, self._render_cell, col, p, now)
                else:
                    cell = self._render(col, p, now, flag)
            if cells_ is None:
                cells_ = list(previous)
            cells_[index] = cell
        return previous if cells_ is None else cells_

    def _row_cells(self, key: str) -> list[Text]:
        """Row ``key``'s cells, brought up to date first if it changed while off screen. A
        cell wider than its column widens it (the table is drawn again)."""
        p = self._pending.pop(key, None)
        if p is None:
            return self._cells[key]
        cells_ = self._cells_for(p, self._sources[key], self._cells[key], self._flags_shown.get(key, _NO_FLAG))
        self._cells[key] = cells_
        self._sources[key] = p
        self._widen(cells_)
        return cells_

    def _render(self, col: Column, p: ProcessSample, now: float, decor: tuple[str | None, str | None]) -> Text:
        """``decor``: (a warning about the process, e.g. a leak; its rank label in a job).

        A figure's cell (:data:`SHARED_CELL_COLUMNS`) is made once per value and shared by
        every row and poll that shows that value: a cell is never changed once made (the
        table copies one before cutting it), and the table then finds its layout by the
        cell itself instead of by its text (issue 23: ~5 us a cell, ~40 cells a poll)."""
        if col.key in SHARED_CELL_COLUMNS:
            key = (col.key, _FIELDS[col.key](p), p.status, p.field_errors)  # type: ignore[misc]
            return self._shared_cells.get(key, self._render_cell, col, p, now)
        cell = self._render_cell(col, p, now)
        flag, label = decor
        if flag and col.key == "command":
            cell = Text(f"[{flag}] ", style="bold") + cell
        if label and col.key == "command":  # a job's rank: indented under its group row
            cell = Text(f"  {label} · ", style="italic") + cell
        return cell

    @staticmethod
    def _render_cell(col: Column, p: ProcessSample, now: float) -> Text:
        cell = col.render(p, now)
        return Text(cell) if isinstance(cell, str) else cell  # plain text: never parsed as markup

    def action_sort_next(self) -> None:
        self._sort_step(1)

    def action_sort_prev(self) -> None:
        self._sort_step(-1)

    def _sort_step(self, step: int) -> None:
        keys = self.visible_columns
        current = self.effective_sort[0]
        index = keys.index(current) if current in keys else 0
        key = keys[(index + step) % len(keys)]
        self.set_sort(key, reverse=_BY_KEY[key].numeric)

    def action_sort_reverse(self) -> None:
        column, reverse = self.effective_sort
        self.set_sort(column, reverse=not reverse)
