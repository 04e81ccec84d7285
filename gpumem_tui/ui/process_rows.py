"""Building the process table's rows from a poll's processes (:class:`gpumem_tui.ui.
process_table.ProcessTable`): filter, sort (:func:`sort_processes`), group the ranks of a job,
and make each shown row's cells, re-rendering only the cells whose fields changed.

A module of its own so that the dashboard's first frame, drawn before any process is listed,
does not compile it on a first start (benchmarks/first_frame.py): it is imported with the
first rows. Every function but :func:`sort_processes` takes the table whose rows it builds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import repeat
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from rich.text import Text

from gpumem_tui.telemetry.model import ProcessSample
from gpumem_tui.ui.process_columns import (
    _BY_KEY,
    _FIELDS,
    _GPU_INDEX,
    MAX_ROWS,
    SHARED_CELL_COLUMNS,
    Column,
    _is_group,
    row_key,
)

if TYPE_CHECKING:
    from gpumem_tui.ui.job_rows import JobRow

#: the :class:`gpumem_tui.ui.process_table.ProcessTable` whose rows are built (not imported:
#: that module imports this one)
ProcessTable = Any


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


#: per tuple of visible column keys: (position, column, its fields reader or None, shared
#: cell?) of each, made once per set of columns (:func:`cells_for` runs per row and poll)
_PLANS: dict[tuple[str, ...], list[tuple[int, Column, Callable[[ProcessSample], Any] | None, bool]]] = {}


def _plan(columns: tuple[str, ...]) -> list[tuple[int, Column, Callable[[ProcessSample], Any] | None, bool]]:
    plan = _PLANS[columns] = [(i, _BY_KEY[k], _FIELDS[k], k in SHARED_CELL_COLUMNS) for i, k in enumerate(columns)]
    return plan


#: a row's decoration when it has neither a warning nor a rank label
NO_FLAG: tuple[str | None, str | None] = (None, None)
_PID = attrgetter("pid")
_PID_GPU = attrgetter("pid", "device_index")


def _pid_then_gpu(p: ProcessSample) -> tuple[int, int]:
    return p.pid, p.device_index if p.device_index is not None else -1


def _keyed(sort_key: Callable[[ProcessSample, float], Any], now: float) -> Callable[[ProcessSample], Any]:
    return lambda p: sort_key(p, now)


def rebuild(table: ProcessTable, keep: str | None, view: tuple[int, range] | None = None) -> None:
    """Filter, sort and render the rows, and hand them to the table. ``view``:
    :meth:`LineTable.screen_view` if the caller just read it."""
    if view is None:
        view = table.screen_view()
    on_screen = view[1]
    table.visible_columns = table._wanted_columns(view[0])
    matches = table.filter.matches
    rows = [p for p in table._processes if matches(p)] if table.filter.active else list(table._processes)
    column, reverse = table.effective_sort
    ordered = sort_processes(rows, column, reverse, table._now, limit=MAX_ROWS)
    table.hidden_rows = max(0, len(rows) - MAX_ROWS)
    selection = keep if keep is not None else table.cursor_key
    if table.hidden_rows and selection and all(row_key(p) != selection for p in ordered):
        ordered += [p for p in rows if row_key(p) == selection][:1]  # the selection stays listed
    old_keys = set(table._cells)
    had_jobs = table.jobs_shown
    table.entries, table.shown = grouped(table, ordered)
    # group rows come only with jobs: no pass over the rows per poll without one
    table._groups_listed = bool(table._job_of) and any(map(_is_group, table.entries))
    if keep is not None and keep not in {table._entry_key(e) for e in table.entries}:
        job = next((j for p in ordered if row_key(p) == keep and (j := table._job_of.get(p.pid))), None)
        if job is not None:  # its job is collapsed
            from gpumem_tui.ui.job_rows import group_key

            keep = group_key(job.job_id)
    if had_jobs != table.jobs_shown:
        table.refresh_bindings()
    cells_by_key = render_rows(table, on_screen)
    if table._header_key != (table.visible_columns, column, reverse):  # made again only when they change
        table._header_key = (table.visible_columns, column, reverse)
        table._header_cells = [
            # every header keeps two cells for the arrow, so sorting moves no column
            Text(_BY_KEY[k].label + ((" ▼" if reverse else " ▲") if k == column else "  "), style="bold")
            for k in table.visible_columns
        ]
    headers = table._header_cells
    # The selected row is the charted one: a re-sort that moves it out of view scrolls
    # just enough to keep it in sight (the view stays put while it is in sight).
    # (set_rows without ``keep`` neither scrolls nor resizes: the view read above holds)
    in_sight = table.cursor_row in on_screen
    table.set_rows(headers, cells_by_key, keep, grow_only=old_keys == cells_by_key.keys(), view=view)
    if in_sight and keep is None and table.cursor_row not in on_screen:
        table._scroll_cursor_into_view(on_screen)


def grouped(table: ProcessTable, ordered: list[ProcessSample]) -> tuple[list[ProcessSample | JobRow], list[ProcessSample]]:
    """(rows in display order, processes listed): each job's group row where its first
    rank sorts, then (expanded) its ranks in rank order; the processes listed include
    the ranks of a collapsed job."""
    job_of = table._job_of
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
        expanded = job.job_id in table.expanded
        entries.append(JobRow(job, tuple(ranks), expanded))
        if expanded:
            entries.extend(ranks)
        listed.extend(ranks)
    return entries, listed


def render_rows(table: ProcessTable, on_screen: range) -> dict[str, list[Text]]:
    """Cells of every shown row, in order. A row whose sample is unchanged keeps its
    cells list (only TIME moves with the clock); a changed one re-renders only the
    cells whose fields changed. A changed row off screen keeps its cells until it is
    drawn (:meth:`ProcessTable._row_cells`): with hundreds of rows changing every second, rendering rows
    nobody sees was most of the table's work. ``on_screen``: :meth:`LineTable.rows_on_screen`."""
    same_columns = table._sources_columns == table.visible_columns
    sources = table._sources if same_columns else {}
    old_cells = table._cells if same_columns else {}
    pending = table._pending if same_columns else {}
    on_screen = on_screen or range(len(table.entries))  # before any layout: all
    timed = "time" in table.visible_columns
    new_rows: dict[str, list[Text]] = {}
    new_sources: dict[str, ProcessSample] = {}
    new_pending: dict[str, ProcessSample] = {}
    # only the rows with a flag or a rank label: most have neither (NO_FLAG by default)
    flags_shown: dict[str, tuple[str | None, str | None]] = {}
    group_cells_now: dict[str, tuple[JobRow, tuple[str, ...], list[Text]]] = {}
    if table._job_of:  # with the first job: not in the first frame
        from gpumem_tui.ui.job_rows import group_cells, rank_label
    job_of, flags, flags_before = table._job_of, table.flags, table._flags_shown
    no_flag = NO_FLAG
    groups = table._groups_listed
    for index, p in enumerate(table.entries):
        if groups and _is_group(p):
            key = p.key
            held = table._group_cells.get(key)
            group_cells_now[key] = held if held is not None and held[:2] == (p, table.visible_columns) \
                else (p, table.visible_columns, group_cells(p, table.visible_columns))
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
        new_rows[key] = cells_for(table, p, old, previous, flag)
        new_sources[key] = p
    table._sources = new_sources
    table._sources_columns = table.visible_columns
    table._flags_shown = flags_shown
    table._pending = new_pending
    table._group_cells = group_cells_now
    return new_rows


def cells_for(table: ProcessTable, p: ProcessSample, old: ProcessSample | None, previous: list[Text] | None,
               flag: tuple[str | None, str | None]) -> list[Text]:
    """The cells of ``p``'s row in the visible columns; ``old`` / ``previous``: the sample
    and cells the row shows now (None: render every cell). The cells list is
    ``previous`` itself while every cell reads the same (the table then sees an unchanged
    row); else a copy with only the changed cells new: a cell whose fields are the same
    is kept, and TIME, drawn from the clock, while its text is the same."""
    now = table._now
    plan = _PLANS.get(table.visible_columns) or _plan(table.visible_columns)
    if previous is None or old is None or old.status != p.status or old.field_errors != p.field_errors:
        return [decorated_cell(table, col, p, now, flag) for _, col, _, _ in plan]
    status, errors = p.status, p.field_errors
    shared = table._shared_cells
    drawn = shared.drawn
    cells_: list[Text] | None = None  # a copy of previous, made at the first cell that changes
    for index, col, fields, is_shared in plan:
        if fields is None:  # TIME: kept while it reads the same
            cell = decorated_cell(table, col, p, now, flag)
            if cell.plain == previous[index].plain:
                continue
        else:
            value = fields(p)
            if value == fields(old):
                continue
            if is_shared:  # a figure's cell: the lookup decorated_cell makes, without its calls
                key = (col.key, value, status, errors)
                cell = drawn.get(key)
                if cell is None:
                    cell = shared.get(key, table._render_cell, col, p, now)
            else:
                cell = decorated_cell(table, col, p, now, flag)
        if cells_ is None:
            cells_ = list(previous)
        cells_[index] = cell
    return previous if cells_ is None else cells_


def decorated_cell(table: ProcessTable, col: Column, p: ProcessSample, now: float, decor: tuple[str | None, str | None]) -> Text:
    """``decor``: (a warning about the process, e.g. a leak; its rank label in a job).

    A figure's cell (:data:`SHARED_CELL_COLUMNS`) is made once per value and shared by
    every row and poll that shows that value: a cell is never changed once made (the
    table copies one before cutting it), and the table then finds its layout by the
    cell itself instead of by its text (issue 23: ~5 us a cell, ~40 cells a poll)."""
    if col.key in SHARED_CELL_COLUMNS:
        key = (col.key, _FIELDS[col.key](p), p.status, p.field_errors)  # type: ignore[misc]
        return table._shared_cells.get(key, table._render_cell, col, p, now)
    cell = table._render_cell(col, p, now)
    flag, label = decor
    if flag and col.key == "command":
        cell = Text(f"[{flag}] ", style="bold") + cell
    if label and col.key == "command":  # a job's rank: indented under its group row
        cell = Text(f"  {label} · ", style="italic") + cell
    return cell
