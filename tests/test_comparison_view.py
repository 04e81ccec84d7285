"""ComparisonView: the table shows every row of a comparison, names the figures, never invents."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.widgets import DataTable, Static

from gpumem_tui.analysis.comparison import compare
from gpumem_tui.telemetry.model import ProbeSample, ProcessSample, ProcessType
from gpumem_tui.ui.comparison_view import ComparisonView, format_error_percent, short_label
from gpumem_tui.support.units import format_bytes

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


def test_short_labels():
    assert short_label("optimizer_states") == "opt states"
    assert short_label("activations+logits_and_loss") == "act+logits"
    assert short_label("something_new") == "something new"


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
        # columns: component, predicted, measured, err %, error, measured as
        assert rows["params"][1:5] == ["100.0 MiB", "100.0 MiB", "+0.0%", "0 B"]
        grads = rows["grads"]
        assert grads[3] == format_error_percent(100 * 10 / 90) and grads[4] == "+10.0 MiB"
        # the probe measures activations with logits and temporaries: members are not invented
        group = rows["act+logits+temps"]
        assert group[2] == "80.0 MiB" and group[5].startswith("activations+logits_and_loss+optimizer_intermediates")
        assert rows["activations"][2] == "n/m" and rows["activations"][3] == "—"
        assert "not split" in rows["logits/loss"][5]
        # context = NVML used - reserved, reserve = reserved - allocated, both labelled
        assert rows["CUDA ctx"][2] == "430.0 MiB" and "NVML used" in rows["CUDA ctx"][5]
        assert rows["alloc reserve"][2] == "20.0 MiB"
        # one peak row per figure, predicted in the matching scope
        allocated = rows["PEAK allocated"]
        assert allocated[1] == format_bytes(sum(PRED.values()) - 420 * MiB, precision=1)
        assert allocated[2] == "480.0 MiB"
        assert rows["PEAK NVML used"][1] == format_bytes(sum(PRED.values()), precision=1)
        assert "PEAK reserved" in rows
        figure = str(view.query_one("#cmp-figure", Static).content)
        assert "torch allocated" in figure and "pid 11" in figure
        # member rows come right after their group, indented
        labels = [r[0] for r in view.cell_texts()]
        i = labels.index("act+logits+temps")
        assert labels[i + 1 : i + 4] == ["activations", "logits/loss", "opt temps"]
        table_rows = [str(table.get_row_at(j)[0].plain) for j in range(i + 1, i + 4)]
        assert all(t.startswith("  ") for t in table_rows)
        # cleared with a reason
        view.update_comparison(None, "pid 11 has ended")
        await pilot.pause()
        assert table.row_count == 0
        assert "pid 11 has ended" in str(view.query_one("#cmp-figure", Static).content)
