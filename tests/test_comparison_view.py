"""ComparisonView: the table shows every row of a comparison, names the figures, never invents."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.widgets import DataTable, Static

from gpumem_tui.comparison import compare
from gpumem_tui.telemetry.model import ProbeSample, ProcessSample, ProcessType
from gpumem_tui.ui.comparison_view import ComparisonView, format_error_percent

MiB = 1 << 20
PRED = {
    "parameters": 100 * MiB,
    "gradients": 100 * MiB,
    "optimizer_states": 200 * MiB,
    "optimizer_intermediates": 0,
    "activations": 50 * MiB,
    "logits_and_loss": 30 * MiB,
    "kv_cache": 0,
    "cuda_context": 400 * MiB,
    "allocator_reserve": 20 * MiB,
}


class Host(App[None]):
    def compose(self) -> ComposeResult:
        yield ComparisonView()


def _result():
    samples = [
        ProbeSample(
            time=1.0, pid=11, device="cuda:0", allocated_bytes=470 * MiB, reserved_bytes=500 * MiB,
            peak_allocated_bytes=480 * MiB,
            categories=(("parameters", 100 * MiB), ("gradients", 90 * MiB), ("optimizer_states", 200 * MiB),
                        ("activations", 80 * MiB)),
        )
    ]
    nvml = [ProcessSample(pid=11, device_index=0, type=ProcessType.COMPUTE, used_memory_bytes=930 * MiB)]
    return compare({"components_bytes": PRED, "peak_bytes": sum(PRED.values())}, samples, nvml)


def test_format_error_percent():
    assert format_error_percent(4.249) == "+4.2%"
    assert format_error_percent(-0.3) == "-0.3%"
    assert format_error_percent(None) == "—"


async def test_table_rows_figures_and_unmeasured_components():
    app = Host()
    async with app.run_test(size=(140, 40)) as pilot:
        view = app.query_one(ComparisonView)
        assert "select a probed process" in str(view.query_one("#cmp-figure", Static).content)
        result = _result()
        view.update_comparison(result)
        await pilot.pause()
        table = view.query_one(DataTable)
        assert table.row_count == len(result.components) + len(result.peaks)
        rows = {r[0]: r for r in view.cell_texts()}
        # parameters: predicted 100 MiB, measured 100 MiB, 0 error
        assert rows["parameters"][1:5] == ["100.0 MiB", "100.0 MiB", "0.0 MiB", "+0.0%"]
        grads = rows["gradients"]
        assert grads[3] == "+10.0 MiB" and grads[4] == format_error_percent(100 * 10 / 90)
        # the probe measures activations and logits together: members are not invented
        assert rows["activations + logits & loss + optimizer temporaries"][2] == "80.0 MiB"
        assert rows["activations"][2] == "not measured" and rows["activations"][4] == "—"
        assert "not split" in rows["logits & loss"][5]
        # context = NVML used - reserved, reserve = reserved - allocated, both labelled
        assert rows["CUDA context"][2] == "430.0 MiB" and "NVML used" in rows["CUDA context"][5]
        assert rows["allocator reserve"][2] == "20.0 MiB"
        # one peak row per figure, predicted in the matching scope
        allocated = rows["PEAK (torch allocated)"]
        assert allocated[1] == f"{(sum(PRED.values()) - 420 * MiB) / MiB:.1f} MiB" and allocated[2] == "480.0 MiB"
        assert rows["PEAK (NVML used)"][1] == f"{sum(PRED.values()) / MiB:.1f} MiB"
        assert "PEAK (torch reserved)" in rows
        figure = str(view.query_one("#cmp-figure", Static).content)
        assert "torch allocated" in figure and "pid 11" in figure
        # cleared with a reason
        view.update_comparison(None, "pid 11 has ended")
        await pilot.pause()
        assert table.row_count == 0
        assert "pid 11 has ended" in str(view.query_one("#cmp-figure", Static).content)
