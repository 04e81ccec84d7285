"""Per-process estimates (issue 13 items 1-3, 5): every figure belongs to its own process.

Replays the real H100 trace (``../shared/validation/gpu/trace_h100.jsonl``: PID 1088
Llama-3.2-1B, PID 1089 GPT-2, both probed) and checks that each process's label, form, bands
and comparison come from its own ProbeInfo whatever was selected before, that the pane shows
the same figure as ``gpumem-tui compare``, and that unprobed processes and the GPU chart get
no bands, only a hint.
"""

from __future__ import annotations

import dataclasses

from textual.widgets import Select

from gpumem_tui.analysis.process_estimate import (
    ProcessEstimates,
    compare_trace,
    from_probe_info,
    model_label,
)
from gpumem_tui.telemetry.model import ProbeInfo
from gpumem_tui.telemetry.replay import ReplaySource
from gpumem_tui.ui.comparison_view import ComparisonView
from gpumem_tui.ui.estimator_panel import EstimatorPanel
from gpumem_tui.ui.memory_bar import bands_from_estimate
from test_ui import make_app, wait_for
from ui_fakes import FakeSource

from shared_data import H100_TRACE as TRACE  # noqa: E402
from shared_data import needs_h100_trace  # noqa: E402



def _model_label_shown(panel: EstimatorPanel) -> str:
    select = panel.query_one("#est-model", Select)
    return str(select.query_one("SelectCurrent #label").render()).strip()


async def _replayed(pilot, app) -> None:
    await wait_for(
        pilot,
        lambda: {1088, 1089} <= set(app.process_estimates.pids())
        and all(len(app.probe_samples.get(pid, ())) > 5 for pid in (1088, 1089))
        and bool(app.query(EstimatorPanel)),
    )


@needs_h100_trace
async def test_each_probed_process_keeps_its_own_estimate_whatever_the_selection_history():
    app = make_app(ReplaySource(TRACE, speed=8.0), side_pane=True)
    async with app.run_test(size=(200, 50)) as pilot:
        await _replayed(pilot, app)
        app.source.pause()
        panel = app.query_one(EstimatorPanel)
        view = app.query_one(ComparisonView)
        seen = {}
        for pid in (1088, 1089, 1088):
            app.table.select_pid(pid)

            def shows_its_own() -> bool:
                # looked up each time: the estimate is rebuilt when its measured CUDA context changes
                own = app.process_estimates.get(pid)
                return (panel.process_pid == own.pid and panel.spec == own.spec and _model_label_shown(panel) == own.label
                        and view.result is not None and view.result.pid == own.pid)

            await wait_for(pilot, shows_its_own)
            own = app.process_estimates.get(pid)
            # the label names the model and the PID once
            label = _model_label_shown(panel)
            assert label.count(str(pid)) == 1 and "pid pid" not in label
            # the form, the chart's bands and the comparison are this process's own
            assert panel.spec == own.spec and panel.architecture == own.architecture
            assert app.chart.bands == bands_from_estimate(own.estimate)
            assert app.chart.bands_note == own.label
            assert view.result is not None and view.result.pid == pid
            seen[pid] = (label, panel.spec.batch, panel.spec.seq, view.result.headline.error_percent)
        assert seen[1088][0] == "llama-3.2-1b (probe, pid 1088)"
        assert seen[1089][0] == "gpumem-tui demo GPT-2 (probe, pid 1089)"
        assert seen[1088][1:3] == (4, 2048) and seen[1089][1:3] == (8, 1024)


@needs_h100_trace
async def test_the_pane_shows_the_figure_compare_shows():
    expected = compare_trace(TRACE, pid=1088)["peak_error_percent"]
    app = make_app(ReplaySource(TRACE, speed=8.0), side_pane=True, select_pid=1088)
    async with app.run_test(size=(200, 50)) as pilot:
        await _replayed(pilot, app)
        # the end of the trace: the pane has every sample compare reads
        await wait_for(pilot, lambda: app.source.finished)
        view = app.query_one(ComparisonView)
        await wait_for(pilot, lambda: view.result is not None and view.result.sample_count == len(app.probe_samples[1088]))
        assert round(view.result.headline.error_percent, 3) == expected
        assert abs(expected) < 1.0  # -0.2 %: the keep-outputs loop the probe reported


@needs_h100_trace
async def test_a_user_edit_stays_with_the_process_it_was_made_for():
    app = make_app(ReplaySource(TRACE, speed=8.0), side_pane=True, select_pid=1088)
    async with app.run_test(size=(200, 50)) as pilot:
        await _replayed(pilot, app)
        app.source.pause()
        panel = app.query_one(EstimatorPanel)
        app.table.select_pid(1089)
        await wait_for(pilot, lambda: panel.process_pid == 1089 and panel.spec.batch == 8)
        panel.set_form(batch=2)
        await wait_for(pilot, lambda: app.process_estimates.get(1089).source == "user")
        mine = app.process_estimates.get(1089)
        # a what-if on a probed job says what differs from the job's own settings
        assert mine.spec.batch == 2 and mine.label == "what-if on pid 1089: batch 2 (job: 8)"
        # the probe's hidden fields are kept: only the batch differs from the probe's spec
        probed = app.process_estimates.probe_estimate(1089)
        assert mine.spec == dataclasses.replace(probed.spec, batch=2)
        # 1088 is untouched, and coming back to 1089 shows the user's estimate, not the probe's
        assert app.process_estimates.get(1088).source == "probe"
        app.table.select_pid(1088)
        await wait_for(pilot, lambda: panel.process_pid == 1088 and panel.spec.batch == 4)
        app.table.select_pid(1089)
        await wait_for(pilot, lambda: panel.process_pid == 1089 and app.chart.bands)
        assert panel.spec.batch == 2
        assert app.chart.bands == bands_from_estimate(mine.estimate)


async def test_no_bands_for_an_unprobed_process_or_on_the_gpu_chart():
    app = make_app(FakeSource(steps=3), side_pane=True, select_pid=1002)  # 1002: not probed
    async with app.run_test(size=(200, 50)) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None and app.chart_target == ("proc", 1002))
        await wait_for(pilot, lambda: bool(app.query(EstimatorPanel)) and app.query_one(EstimatorPanel).estimate)
        await wait_for(pilot, lambda: "none for PID 1002" in app.chart.bands_note)
        assert app.process_estimates.get(1002) is None
        assert app.chart.bands == []
        assert "none for PID 1002" in app.chart.bands_note and "gpumem_tui.probe" in app.chart.bands_note
        await pilot.pause()
        assert "attach gpumem_tui.probe" in app.chart._legend_shown.plain
        # the GPU chart holds every job: it shows none of them as "the" prediction
        app.chart_target = ("gpu", 0)
        app._update_chart()
        assert app.chart.bands == [] and "select a process" in app.chart.bands_note
        # the user sets an estimate for 1002 in the pane: now 1002, and only 1002, has bands
        app.chart_target = ("proc", 1002)
        app.update_side_pane()
        panel = app.query_one(EstimatorPanel)
        panel.set_form(batch=3)
        await wait_for(pilot, lambda: app.process_estimates.get(1002) is not None)
        await pilot.pause()
        assert app.chart.bands == bands_from_estimate(app.process_estimates.get(1002).estimate)
        assert app.process_estimates.get(1003) is None


def test_model_label_names_the_model_never_the_pid():
    import json

    from gpumem_tui.estimator.architecture import CATALOGUE_DIR

    llama = json.loads((CATALOGUE_DIR / "llama-3.2-1b.json").read_text())
    assert model_label(ProbeInfo(1, llama, (("batch", 1),))) == "llama-3.2-1b"
    changed = {**llama, "num_hidden_layers": 3}
    assert model_label(ProbeInfo(1, changed, (("model_class", "LlamaForCausalLM"),))) == "LlamaForCausalLM"
    assert model_label(ProbeInfo(1, {"model_type": "llama"}, ())) == "llama"
    assert model_label(ProbeInfo(1, None, (("model_name", "[b]x[/b]\x1b[31m"),))).startswith("[b]x[/b]")


def test_registry_rebuilds_only_on_new_content_and_never_over_the_users_estimate():
    import json

    from gpumem_tui.estimator.architecture import CATALOGUE_DIR

    gpt2 = json.loads((CATALOGUE_DIR / "gpt2.json").read_text())
    info = ProbeInfo(5, gpt2, (("batch", 2), ("seq", 128), ("dtype", "float32")))
    reg = ProcessEstimates()
    first = reg.update_probe(info, "cuda:0")
    assert reg.update_probe(info, "cuda:0") is first  # same content: not rebuilt
    assert first.estimate is not None and first.spec.device == "cuda"
    cpu = reg.update_probe(info, "cpu")
    assert cpu is not first and cpu.spec.device == "cpu"
    other = from_probe_info(ProbeInfo(5, gpt2, (("batch", 4), ("seq", 128))), "cpu")
    reg.set_user(5, other.architecture, other.spec, other.estimate, "gpt2")
    changed = ProbeInfo(5, gpt2, (("batch", 3), ("seq", 128)))
    assert reg.update_probe(changed, "cpu").source == "user"  # the user's stays shown
    assert reg.probe_estimate(5).spec.batch == 3  # the probe's is still kept up to date
    reg.clear_user(5)
    assert reg.get(5).source == "probe"
    # setting exactly the probe's own estimate is the probe's, not a user override
    probe = reg.get(5)
    assert reg.set_user(5, probe.architecture, probe.spec, probe.estimate, "x") is probe
    reg.prune([])
    assert reg.get(5) is None and reg.pids() == []


def test_keep_probes_forgets_probe_estimates_of_pids_not_seen_yet_but_not_the_users():
    """A replay that seeks back to before a process's ProbeInfo has no probe estimate for it."""
    import json

    from gpumem_tui.estimator.architecture import CATALOGUE_DIR

    gpt2 = json.loads((CATALOGUE_DIR / "gpt2.json").read_text())
    reg = ProcessEstimates()
    reg.update_probe(ProbeInfo(5, gpt2, (("batch", 2), ("seq", 128))), "cuda:0")
    reg.update_probe(ProbeInfo(6, gpt2, (("batch", 2), ("seq", 128))), "cuda:0")
    mine = from_probe_info(ProbeInfo(6, gpt2, (("batch", 4), ("seq", 128))), "cuda:0")
    reg.set_user(6, mine.architecture, mine.spec, mine.estimate, "gpt2")
    reg.keep_probes([5])
    assert reg.get(5).source == "probe"
    assert reg.get(6).source == "user" and reg.probe_estimate(6) is None
    reg.keep_probes([])
    assert reg.get(5) is None and reg.pids() == [6]
