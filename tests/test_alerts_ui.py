"""Alerts in the dashboard: the bell and the notice, and a hanging hook that never blocks polling."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from test_ui import SIZE, make_app, wait_for  # noqa: E402
from ui_fakes import FakeSource  # noqa: E402
from waiting import wait_until  # noqa: E402

from gpumem_tui.alerts.rules import parse_rule  # noqa: E402
from gpumem_tui.ui.config import parse_config  # noqa: E402


@pytest.fixture(autouse=True)
def _private_dirs(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUMEM_TUI_CONFIG_DIR", str(tmp_path / "cfg"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the alert log goes there
    for name in ("DISPLAY", "WAYLAND_DISPLAY", "DBUS_SESSION_BUS_ADDRESS"):
        monkeypatch.delenv(name, raising=False)  # no desktop notifications from the tests


def notices(app) -> list[tuple[str, str, bool]]:
    return [(n.title, n.message, n.markup) for n in app._notifications]


async def test_a_rule_that_fires_rings_the_bell_and_shows_what_it_measured(tmp_path):
    rules = parse_config('[[alerts]]\nrule = "memory_above"\npercent = 20\ngpus = [0]\nname = "busy"\n'
                         '[[alerts]]\nrule = "gpu_lost"\nbell = false\n').alerts
    app = make_app(FakeSource(), alerts=rules)
    bells = []
    app.bell = lambda: bells.append(1)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: any(title == "Alert: busy" for title, _, _ in notices(app)))
        shown = dict((title, message) for title, message, _ in notices(app))
        # the fake's GPU 0: 10 GiB used of 40 GiB on the first poll
        assert shown["Alert: busy"] == "GPU 0: 25.0 % of 40.0 GiB used (10.0 GiB, NVML) (rule busy: above 20 %)"
        assert shown["Alert: gpu_lost"].startswith("GPU 2: lost (GPU is lost)")
        assert all(markup is False for _, _, markup in notices(app))
        assert bells == [1]  # one bell for the poll's alerts; gpu_lost asked for none
        await wait_for(pilot, lambda: app.snapshot is not None and app.snapshot.time >= 1_700_000_003)
        assert bells == [1]  # the next polls are within `repeat`: no more bells
    log = (tmp_path / "cache" / "gpumem-tui" / "alerts.log").read_text()
    assert "alert busy GPU 0: GPU 0: 25.0 %" in log
    assert "desktop notifications: none in this session" in log


def _hanging_hook_rule(timeout: float):
    return parse_rule({"rule": "memory_above", "percent": 20, "gpus": [0], "repeat": 3600, "desktop": False,
                       "command": [sys.executable, "-c", "import time; time.sleep(600)"], "timeout": timeout})


async def test_the_dashboard_keeps_polling_while_a_hook_hangs(tmp_path):
    # a timeout no test run reaches: the hook is still hanging however slowly the polls come on
    # a loaded machine (closing the dashboard kills it)
    source = FakeSource()
    app = make_app(source, alerts=(_hanging_hook_rule(600),))
    async with app.run_test(size=SIZE) as pilot:
        runner = app.alerts.actions.runner
        await wait_for(pilot, lambda: runner.running == 1)
        before = source.polls
        await wait_for(pilot, lambda: source.polls >= before + 3)
        assert runner.running == 1  # polling went on while the hook hung
    wait_until(lambda: runner.running == 0, what="closing the dashboard to kill the hook")


async def test_a_hanging_hook_is_killed_after_its_timeout_and_polling_goes_on(tmp_path):
    source = FakeSource()
    app = make_app(source, alerts=(_hanging_hook_rule(4),))
    async with app.run_test(size=SIZE) as pilot:
        runner = app.alerts.actions.runner
        await wait_for(pilot, lambda: runner.running == 1)
        await wait_for(pilot, lambda: any(title == "Alert hook" for title, _, _ in notices(app)))
        (message,) = [m for title, m, _ in notices(app) if title == "Alert hook"]
        assert message == f"hook of rule memory_above (GPU 0) failed: {sys.executable} killed after running " \
                          "past its 4 s timeout"
        assert runner.running == 0
        after = source.polls
        await wait_for(pilot, lambda: source.polls >= after + 2)
    assert "killed after running past its 4 s timeout" in (tmp_path / "cache" / "gpumem-tui" / "alerts.log").read_text()


async def test_without_rules_there_is_no_alert_engine():
    app = make_app(FakeSource())
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        assert app.alerts is None


def test_job_inputs_take_the_jobs_own_estimate_its_gpu_memory_and_drift(tmp_path):
    import json
    from collections import deque
    from types import SimpleNamespace

    from gpumem_tui.alerts.actions import AlertActions, AlertLog
    from gpumem_tui.estimator.architecture import CATALOGUE_DIR
    from gpumem_tui.analysis.process_estimate import ProcessEstimates, from_probe_info
    from gpumem_tui.telemetry.model import (DeviceSample, Phase, PhasePeak, ProbeInfo, ProcessSample, ProcessType,
                                            Snapshot)
    from gpumem_tui.ui.alerting import DashboardAlerts
    from gpumem_tui.support.units import GiB, MiB

    gpt2 = json.loads((CATALOGUE_DIR / "gpt2.json").read_text())
    estimates = ProcessEstimates()
    job = estimates.update_probe(ProbeInfo(1001, gpt2, (("batch", 2), ("seq", 128))), "cuda:0")
    what_if = from_probe_info(ProbeInfo(1001, gpt2, (("batch", 64), ("seq", 1024))), "cuda:0")
    estimates.set_user(1001, what_if.architecture, what_if.spec, what_if.estimate, "gpt2")  # not the job
    peaks = deque(PhasePeak(1001, step, Phase.BACKWARD, step, step + 0.5, 2 * GiB + step * 10 * MiB)
                  for step in range(1, 16))
    rang, shown = [], []
    app = SimpleNamespace(process_estimates=estimates, phase_peaks={1001: peaks}, bell=lambda: rang.append(1),
                          notify=lambda message, **kw: shown.append((message, kw["markup"])))
    rules = [parse_rule({"rule": "drift", "bytes_per_step": "5MiB"})]
    alerts = DashboardAlerts(app, rules, AlertActions(AlertLog(tmp_path / "a.log"), env={}))
    gpu = DeviceSample(0, "GPU", "GPU-0", 80 * GiB, 70 * GiB, None, None, None, None, memory_free_bytes=10 * GiB)
    snap = Snapshot(time=1.0, devices=(gpu,), processes=(
        ProcessSample(1001, 0, ProcessType.COMPUTE, 3 * GiB), ProcessSample(1001, 0, ProcessType.GRAPHICS, 1 * GiB),
        ProcessSample(1002, 0, ProcessType.COMPUTE, 5 * GiB)), phase_peaks=tuple(peaks))
    (entry,) = alerts.job_inputs(snap)
    assert (entry.pid, entry.gpu, entry.used_bytes, entry.label) == (1001, 0, 4 * GiB, "gpt2")
    assert entry.predicted_peak_bytes == job.estimate.peak_bytes != what_if.estimate.peak_bytes
    assert entry.drift_bytes_per_step == pytest.approx(10 * MiB)
    # limit: 10 GiB free + its own 4 GiB (both rows); one second a step; latest peak step 15's
    assert entry.seconds_to_oom == (14 * GiB - (2 * GiB + 150 * MiB)) // (10 * MiB) * 1.0
    alerts.on_snapshot(snap)  # fires the drift rule: bell and notice on the app
    assert [a.subject for a in alerts.fired] == ["PID 1001"]
    assert rang == [1]
    assert shown == [("PID 1001 (gpt2) on GPU 0: memory drifts up 10.0 MiB per step (leak?) "
                      "(rule drift: drift of at least 5.0 MiB per step)", False)]
    soon = DashboardAlerts(app, [parse_rule({"rule": "time_to_oom_below", "seconds": 1800})],
                           AlertActions(AlertLog(tmp_path / "b.log"), env={}))
    soon.on_snapshot(snap)  # ~1213 s to OOM: under 1800 s
    assert [(a.subject, a.value) for a in soon.fired] == [("PID 1001", entry.seconds_to_oom)]


def test_run_dashboard_gives_the_config_files_rules_to_the_app(monkeypatch):
    from types import SimpleNamespace

    from gpumem_tui.ui import app as app_module
    from gpumem_tui.ui import launch

    seen = {}

    class Recorder:
        def __init__(self, source, **kwargs):
            seen.update(kwargs)
            self.crash_line = None
            self.poller = SimpleNamespace(close_source=lambda: None)

        def run(self):
            pass

    monkeypatch.setattr(app_module, "GpuMemApp", Recorder)
    config = parse_config('[[alerts]]\nrule = "gpu_lost"\nname = "lost"\n')
    launch.run_dashboard(FakeSource(), config=config)
    assert [rule.name for rule in seen["alerts"]] == ["lost"]


def _plain_alerts(tmp_path, rules):
    from types import SimpleNamespace

    from gpumem_tui.alerts.actions import AlertActions, AlertLog
    from gpumem_tui.analysis.process_estimate import ProcessEstimates
    from gpumem_tui.ui.alerting import DashboardAlerts

    rang, shown = [], []
    app = SimpleNamespace(process_estimates=ProcessEstimates(), phase_peaks={}, bell=lambda: rang.append(1),
                          notify=lambda message, **kw: shown.append((kw["title"], message)))
    return DashboardAlerts(app, rules, AlertActions(AlertLog(tmp_path / "a.log"), env={})), rang, shown


def test_many_alerts_in_one_poll_show_a_few_notices_and_a_summary(tmp_path):
    from gpumem_tui.telemetry.model import DeviceSample, Snapshot
    from gpumem_tui.ui.alerting import MAX_NOTICES_PER_POLL

    alerts, rang, shown = _plain_alerts(tmp_path, [parse_rule({"rule": "memory_above", "percent": 10})])
    gpus = tuple(DeviceSample(i, "GPU", None, 100, 50, None, None, None, None) for i in range(16))
    alerts.on_snapshot(Snapshot(time=1.0, devices=gpus))
    assert len(alerts.fired) == 16 and rang == [1]
    assert len(shown) == MAX_NOTICES_PER_POLL + 1
    assert shown[-1] == ("Alerts", f"{16 - MAX_NOTICES_PER_POLL} more alerts: see {tmp_path / 'a.log'}")
    assert (tmp_path / "a.log").read_text().count("alert memory_above GPU ") == 16  # every one is logged


def test_an_error_in_evaluation_is_shown_once_and_never_raised(tmp_path, monkeypatch):
    from gpumem_tui.telemetry.model import Snapshot

    alerts, _, shown = _plain_alerts(tmp_path, [parse_rule({"rule": "gpu_lost"})])

    def broken(*_args, **_kwargs):
        raise ValueError("bad figure")

    monkeypatch.setattr(alerts.engine, "evaluate", broken)
    alerts.on_snapshot(Snapshot(time=1.0))
    alerts.on_snapshot(Snapshot(time=2.0))
    assert shown == [("Alerts", f"alerts: evaluation failed: ValueError: bad figure (see {tmp_path / 'a.log'})")]
    assert (tmp_path / "a.log").read_text().count("evaluation failed") == 2
