"""ProcessTable keeps the rendered cells whose figures did not change between polls (the
dashboard's CPU at 1 Hz with 64 000 processes), and still shows every change."""

from __future__ import annotations

import dataclasses

from textual.app import App, ComposeResult

from gpumem_tui.telemetry.model import ProcessSample, ProcessType
from gpumem_tui.ui.process_table import ProcessTable

GiB = 1 << 30


class TableApp(App[None]):
    def compose(self) -> ComposeResult:
        yield ProcessTable(id="processes")


def procs(mem_gib: int = 1, command: str = "python train.py") -> tuple[ProcessSample, ...]:
    return (
        ProcessSample(100, 0, ProcessType.COMPUTE, mem_gib * GiB, 50.0, "alice", command, 10.0, GiB, None),
        ProcessSample(200, 1, ProcessType.COMPUTE, 3 * GiB, 20.0, "bob", "[red]x[/red]", 5.0, GiB, None),
    )


async def test_a_changed_figure_renders_only_its_cell_and_shows_it():
    app = TableApp()
    async with app.run_test(size=(160, 10)) as pilot:
        table = app.query_one(ProcessTable)
        table.show(procs(1), now=1000.0)
        await pilot.pause()
        before = list(table._cells["100:0"])  # what the table rendered for the row
        table.show(procs(2), now=1001.0)
        await pilot.pause()
        after = list(table._cells["100:0"])
        assert [str(c) for c in table.get_row("100:0")] == [str(c) for c in after]
        columns = table.visible_columns
        mem = columns.index("mem")
        assert after[mem].plain == "2,048 MiB" and before[mem].plain == "1,024 MiB"
        kept = [columns[i] for i in range(len(columns)) if after[i] is before[i]]
        # only the changed figure's cell is new; TIME (no start time: "N/A") reads the same and is kept
        assert kept == [c for c in columns if c != "mem"]
        # a changed command is drawn anew, literally
        table.show(procs(2, command="[b]new[/b]"), now=1002.0)
        await pilot.pause()
        assert table.get_row("100:0")[columns.index("command")].plain == "[b]new[/b]"
        assert table.get_row("200:1")[columns.index("command")].plain == "[red]x[/red]"


async def test_a_new_status_renders_the_whole_row_again():
    app = TableApp()
    async with app.run_test(size=(160, 10)) as pilot:
        table = app.query_one(ProcessTable)
        table.show(procs(1), now=1000.0)
        await pilot.pause()
        from gpumem_tui.telemetry.model import ProcessStatus

        gone = tuple(dataclasses.replace(p, status=ProcessStatus.EXITED) if p.pid == 100 else p for p in procs(1))
        table.show(gone, now=1001.0)
        await pilot.pause()
        command = table.get_row("100:0")[table.visible_columns.index("command")].plain
        assert command.startswith(f"[{ProcessStatus.EXITED.value}]")


def many(mem_mib: int) -> tuple[ProcessSample, ...]:
    # 40 processes, sorted by memory: pid 1000 + i uses (40 - i) * mem_mib MiB
    return tuple(ProcessSample(1000 + i, 0, ProcessType.COMPUTE, (40 - i) * mem_mib << 20, 1.0, "u", f"job {i}",
                               1.0, GiB, None) for i in range(40))


async def test_rows_off_screen_are_rendered_when_drawn_and_show_the_newest_figures():
    app = TableApp()
    async with app.run_test(size=(160, 8)) as pilot:  # a header and a few rows on screen
        table = app.query_one(ProcessTable)
        table.show(many(1), now=1000.0)
        await pilot.pause()
        mem = table.visible_columns.index("mem")
        table.show(many(1000), now=1001.0)  # every figure changed
        assert table._pending and "1039:0" in table._pending  # the last row waits ...
        assert "1000:0" not in table._pending  # ... the first, on screen, does not
        assert table._cells["1039:0"][mem].plain == "1 MiB"  # still the old cells
        assert table.get_row("1039:0")[mem].plain == "1,000 MiB"  # brought up to date on read
        table.show(many(2000), now=1002.0)
        table.move_cursor(39)  # scroll to the end: the rows there are drawn with new figures
        await pilot.pause()
        bottom = [table.render_line(y).text for y in range(1, table.size.height)]
        assert any("2,000 MiB" in line and "job 39" in line for line in bottom)
        assert not any(" 1,000 MiB" in line or " 1 MiB " in line for line in bottom)
        # the column fits the widest figure shown
        assert table.column_widths[mem] >= len("80,000 MiB") + 2


async def test_a_figure_is_one_cell_shared_by_rows_and_polls_that_show_it():
    """The same figure (with the same status and field errors) is one cell, whichever row or
    poll shows it, so the table lays it out once; another status is a cell of its own, and
    every row still shows its own figures."""
    from gpumem_tui.telemetry.model import ProcessStatus

    app = TableApp()
    async with app.run_test(size=(160, 10)) as pilot:
        table = app.query_one(ProcessTable)
        two = (
            ProcessSample(100, 0, ProcessType.COMPUTE, 3 * GiB, 20.0, "alice", "a.py", 1.0, GiB, None),
            ProcessSample(200, 1, ProcessType.COMPUTE, 3 * GiB, 20.0, "bob", "b.py", 1.0, GiB, None),
        )
        table.show(two, now=1000.0)
        await pilot.pause()
        columns = table.visible_columns
        mem, sm, command = columns.index("mem"), columns.index("sm"), columns.index("command")
        first, second = table.get_row("100:0"), table.get_row("200:1")
        assert first[mem] is second[mem] and first[sm] is second[sm]  # one cell for "3,072 MiB", "20%"
        assert first[command] is not second[command]  # a command is its row's own
        moved = tuple(dataclasses.replace(p, used_memory_bytes=GiB * (4 if p.pid == 100 else 3), sm_percent=21.0)
                      for p in two)
        table.show(moved, now=1001.0)
        await pilot.pause()
        assert table.get_row("100:0")[mem].plain == "4,096 MiB" and table.get_row("200:1")[mem] is second[mem]
        table.show(two, now=1002.0)  # back to the first figures: the same cells again
        await pilot.pause()
        assert table.get_row("100:0")[mem] is first[mem] and table.get_row("100:0")[sm] is first[sm]
        gone = tuple(dataclasses.replace(p, status=ProcessStatus.EXITED, used_memory_bytes=None,
                                         field_errors=(("used_memory_bytes", "exited"),)) if p.pid == 200 else p
                     for p in two)
        table.show(gone, now=1003.0)
        await pilot.pause()
        assert table.get_row("200:1")[mem].plain == "exited" and table.get_row("200:1")[mem] is not first[mem]
        assert table.get_row("100:0")[mem].plain == "3,072 MiB"
        lines = [table.render_line(y).text for y in range(1, 3)]
        assert any("3,072 MiB" in line and "a.py" in line for line in lines)
        assert any("exited" in line and "b.py" in line for line in lines)


async def test_time_cell_follows_the_clock_and_an_unchanged_row_keeps_its_list():
    """TIME is drawn from the clock: a new cell when its text moves (changed sample or not),
    and while every cell reads the same the row keeps its very cells list (the table then
    neither measures nor repaints it)."""
    app = TableApp()
    async with app.run_test(size=(160, 10)) as pilot:
        table = app.query_one(ProcessTable)
        timed = tuple(dataclasses.replace(p, start_time=900.0) for p in procs(1))
        table.show(timed, now=1000.0)
        await pilot.pause()
        first = table._cells["100:0"]
        time_at = table.visible_columns.index("time")
        assert first[time_at].plain == "01:40"
        table.show(tuple(dataclasses.replace(p) for p in timed), now=1000.5)  # same figures, same second
        await pilot.pause()
        assert table._cells["100:0"] is first
        table.show(tuple(dataclasses.replace(p, cpu_percent=99.0) if p.pid == 100 else p for p in timed),
                   now=1001.0)
        await pilot.pause()
        row = table.get_row("100:0")
        assert row is not first and row[time_at].plain == "01:41"
        assert [str(c) for c in row] == [str(c) for c in table._row_cells("100:0")]
