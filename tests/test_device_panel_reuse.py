"""DevicePanel keeps the cells of a GPU whose fields did not change between polls (issue 23,
idle CPU) and shows every change: the row drawn equals a fresh panel's."""

from __future__ import annotations

from textual.app import App, ComposeResult

from gpumem_tui.telemetry.model import DeviceSample
from gpumem_tui.ui.device_panel import DevicePanel

GiB = 1 << 30


class PanelApp(App[None]):
    def compose(self) -> ComposeResult:
        yield DevicePanel(id="devices")


def gpu(used_gib: int, util: float = 50.0, temp: float | None = 55.0, error: str | None = None) -> DeviceSample:
    return DeviceSample(0, "NVIDIA H100 80GB HBM3", "GPU-0", 80 * GiB, used_gib * GiB, util, temp, 300.0, 700.0,
                        error=error)


async def test_a_changed_gpu_keeps_its_unchanged_cells_and_draws_like_a_fresh_panel():
    app = PanelApp()
    async with app.run_test(size=(160, 6)) as pilot:
        panel = app.query_one(DevicePanel)
        panel.show((gpu(20),), fit_width=160)
        await pilot.pause()
        before = list(panel.get_row("0"))
        for changed in (gpu(21), gpu(21, util=70.0), gpu(21, util=70.0, temp=None), gpu(21, error="GPU is lost"),
                        gpu(22)):
            panel.show((changed,), fit_width=160)
            await pilot.pause()
            after = list(panel.get_row("0"))
            fresh = DevicePanel()
            fresh_cells = fresh._row(changed, *panel._bar_styles(), False, panel._bar_width(False))
            assert [c.plain for c in after] == [c.plain for c in fresh_cells]
            assert [c.spans for c in after] == [c.spans for c in fresh_cells]
            kept = [a is b for a, b in zip(after, before)]
            before = after
        assert kept == [False] * 7  # the error cleared (22 GiB after "GPU is lost"): every cell is new
        panel.show((gpu(23),), fit_width=160)
        await pilot.pause()
        again = list(panel.get_row("0"))
        # index, name, utilization, temperature and power unchanged: kept; memory text and bar new
        assert [a is b for a, b in zip(again, before)] == [True, True, False, False, True, True, True]
        assert "23,552" in again[2].plain


async def test_a_figure_is_one_cell_shared_by_gpus_and_polls_that_show_it():
    """GPUs showing the same figure with the same look share its cell, a figure that comes back
    gets the cell made for it before, and each GPU still shows its own figures."""
    import dataclasses

    app = PanelApp()
    async with app.run_test(size=(160, 6)) as pilot:
        panel = app.query_one(DevicePanel)
        second = dataclasses.replace(gpu(30), index=1, uuid="GPU-1")
        panel.show((gpu(20), second), fit_width=160)
        await pilot.pause()
        first_row, second_row = panel.get_row("0"), panel.get_row("1")
        util, temp, memory = 4, 5, 2
        assert first_row[util] is second_row[util] and first_row[temp] is second_row[temp]
        assert first_row[memory] is not second_row[memory]  # 20 vs 30 GiB
        panel.show((gpu(21), second), fit_width=160)
        await pilot.pause()
        assert "21,504" in panel.get_row("0")[memory].plain
        panel.show((gpu(20), second), fit_width=160)  # back to 20 GiB: the cells made for it
        await pilot.pause()
        assert panel.get_row("0")[memory] is first_row[memory] and panel.get_row("0")[3] is first_row[3]
        lines = [panel.render_line(y).text for y in (1, 2)]
        assert "20,480" in lines[0] and "30,720" in lines[1]


async def test_a_gpu_that_reads_the_same_keeps_its_row_list_and_a_changed_one_gets_a_new_one():
    """A new sample whose shown fields are all the same (here only its UUID differs, a field
    no cell shows) keeps the row's very cells list: the table sees an unchanged row and
    neither measures nor repaints it. A changed figure makes a new list."""
    import dataclasses

    app = PanelApp()
    async with app.run_test(size=(160, 6)) as pilot:
        panel = app.query_one(DevicePanel)
        panel.show((gpu(20),), fit_width=160)
        await pilot.pause()
        first = panel._cells["0"]
        panel.show((dataclasses.replace(gpu(20), uuid="GPU-other"),), fit_width=160)
        await pilot.pause()
        assert panel._cells["0"] is first
        panel.show((gpu(21),), fit_width=160)
        await pilot.pause()
        assert panel._cells["0"] is not first
        assert panel.get_row("0")[2].plain != first[2].plain  # the memory cell shows the new figure
