"""Per-process estimator state (issue 13 items 1-3, 5), checked a second way beside
test_process_estimate.py: hidden spec fields (keep_outputs, grad_accum) from the probe, a
user's estimate for one unprobed PID not inherited by another, the pane's figure equal to
`compare`'s at the end of the replayed H100 trace, a PID not in the trace named as such."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gpumem_tui.analysis.process_estimate import ComparisonError, compare_trace, from_probe_info
from gpumem_tui.telemetry.model import ProbeInfo

from shared_data import H100_TRACE as TRACE  # noqa: E402
from shared_data import needs_h100_trace as needs_trace  # noqa: E402
from test_ui import side_pane_mounted  # noqa: E402
from waiting import settle  # noqa: E402


@needs_trace
def test_compare_names_a_pid_that_is_not_in_the_trace():
    with pytest.raises(ComparisonError) as err:
        compare_trace(TRACE, pid=42)
    assert "pid 42 is not in the trace" in str(err.value)
    assert "1088" in str(err.value) and "published no model" not in str(err.value)


def test_label_names_the_model_and_the_pid_once():
    from gpumem_tui.estimator.architecture import CATALOGUE_DIR
    import json

    config = json.loads((CATALOGUE_DIR / "llama-3.2-1b.json").read_text())
    info = ProbeInfo(pid=1088, model_config=config, setup=(("batch", 1), ("seq", 64), ("model_class", "LlamaForCausalLM")))
    label = from_probe_info(info, device="cuda:0").label
    assert label == "llama-3.2-1b (probe, pid 1088)"
    named = ProbeInfo(pid=7, model_config=config, setup=(("batch", 1), ("seq", 64), ("model_name", "my-llama")))
    assert from_probe_info(named).label == "my-llama (probe, pid 7)"


def test_keep_outputs_and_other_spec_fields_come_from_the_probe():
    from gpumem_tui.estimator.architecture import CATALOGUE_DIR
    import json

    config = json.loads((CATALOGUE_DIR / "gpt2.json").read_text())
    setup = (("batch", 2), ("seq", 128), ("keep_outputs", True), ("grad_accum", 2))
    pe = from_probe_info(ProbeInfo(pid=3, model_config=config, setup=setup), device="cuda:0")
    assert pe.spec.keep_outputs is True and pe.spec.grad_accum == 2 and pe.spec.device == "cuda"
    plain = from_probe_info(ProbeInfo(pid=3, model_config=config, setup=setup[:2]), device="cuda:0")
    # the tensors kept alive (allocated); the reserve is simulated for the plain step only (the
    # allocation order with kept outputs and accumulation is not modelled)
    assert pe.estimate.allocated_peak_bytes > plain.estimate.allocated_peak_bytes


def _model_label_shown(panel):
    from textual.widgets import Select
    return str(panel.query_one("#est-model", Select).query_one("SelectCurrent #label").render()).strip()


def _replay_app(size=(200, 50)):
    from gpumem_tui.telemetry.replay import ReplaySource
    from gpumem_tui.ui.app import GpuMemApp
    from gpumem_tui.ui.themes import load_themes

    source = ReplaySource(TRACE, speed=1.0)
    source.seek(source.duration)  # the end: both jobs have published their last ProbeInfo
    source.pause()
    return GpuMemApp(source, interval=0.05, themes=load_themes())


async def _wait(pilot, condition):
    """True once ``condition()`` holds; fails naming it after a hang guard (tests/waiting.py)."""
    return bool(await settle(pilot, condition, what="the condition the test asserts"))


def _select(app, pid):
    assert app.table.select_pid(pid)
    app.chart_target = ("proc", pid)
    app.update_side_pane()


@needs_trace
def test_each_probed_process_keeps_its_own_estimate_whatever_the_selection_history():
    async def run():
        from gpumem_tui.ui.comparison_view import ComparisonView
        from gpumem_tui.ui.estimator_panel import EstimatorPanel

        app = _replay_app()
        async with app.run_test(size=(200, 50)) as pilot:
            assert await _wait(pilot, lambda: {1088, 1089} <= set(app.probe_infos) and app.query(EstimatorPanel))
            panel = app.query_one(EstimatorPanel)
            peaks = {}
            for pid in (1088, 1089, 1088):
                _select(app, pid)
                own_peak = app.process_estimates.get(pid).estimate.peak_bytes
                assert await _wait(pilot, lambda: panel.process_pid == pid and panel.estimate.peak_bytes  # noqa: B023
                                   == own_peak and app.bands and app.bands[-1][1] == own_peak)  # noqa: B023
                peaks.setdefault(pid, []).append(panel.estimate.peak_bytes)
                own = app.process_estimates.get(pid)
                assert own.source == "probe"
                assert panel.estimate.peak_bytes == own.estimate.peak_bytes  # form == its own value
                assert app.bands and app.bands[-1][1] == own.estimate.peak_bytes
            assert peaks[1088][0] == peaks[1088][1] != peaks[1089][0]
            assert app.process_estimates.get(1088).label == "llama-3.2-1b (probe, pid 1088)"
            # item 2: the pane's figure is compare's figure (-0.2 % on this trace)
            expected = compare_trace(TRACE, pid=1088)["peak_error_percent"]
            view = app.query_one(ComparisonView)
            assert await _wait(pilot, lambda: getattr(view, "result", None) is not None)
            assert view.result.headline.error_percent == pytest.approx(expected, abs=0.05)

    asyncio.run(run())


def _fake_app():
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from ui_fakes import FakeSource

    from gpumem_tui.ui.app import GpuMemApp
    from gpumem_tui.ui.themes import load_themes

    return GpuMemApp(FakeSource(), interval=0.05, themes=load_themes())


def test_an_unprobed_process_gets_no_bands_until_the_user_sets_its_estimate():
    async def run():
        from gpumem_tui.ui.estimator_panel import EstimatorPanel
        from gpumem_tui.ui.memory_chart import MemoryChart

        app = _fake_app()
        async with app.run_test(size=(200, 50)) as pilot:
            assert await _wait(pilot, lambda: app.snapshot is not None and app.query(EstimatorPanel))
            panel = app.query_one(EstimatorPanel)
            _select(app, 1002)  # `python serve.py`: no probe
            chart = app.query_one(MemoryChart)
            assert await _wait(pilot, lambda: "none for PID 1002" in chart._legend_shown.plain)
            assert panel.estimate is not None  # the form still has a what-if estimate ...
            assert app.bands == [] and chart.bands == []  # ... but it is not this process's
            hint = chart._legend_shown.plain
            assert "none for PID 1002" in hint and "gpumem_tui.probe" in hint and "(e)" in hint
            batch = panel.query_one("#est-batch")
            batch.focus()  # the user's edit comes through the focused field
            await pilot.pause()
            batch.value = "3"  # the user sets it for this PID
            assert await _wait(pilot, lambda: app.process_estimates.get(1002) is not None and chart.bands)
            assert app.process_estimates.get(1002).source == "user"
            assert app.process_estimates.get(1002).spec.batch == 3
            assert chart.bands and chart.bands[-1][1] == app.process_estimates.get(1002).estimate.peak_bytes
            _select(app, 1006)  # another unprobed process: not given 1002's estimate
            assert await _wait(pilot, lambda: "none for PID 1006" in chart._legend_shown.plain)
            assert chart.bands == [] and app.process_estimates.get(1006) is None

    asyncio.run(run())


@needs_trace
def test_the_gpu_chart_shows_no_single_process_prediction():
    async def run():
        from gpumem_tui.ui.estimator_panel import EstimatorPanel
        from gpumem_tui.ui.memory_chart import MemoryChart

        app = _replay_app()
        async with app.run_test(size=(200, 50)) as pilot:
            assert await _wait(pilot, lambda: {1088, 1089} <= set(app.probe_infos) and app.query(EstimatorPanel))
            _select(app, 1088)
            chart = app.query_one(MemoryChart)
            assert await _wait(pilot, lambda: chart.bands)  # the process chart has 1088's bands
            await pilot.press("c")  # the GPU chart holds both jobs: no one job's bands on it
            assert await _wait(pilot, lambda: app.chart_target[0] == "gpu")
            assert chart.bands == []

    asyncio.run(run())


def test_a_process_shown_before_the_form_is_mounted_keeps_its_own_estimate():
    """The race the pane had: the app pushed a probed process before the form's fields were
    mounted; the model Select could not take the probe's option yet (NoMatches) and its mount
    reset it to the catalogue default, so the form estimated another model than the process's
    own. Now the panel holds the process until its fields are mounted and then shows it."""
    import json

    from textual.app import App
    from textual.widgets import Input

    from gpumem_tui.estimator.architecture import CATALOGUE_DIR
    from gpumem_tui.ui.estimator_panel import EstimatorPanel

    config = json.loads((CATALOGUE_DIR / "gpt2.json").read_text())
    info = ProbeInfo(pid=1089, model_config=config, setup=(("batch", 3), ("seq", 256), ("model_name", "my-gpt2")))
    own = from_probe_info(info, device="cuda:0")

    async def run():
        app = App()
        async with app.run_test(size=(200, 50)) as pilot:
            panel = EstimatorPanel(model="llama-3.2-1b")
            app.mount(panel)  # not awaited: the fields are not composed yet
            panel.show_process(1089, own)
            assert await _wait(pilot, lambda: panel.process_pid == 1089 and panel.estimate is not None
                               and panel.estimate.peak_bytes == own.estimate.peak_bytes)
            assert panel.query_one("#est-batch", Input).value == "3"
            assert "my-gpt2" in _model_label_shown(panel)
            assert panel.estimate.peak_bytes == own.estimate.peak_bytes

    asyncio.run(run())


@needs_trace
def test_the_pane_uses_the_context_measured_on_the_replayed_gpu():
    """Issue 9: on the box, the estimator uses the CUDA context measured there. Replaying the
    H100 trace, each probed job's context is measured (NVML used - reserved) and the what-if
    form on that GPU takes the figure after initialisation, 610 MiB as the H100 cases say."""
    async def run():
        from gpumem_tui.ui.estimator_panel import EstimatorPanel

        from gpumem_tui.telemetry.replay import ReplaySource
        from gpumem_tui.ui.app import GpuMemApp

        source = ReplaySource(TRACE, speed=20.0)  # played through: every sample is seen
        app = GpuMemApp(source, interval=0.05)
        async with app.run_test(size=(200, 50)) as pilot:
            assert await _wait(pilot, lambda: source.finished)
            # the app has applied the last record (the replay's state may be a poll ahead of it)
            assert await _wait(pilot, lambda: app.snapshot is not None and app.snapshot.time == source.last_time)
            assert app.contexts.context(1088) == 758 * 2**20
            assert set(app.gpu_contexts.values()) == {610 * 2**20}
            assert await _wait(pilot, lambda: side_pane_mounted(app))  # the form can take what is pushed to it
            gpu = next(iter(app.gpu_contexts))
            panel = app.query_one(EstimatorPanel)

            def gpu_what_if_with_context() -> bool:
                # The GPU chart, set directly (no key does it in one step). A row highlight the
                # last polls left queued can still move the chart back to a process when it is
                # handled after this: set it again until the form is the GPU's what-if.
                if app.chart_target != ("gpu", gpu):
                    app.chart_target = ("gpu", gpu)
                    app.update_side_pane()
                return (panel.process_pid is None and panel.spec is not None
                        and panel.spec.measured_context == 610 * 2**20)

            assert await _wait(pilot, gpu_what_if_with_context)
            assert "measured on this box" in " ".join(panel.estimate.assumptions)

    asyncio.run(run())
