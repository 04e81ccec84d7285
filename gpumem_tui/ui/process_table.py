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
from gpumem_tui.ui.process_columns import (
    _BY_KEY,
    _CONTAINER,
    _CONTAINER_PID,
    _GPU_INDEX,
    COLUMN_KEYS,
    NARROW_HIDDEN,
    NARROW_WIDTH,
    SHARED_CELLS_LIMIT,
    Column,
    _is_group,
    row_key,
)


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


class ProcessTable(LineTable):
    """The process table (see the module doc); the app feeds it with :meth:`show`. Holds at
    most :data:`gpumem_tui.ui.process_columns.MAX_ROWS` rows; ``hidden_rows`` counts the
    matching processes left out. Row keys: :func:`gpumem_tui.ui.process_columns.row_key`.
    Its rows are built by :mod:`gpumem_tui.ui.process_rows`, imported with the first rows."""

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
        #: a cell per (column, the fields it shows, status, field errors) (see :func:`gpumem_tui.ui.process_rows.decorated_cell`)
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
        """Filter, sort and render the rows, and hand them to the table
        (:func:`gpumem_tui.ui.process_rows.rebuild`). ``view``: :meth:`screen_view` if the
        caller just read it."""
        from gpumem_tui.ui.process_rows import rebuild  # with the first rows: not in the first frame

        rebuild(self, keep, view)

    @staticmethod
    def _entry_key(entry: ProcessSample | JobRow) -> str:
        return entry.key if _is_group(entry) else row_key(entry)

    def _row_cells(self, key: str) -> list[Text]:
        """Row ``key``'s cells, brought up to date first if it changed while off screen. A
        cell wider than its column widens it (the table is drawn again)."""
        p = self._pending.pop(key, None)
        if p is None:
            return self._cells[key]
        from gpumem_tui.ui.process_rows import NO_FLAG, cells_for

        cells_ = cells_for(self, p, self._sources[key], self._cells[key], self._flags_shown.get(key, NO_FLAG))
        self._cells[key] = cells_
        self._sources[key] = p
        self._widen(cells_)
        return cells_

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
