"""The estimator pane on a probed job: a form it cannot estimate shows no figure, a what-if
is shown as a what-if (never scored as the estimator's error), `p` goes back to the job's own
estimate, and the keyboard reaches the pane's widgets in a replay (tester's items 1-3).

Replays the real H100 trace (``../shared/validation/gpu/trace_h100.jsonl``: PID 1088
Llama-3.2-1B at batch 4, PID 1089 GPT-2 at batch 8, both probed) and drives the form with
key presses, as a user would.
"""

from __future__ import annotations


from textual.widgets import Input, Static, Tabs

from gpumem_tui.telemetry.replay import ReplaySource
from gpumem_tui.ui.comparison_view import ComparisonView
from gpumem_tui.ui.estimator_panel import EstimatorPanel
from gpumem_tui.ui.memory_bar import MemoryBar, estimate_peak
from gpumem_tui.ui.process_table import ProcessTable
from test_process_estimate import _model_label_shown, _replayed
from test_ui import make_app, wait_for

from shared_data import H100_TRACE as TRACE  # noqa: E402
from shared_data import needs_h100_trace  # noqa: E402



def _text(widget: Static) -> str:
    return str(widget.render())


def _shown_keys(app) -> dict[str, str]:
    """key -> description of the bindings the footer shows now."""
    return {key: active.binding.description for key, active in app.screen.active_bindings.items()
            if active.binding.show and active.enabled}


async def _type_batch(pilot, app, text: str) -> None:
    field = app.query_one("#est-batch", Input)
    field.focus()
    await pilot.pause()
    await pilot.press("end", *["backspace"] * len(field.value))
    for char in text:
        await pilot.press(char)
    await pilot.pause()
    assert field.value == text  # the callers then wait on what the panel makes of it


async def _replay_at_end(pilot, app) -> EstimatorPanel:
    await _replayed(pilot, app)
    app.source.pause()
    panel = app.query_one(EstimatorPanel)
    await wait_for(pilot, lambda: panel.process_pid == 1088 and panel.spec is not None and panel.spec.batch == 4)
    return panel


@needs_h100_trace
async def test_a_form_that_cannot_be_estimated_shows_no_figure_and_no_probe_label():
    app = make_app(ReplaySource(TRACE, speed=8.0), side_pane=True, select_pid=1088)
    async with app.run_test(size=(160, 50)) as pilot:
        panel = await _replay_at_end(pilot, app)
        # the tester's keystrokes: empty the field and type 14 nines (no Enter)
        await _type_batch(pilot, app, "99999999999999")
        await wait_for(pilot, lambda: "batch" in panel.invalid_fields)
        fit = _text(panel.query_one("#est-fit", Static))
        shown = fit + _text(panel.query_one("#est-maxbatch", Static)) + _text(panel.query_one("#est-breakdown", Static))
        assert "MiB" not in shown and "GiB" not in shown and "largest" not in shown, shown
        assert "no estimate for this form" in fit
        assert panel.query_one(MemoryBar)._segments == []
        assert "batch" in _text(panel.query_one("#est-message", Static))  # says why
        # what the chart draws is the last what-if the form could estimate, and says so
        mine = app.process_estimates.get(1088)
        assert mine.is_what_if and mine.spec.batch > 4
        assert app.chart.bands_note == mine.label and mine.label.startswith("what-if on pid 1088: batch ")
        # the model field no longer calls the form "the probe's"
        assert "(probe" not in _model_label_shown(panel)
        assert "not estimated" in _text(panel.query_one("#est-whatif", Static))


@needs_h100_trace
async def test_a_what_if_is_shown_apart_from_the_comparison_and_p_goes_back():
    app = make_app(ReplaySource(TRACE, speed=8.0), side_pane=True, select_pid=1088)
    async with app.run_test(size=(160, 50)) as pilot:
        panel = await _replay_at_end(pilot, app)
        view = app.query_one(ComparisonView)
        await wait_for(pilot, lambda: view.result is not None)
        before = view.result.headline  # the job's estimate against what the job measured
        await _type_batch(pilot, app, "8")
        await wait_for(pilot, lambda: app.process_estimates.get(1088).source == "user")
        mine = app.process_estimates.get(1088)
        job = app.process_estimates.probe_estimate(1088)
        assert mine.what_if == ("batch 8 (job: 4)",) and mine.label == "what-if on pid 1088: batch 8 (job: 4)"
        assert "what-if on PID 1088: batch 8 (job: 4)" in _text(panel.query_one("#est-whatif", Static))
        # the measured job ran at batch 4: the table still compares the job's estimate ...
        await wait_for(pilot, lambda: view.what_if is not None)
        assert view.result.headline == before
        assert view.result.headline.predicted_bytes != estimate_peak(mine.estimate)
        # ... and the what-if is a line of its own with both peaks, not an error
        assert "batch 8 (job: 4)" in view.what_if and "not compared" in view.what_if
        assert f"{estimate_peak(mine.estimate) / 2**30:.2f} GiB" in view.what_if
        assert not view.query_one("#cmp-whatif").has_class("-none")
        # from the field, ctrl+r is the key shown (p is typed there); from the table, p
        assert _shown_keys(app).get("ctrl+r") == "Job's estimate" and "p" not in _shown_keys(app)
        await pilot.press("escape")
        assert isinstance(app.focused, ProcessTable)
        assert _shown_keys(app).get("p") == "Job's estimate"
        # the help names both keys in one row, in words
        assert ("p, ^r (in a field)", "Drop the what-if: back to the job's own estimate (from its probe)",
                "job_estimate") in app.help_rows()
        await pilot.press("p")
        await wait_for(pilot, lambda: app.process_estimates.get(1088).source == "probe")
        await wait_for(pilot, lambda: panel.spec.batch == 4 and view.what_if is None)
        assert app.chart.bands_note == job.label
        assert "the job's own estimate" in _text(panel.query_one("#est-whatif", Static))
        assert view.query_one("#cmp-whatif").has_class("-none")
        assert "p" not in _shown_keys(app)  # nothing to go back from


@needs_h100_trace
async def test_replay_keys_leave_the_tab_bar_and_fields_their_keys_and_esc_leaves_them():
    app = make_app(ReplaySource(TRACE, speed=8.0), side_pane=True, select_pid=1088)
    async with app.run_test(size=(160, 50)) as pilot:
        await _replay_at_end(pilot, app)
        tabs = app.query_one("#side-tabs Tabs", Tabs)
        tabs.focus()
        await pilot.pause()
        before = app.source.position
        await pilot.press("right")
        await wait_for(pilot, lambda: tabs.active.endswith("tab-comparison"))  # the arrow switched tabs ...
        assert app.source.position == before  # ... and did not seek
        await pilot.press("escape")
        assert isinstance(app.focused, ProcessTable)
        await pilot.press("left")  # on the table the arrows seek
        await wait_for(pilot, lambda: app.source.position < before)
        # in a field: space and arrows are typing; the footer says how to get out
        app.query_one("#side-tabs").active = "tab-estimator"
        field = app.query_one("#est-seq", Input)
        field.focus()
        await pilot.pause()
        paused = app.source.paused
        await pilot.press("space", "left")
        assert app.source.paused == paused
        assert _shown_keys(app).get("escape") == "Back to table"
        await pilot.press("escape")
        assert isinstance(app.focused, ProcessTable)
        assert "escape" not in _shown_keys(app)


def test_what_if_changes_name_each_setting_in_the_form_s_words():
    import dataclasses

    from gpumem_tui.estimator.architecture import load_architecture
    from gpumem_tui.estimator.spec import TrainingSpec
    from gpumem_tui.analysis.process_estimate import SOURCE_PROBE, ProcessEstimate, what_if_changes

    arch = load_architecture("gpt2")
    spec = TrainingSpec(task="train", batch=4, seq=1024, grad_ckpt="none", mixed_precision=True)
    job = ProcessEstimate(7, SOURCE_PROBE, "gpt2 (probe, pid 7)", arch, spec, object(), model="gpt2")
    assert what_if_changes(job, arch, spec, "gpt2") == ()
    mine = dataclasses.replace(spec, batch=8, grad_ckpt="full", mixed_precision=False, measured_context=123)
    assert what_if_changes(job, arch, mine, "gpt2") == (
        "batch 8 (job: 4)", "fp32 master off (job: on)", "ckpt full (job: none)")  # not the box's context
    other = load_architecture("llama-3.2-1b")
    assert what_if_changes(job, other, spec, "llama-3.2-1b") == ("model llama-3.2-1b (job: gpt2)",)
