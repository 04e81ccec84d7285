"""The side pane's mount does each piece of work once (issue 23: start-up CPU and suite time).

Counted without timing: the footer rebuilds its keys only when the keys shown change and
styles each new key once; the estimator form estimates once per change of what it reads, not
again for each field's first value posted when it mounts; the garbage collector stays paused
while the pane mounts and runs again once it is drawn. benchmarks/side_pane_mount.py gives
the CPU figures.
"""

from __future__ import annotations

import gc
import sys
from pathlib import Path

import pytest
from textual.css.stylesheet import Stylesheet
from textual.widgets import Input, Select
from textual.widgets._footer import FooterKey

sys.path.insert(0, str(Path(__file__).parent))

from test_ui import make_app, side_pane_mounted, wait_for  # noqa: E402
from ui_fakes import FakeSource  # noqa: E402
from waiting import HANG_TIMEOUT  # noqa: E402

from gpumem_tui.ui.estimator_panel import EstimatorPanel  # noqa: E402
from gpumem_tui.ui.steady_footer import SteadyFooter  # noqa: E402


pytestmark = pytest.mark.usefixtures("no_user_config")  # tests/conftest.py


async def _settled(app, pilot) -> None:
    await wait_for(pilot, lambda: side_pane_mounted(app) and app.snapshot is not None)
    for _ in range(3):
        await pilot.pause()


async def test_a_start_with_the_pane_does_each_piece_of_work_once(monkeypatch):
    """One start with the pane (each start is ~1 s of CPU): the footer's key rebuilds and
    styles, the form's estimates, the collector's pause; then Changed events of the form."""
    shown: list[tuple] = []
    styled: dict[int, int] = {}
    reads: list[tuple] = []
    collecting_at_form_mount: list[bool] = []
    compose, apply = SteadyFooter.compose, Stylesheet.apply
    recompute, on_mount = EstimatorPanel.recompute, EstimatorPanel.on_mount

    def recording_compose(footer):
        shown.append(footer.shown_keys())
        return compose(footer)

    def counting_apply(stylesheet, node, *args, **kwargs):
        if isinstance(node, FooterKey):
            styled[id(node)] = styled.get(id(node), 0) + 1
        return apply(stylesheet, node, *args, **kwargs)

    def recording_recompute(panel):
        reads.append(_inputs(panel))
        return recompute(panel)

    def recording_on_mount(panel):
        collecting_at_form_mount.append(gc.isenabled())
        return on_mount(panel)

    monkeypatch.setattr(SteadyFooter, "compose", recording_compose)
    monkeypatch.setattr(Stylesheet, "apply", counting_apply)
    monkeypatch.setattr(EstimatorPanel, "recompute", recording_recompute)
    monkeypatch.setattr(EstimatorPanel, "on_mount", recording_on_mount)
    assert gc.isenabled()
    app = make_app(FakeSource(), side_pane=True)
    async with app.run_test(size=(160, 48)) as pilot:
        await _settled(app, pilot)
        # the footer: the start-up's binding changes (focus, the pane, refresh_bindings)
        # rebuilt its keys only for a change of what they show
        footer = app.query_one(SteadyFooter)
        keys = list(footer.query(FooterKey))
        assert keys and len(shown) >= 2  # composed empty, then with the keys once bindings came
        assert all(before != after for before, after in zip(shown, shown[1:])), "a rebuild showed the same keys"
        assert footer.recomposes == len(shown) - 1
        # each key bound to the footer's compact was styled once, when it mounted (not again
        # for its compact class: it came with the footer's before the mount); the command
        # palette's key keeps Textual's way (not bound: compact, as FooterKey starts)
        bound = [key for key in keys if not key.has_class("-command-palette")]
        assert bound and {styled.get(id(key)) for key in bound} == {1}
        assert not any(key.compact or key.has_class("-compact") for key in bound)

        # the form: the fields' first values (posted as each field mounts) were read by its
        # first estimate; none of them, nor a GPU pushed before the mount, estimated again
        panel = app.query_one(EstimatorPanel)
        assert reads and all(before != after for before, after in zip(reads, reads[1:])), \
            f"{len(reads)} estimates, some of the same inputs"
        assert panel.estimates_run == len(reads)

        # the collector: paused while the pane mounted, running again once it was drawn
        assert collecting_at_form_mount == [False]
        await wait_for(pilot, gc.isenabled, what="the collector running again after the pane's mount")

        # a Changed event with the value the form read is no change ...
        runs = panel.estimates_run
        batch = panel.query_one("#est-batch", Input)
        batch.post_message(Input.Changed(batch, batch.value))
        task = panel.query_one("#est-task", Select)
        task.post_message(Select.Changed(task, task.value))
        await pilot.pause()
        await pilot.pause()
        assert panel.estimates_run == runs
        # ... a new value is
        batch.value = "4"
        await wait_for(pilot, lambda: panel.estimates_run == runs + 1)
        await pilot.pause()
        assert panel.estimates_run == runs + 1 and panel.spec is not None and panel.spec.batch == 4
    assert gc.isenabled()


@pytest.mark.parametrize("first_poll", ["as-it-comes", "after-the-mount", "before-the-mount"])
async def test_a_form_shown_for_a_process_without_an_estimate_is_estimated_once_on_mount(monkeypatch, first_poll):
    """No probe: the selected process has no estimate, so showing it estimates nothing; the
    form's mount estimates it once, with the GPU total of the snapshot it mounts beside --
    not left to the fields' first values posted as they mount (no change: they are ignored).

    The pane mounts after the first frame, the first snapshot comes from the poller's thread:
    usually first, but not always under load. When it comes after the mount, its GPU total
    estimates once more (``set_gpu_total``), and only that. ``after-the-mount`` holds the first
    poll until the form's fields are mounted, so that order is checked every run.
    ``before-the-mount`` starts the pane's mount only once the first snapshot is shown, holds
    the second poll until the form's fields are mounted and drops the app's own push after
    the mount's frame: the form's mount asks for the
    selection itself (it once estimated without the GPU total, then again with it, when the
    mount outran that push: a CI run under load)."""
    import threading
    from dataclasses import replace

    from gpumem_tui.support.units import GiB
    from gpumem_tui.ui.app import GpuMemApp

    mounted = threading.Event()
    if first_poll == "before-the-mount":
        mount_pane = GpuMemApp._mount_side_pane

        def mount_after_the_first_snapshot(app):
            if app.snapshot is None:
                app.set_timer(0.01, app._mount_side_pane)
                return
            after_refresh = app.call_after_refresh
            app.call_after_refresh = lambda callback, *a, **k: (
                None if callback == app.update_side_pane else after_refresh(callback, *a, **k))
            try:
                mount_pane(app)
            finally:
                del app.call_after_refresh

        monkeypatch.setattr(GpuMemApp, "_mount_side_pane", mount_after_the_first_snapshot)

    polls = 0

    class Unprobed(FakeSource):
        def poll(self):
            nonlocal polls
            polls += 1
            if first_poll == "after-the-mount" or (first_poll == "before-the-mount" and polls > 1):
                mounted.wait(HANG_TIMEOUT)
            return replace(super().poll(), probes=(), probe_infos=(), phase_marks=())

    callers: list[str] = []
    snapshot_at_mount: list[bool] = []
    recompute, on_mount = EstimatorPanel.recompute, EstimatorPanel.on_mount

    def recording_recompute(panel):
        callers.append(sys._getframe(1).f_code.co_name)
        return recompute(panel)

    def recording_on_mount(panel):
        snapshot_at_mount.append(panel.app.snapshot is not None)
        on_mount(panel)
        mounted.set()

    monkeypatch.setattr(EstimatorPanel, "recompute", recording_recompute)
    monkeypatch.setattr(EstimatorPanel, "on_mount", recording_on_mount)
    app = make_app(Unprobed(), side_pane=True)
    async with app.run_test(size=(160, 48)) as pilot:
        await _settled(app, pilot)
        panel = app.query_one(EstimatorPanel)
        assert panel.process_pid is not None and panel.estimate is not None
        assert panel.budget_bytes == 40 * GiB  # GPU 0 of the fake source
        if first_poll == "after-the-mount":
            assert snapshot_at_mount == [False]
        if first_poll == "before-the-mount":
            assert snapshot_at_mount == [True]
        assert callers == (["on_mount"] if snapshot_at_mount == [True] else ["on_mount", "set_gpu_total"])


async def test_footer_keys_of_a_compact_footer_are_compact_as_textual_binds_them():
    app = make_app(FakeSource(), side_pane=True)
    async with app.run_test(size=(130, 40)) as pilot:  # medium: a compact footer
        await _settled(app, pilot)
        footer = app.query_one(SteadyFooter)
        assert footer.compact
        keys = [key for key in footer.query(FooterKey) if not key.has_class("-command-palette")]
        assert keys and all(key.compact and key.has_class("-compact") for key in keys)
        await pilot.resize_terminal(160, 48)  # wide: Textual's data binding turns it off
        await wait_for(pilot, lambda: not footer.compact)
        await pilot.pause()
        keys = [key for key in footer.query(FooterKey) if not key.has_class("-command-palette")]
        assert keys and not any(key.compact or key.has_class("-compact") for key in keys)


def _inputs(panel: EstimatorPanel) -> tuple:
    """Everything an estimate of the form reads: its fields and what the app pushed."""
    return (tuple(sorted(panel._field_values().items(), key=lambda item: str(item[0]))),
            panel._gpu_total, panel._gpu_context, id(panel._base_spec), id(panel._probe_arch),
            panel.process_pid, id(panel._plan))


def _look(widget) -> list:
    """Each node under ``widget``: its type, classes, compact / has_value and drawn lines."""
    from textual.geometry import Region

    nodes = [widget, *widget.walk_children()]
    return [(type(node).__name__.replace("FormSelect", "Select"), sorted(node.classes),
             getattr(node, "compact", None), getattr(node, "has_value", None),
             [[(segment.text, segment.style) for segment in strip]
              for strip in node.render_lines(Region(0, 0, node.size.width, node.size.height))])
            for node in nodes]


async def test_form_fields_made_compact_before_mount_are_as_textual_makes_them():
    """The form's fields (estimator_form.compact, FormSelect) end up as Textual's own
    ``compact=True`` Select, Input and Checkbox: same classes, states and lines."""
    from textual.app import App
    from textual.containers import Horizontal, Vertical
    from textual.widgets import Checkbox

    from gpumem_tui.ui.estimator_form import FormSelect, compact

    options = [("bf16", "bf16"), ("fp16", "fp16"), ("fp32", "fp32")]

    class Pair(App):
        AUTO_FOCUS = None  # a focused field looks otherwise

        def compose(self):
            with Horizontal():
                with Vertical(id="textual"):
                    yield Select(options, value="fp16", allow_blank=False, compact=True)
                    yield Input("12", restrict=r"-?[0-9]*", compact=True)
                    yield Input(placeholder="type", compact=True)
                    yield Checkbox("fp32 master", False, compact=True)
                with Vertical(id="ours"):
                    yield compact(FormSelect(options, value="fp16", allow_blank=False, shows_value=True))
                    yield compact(Input("12", restrict=r"-?[0-9]*"))
                    yield compact(Input(placeholder="type"))
                    yield compact(Checkbox("fp32 master", False))

    app = Pair()
    async with app.run_test(size=(80, 12)) as pilot:
        await pilot.pause()
        await pilot.pause()
        theirs, ours = (app.query_one(f"#{side}").children for side in ("textual", "ours"))
        assert len(theirs) == len(ours) == 4
        for textual_field, our_field in zip(theirs, ours):
            assert _look(our_field) == _look(textual_field), type(textual_field).__name__


async def test_a_comparison_that_keeps_its_heights_is_shown_without_a_layout(monkeypatch):
    """A poll of a probed job changes the sample count in the figure line: shown without a
    layout of the screen and without rebuilding the table, and a text that wraps to more lines
    is laid out to its new height."""
    from dataclasses import replace

    from textual.app import App
    from textual.screen import Screen
    from textual.widgets import DataTable, Static
    from test_comparison_view import _result

    from gpumem_tui.ui.comparison_view import ComparisonView

    class Host(App):
        def compose(self):
            yield ComparisonView()

    layouts = []
    refresh_layout = Screen._refresh_layout

    def counting_layout(screen, *args, **kwargs):
        layouts.append(1)
        return refresh_layout(screen, *args, **kwargs)

    monkeypatch.setattr(Screen, "_refresh_layout", counting_layout)
    app = Host()
    async with app.run_test(size=(100, 40)) as pilot:
        view = app.query_one(ComparisonView)
        result = _result()
        view.update_comparison(result, title="job")
        await pilot.pause()
        await pilot.pause()
        figure, table = view.query_one("#cmp-figure", Static), view.query_one(DataTable)
        rows_before, height_before = table.row_count, figure.size.height
        assert rows_before > 0 and height_before >= 1
        layouts.clear()
        cleared = []
        monkeypatch.setattr(table, "clear", lambda *a, **k: cleared.append(1) or DataTable.clear(table, *a, **k))
        view.update_comparison(replace(result, sample_count=result.sample_count + 7), title="job")
        await pilot.pause()
        await pilot.pause()
        assert f"({result.sample_count + 7} samples)" in str(figure.render())
        assert layouts == [] and cleared == [] and table.row_count == rows_before
        # a title long enough to wrap the figure line to more rows: laid out to its height
        view.update_comparison(result, title="a very long job name " * 6)
        await wait_for(pilot, lambda: figure.size.height > height_before)
        assert layouts and figure.size.height == figure.visual.get_height(figure.styles, figure.content_size.width)
