"""Quitting at any moment of start-up is clean: exit code 0, no traceback (issue 23 follow-up).

The side pane (estimator form and predicted-vs-measured, ~170 widgets) mounts after the first
frame. Quitting while it was still mounting made Textual tear the half-composed pane down:
a widget pruned before its compose mounts no children, but still gets its Mount event, so
Select's own ``_on_mount`` and the estimator form's ``on_mount`` asked for children that never
came (``NoMatches``); a quit before the deferred mount ran made it mount into a torn-down
``#main`` (``MountError``). Either ended the app with exit code 1 and a traceback.

Each test quits at one moment: right before the pane's mount starts, inside it (when the
estimator form composes, when its first Select composes), and at each moment between
(QUIT_MOMENTS: the first poll, the pane pushed, its fields mounted, the app idle).
A key typed right after ``q`` (queued behind it) must not run: ``/`` mounted the filter box and
``K`` pushed the signal confirmation into the app being torn down.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from textual.widgets import Select

sys.path.insert(0, str(Path(__file__).parent))

from test_ui import make_app, side_pane_mounted, wait_for  # noqa: E402
from ui_fakes import FakeSource  # noqa: E402
from waiting import wait_async  # noqa: E402

from gpumem_tui.telemetry.replay import ReplaySource  # noqa: E402
from gpumem_tui.ui.estimator_panel import EstimatorPanel  # noqa: E402

SIZE = (160, 48)  # wide: the pane is shown, as a user's first frame at this width


@pytest.fixture(autouse=True)
def _no_user_config_or_cache(no_user_config, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # crash reports, if any, go there


def _source(kind: str, request):
    """The live dashboard's source (a fake of NVML + psutil), or a replay of the H100 trace."""
    return FakeSource() if kind == "live" else ReplaySource(request.getfixturevalue("h100_trace"), speed=8.0)


async def _run_and_quit(app) -> None:
    """Run ``app`` under run_test (a hook of the test quits), then wait until the app ended by
    itself (run_test would tear it down at once, not as a quit does). run_test re-raises what
    ended the app."""
    async with app.run_test(size=SIZE):
        await wait_async(lambda: not app.is_running, what="the app to end after the quit")


def _assert_clean(app) -> None:
    assert app.return_code == 0, app.crash_line
    assert app.crash_line is None


@pytest.mark.parametrize("source", ["live", "replay"])
@pytest.mark.parametrize("moment", ["before-mount", "mount-started", "form-composes", "select-composes"])
async def test_quit_at_each_moment_of_the_side_pane_mount(monkeypatch, request, moment, source):
    app = make_app(_source(source, request), side_pane=True)
    real_mount = type(app)._mount_side_pane

    def mount_side_pane(self) -> None:
        if moment == "before-mount":
            self.exit()  # the user's `q` is handled before the deferred mount runs
        real_mount(self)
        if moment == "mount-started":
            self.exit()

    def quitting_compose(real):
        def compose(self):
            self.app.exit()
            return real(self)
        return compose

    monkeypatch.setattr(type(app), "_mount_side_pane", mount_side_pane)
    if moment == "form-composes":
        monkeypatch.setattr(EstimatorPanel, "compose", quitting_compose(EstimatorPanel.compose))
    if moment == "select-composes":
        monkeypatch.setattr(Select, "compose", quitting_compose(Select.compose))
    await _run_and_quit(app)
    _assert_clean(app)


#: The moments between (start-up in the order it usually goes: the pane's mount starts, the
#: first poll lands, the selection is pushed to the pane, the pane's fields mount, then it runs
#: steady), each the first turn of the event loop where its condition holds (None: at once when
#: run_test hands over, before the pane's mount and the first poll). The 0-7 pilot pauses this
#: test took before hit only two of them (none, or all done: a pause waits for the app to go
#: idle), at a second of CPU per start with the pane.
QUIT_MOMENTS = {
    "at-once": None,
    "first-poll": lambda app: app.snapshot is not None,
    "pane-pushed": lambda app: app._pane_state is not None and app._pane_state.comparison_key is not None,
    "fields-mounted": side_pane_mounted,
    "idle": "pause",  # a pilot pause: the pane done, the app idle between polls
}


async def _quit_at(app, moment, key: bool) -> None:
    """Run ``app``; quit by ``q`` (``key``: posted as a terminal delivers it, not through the
    pilot, whose press first waits for the app to go idle) or App.exit at ``moment`` (a
    QUIT_MOMENTS value), then wait until the app ended by itself."""
    from textual import events

    async with app.run_test(size=SIZE) as pilot:
        if moment == "pause":
            await pilot.pause()
        elif moment is not None:
            await wait_async(lambda: moment(app), what="the moment to quit at", poll=0.001)
        if key:
            app.post_message(events.Key("q", "q"))
        else:
            app.exit()
        await wait_async(lambda: not app.is_running, what="the app to end after the quit")


@pytest.mark.parametrize("moment", QUIT_MOMENTS)
@pytest.mark.parametrize("key", [False, True], ids=["exit", "q"])
async def test_quit_at_each_moment_of_start_up(key, moment):
    app = make_app(FakeSource(), side_pane=True)
    await _quit_at(app, QUIT_MOMENTS[moment], key)
    _assert_clean(app)


async def test_a_quit_while_the_pane_mounts_waits_for_it_then_exits(monkeypatch):
    # The quit is neither lost nor tearing the pane down half-composed: the estimator form
    # mounts (its on_mount runs with its fields there), then the app ends with status 0.
    app = make_app(FakeSource(), side_pane=True)
    real_mount, real_on_mount = type(app)._mount_side_pane, EstimatorPanel.on_mount
    quit_while_mounting, form_mounted = [], []

    def mount_side_pane(self) -> None:
        real_mount(self)
        quit_while_mounting.append(not side_pane_mounted(self))
        self.exit()

    def on_mount(self) -> None:
        form_mounted.append(bool(self.query("#est-task")))
        real_on_mount(self)

    monkeypatch.setattr(type(app), "_mount_side_pane", mount_side_pane)
    monkeypatch.setattr(EstimatorPanel, "on_mount", on_mount)
    await _run_and_quit(app)
    assert quit_while_mounting == [True]
    assert form_mounted == [True]
    _assert_clean(app)


@pytest.mark.parametrize(("key", "character"), [("slash", "/"), ("K", "K"), ("e", "e"), ("question_mark", "?")])
async def test_a_key_typed_right_after_q_is_not_run(key, character):
    # A terminal delivers both keys before the app handles the first: the second is queued
    # behind the quit. Run, `/` mounted the filter box into a #main being torn down
    # (MountError) and `K` pushed the signal confirmation onto it (NoMatches in its on_mount).
    from textual import events

    app = make_app(FakeSource(), side_pane=True)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None and app.table.selected is not None)
        app.post_message(events.Key("q", "q"))
        app.post_message(events.Key(key, character))
        await wait_async(lambda: not app.is_running, what="the app to end after the quit")
    _assert_clean(app)
