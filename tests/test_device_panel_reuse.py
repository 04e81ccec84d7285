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
