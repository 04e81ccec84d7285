"""Alerts: the [[alerts]] rules of the config file, the evaluator, and the hooks it runs."""

from __future__ import annotations

import json
import shlex
import shutil
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpumem_tui.alerts.actions import AlertActions, AlertLog, HookRunner, desktop_command, hook_environment
from gpumem_tui.alerts.rules import AlertRule, parse_rule
from gpumem_tui.alerts.evaluate import AlertEngine, JobInput
from gpumem_tui.ui.config import parse_config
from gpumem_tui.telemetry.model import DeviceSample, Snapshot
from gpumem_tui.support.units import GiB
from waiting import wait_until

CFG = Path("/home/me/.config/gpumem-tui/config.toml")


# ---- config ---------------------------------------------------------------------------------
def test_valid_rules_parse_with_defaults_and_every_key():
    text = (
        'interval = 2\n'
        '[[alerts]]\n'
        'rule = "memory_above"\n'
        'percent = 90\n'
        '\n'
        '[[alerts]]\n'
        'rule = "time_to_oom_below"\n'
        'name = "oom-soon"\n'
        'seconds = 600\n'
        'gpus = [0, 2]\n'
        'for = 30\n'
        'repeat = 60\n'
        'bell = false\n'
        'desktop = false\n'
        'command = ["~/bin/page", "--team", "ml; rm -rf /"]\n'
        'timeout = 2.5\n'
        '[[alerts]]\n'
        'rule = "drift"\n'
        'bytes_per_step = "2MiB"\n'
        '[[alerts]]\n'
        'rule = "will_not_fit"\n'
        '[[alerts]]\n'
        'rule = "gpu_lost"\n'
    )
    config = parse_config(text, CFG)
    assert config.notices == ()
    assert config.interval == 2.0
    first, oom, drift, fit, lost = config.alerts
    assert first == AlertRule("memory_above", "memory_above", 90.0)
    assert (first.repeat_seconds, first.hold_seconds, first.timeout_seconds, first.bell, first.desktop) == (300.0, 0.0, 10.0, True, True)
    assert oom == AlertRule("time_to_oom_below", "oom-soon", 600.0, frozenset({0, 2}), 30.0, 60.0, False, False,
                            ("~/bin/page", "--team", "ml; rm -rf /"), 2.5)
    assert drift.threshold == 2 * (1 << 20)
    assert (fit.kind, fit.threshold, lost.kind) == ("will_not_fit", None, "gpu_lost")


@pytest.mark.parametrize(("body", "line", "expected"), [
    ('rule = "memory_above"\npercent = 90\ncolour = "red"\n', 5, "alerts[1].colour is unknown"),
    ('rule = "memory_above"\npercent = 120\n', 4, "alerts[1].percent must be a percentage"),
    ('rule = "memory_above"\npercent = "90%"\n', 4, "alerts[1].percent must be a percentage"),
    ('rule = "time_to_oom_below"\nseconds = -5\n', 4, "alerts[1].seconds must be a number of seconds > 0"),
    ('rule = "memory_above"\npercent = 90\ncommand = "notify.sh --urgent"\n', 5,
     "alerts[1].command must be an argument list"),
    ('rule = "memory_above"\npercent = 90\ncommand = []\n', 5, "alerts[1].command must be a non-empty list"),
    ('rule = "gpu_lost"\nsignal = "SIGKILL"\n', 4, "alerts[1].signal refused: an alert never sends a signal"),
    ('rule = "gpu_lost"\nkill = true\n', 4, "alerts[1].kill refused"),
    ('rule = "gpu_lost"\npercent = 3\n', 4, "alerts[1].percent applies to rule = 'memory_above' only"),
    ('rule = "too_hot"\n', 3, "alerts[1].rule must be one of"),
    ('rule = "memory_above"\n', 3, "alerts[1].rule rule = 'memory_above' needs percent"),
    ('rule = "gpu_lost"\nfor = "1m"\n', 4, "alerts[1].for must be a number of seconds >= 0"),
    ('rule = "gpu_lost"\ngpus = [0, -1]\n', 4, "alerts[1].gpus must be a non-empty list"),
    ('rule = "drift"\nbytes_per_step = "3 parsecs"\n', 4, "alerts[1].bytes_per_step unknown size unit"),
    ('rule = "gpu_lost"\ntimeout = 0\n', 4, "alerts[1].timeout must be a number of seconds > 0"),
    ('rule = "gpu_lost"\nbell = "yes"\n', 4, "alerts[1].bell must be true or false"),
])
def test_a_bad_rule_is_one_line_naming_key_and_line_and_only_it_is_dropped(body, line, expected):
    good = '[[alerts]]\nrule = "gpu_lost"\nname = "kept"\n'
    text = "interval = 3\n" + "[[alerts]]\n" + body + good
    config = parse_config(text, CFG)
    assert len(config.notices) == 1
    notice = config.notices[0]
    assert "\n" not in notice
    assert notice.startswith(f"{CFG}:{line}: {expected}"), notice
    assert notice.endswith("; rule ignored")
    assert [r.name for r in config.alerts] == ["kept"]  # the other rule and setting stay
    assert config.interval == 3.0


def test_the_line_is_found_in_the_right_table_among_several():
    text = ('[[alerts]]\nrule = "memory_above"\npercent = 95\n\n'
            '[[alerts]]\nrule = "memory_above"\npercent = 0\n')
    (notice,) = parse_config(text, CFG).notices
    assert notice.startswith(f"{CFG}:7: alerts[2].percent")


def test_alerts_not_an_array_of_tables():
    (notice,) = parse_config('alerts = "memory_above"\n', CFG).notices
    assert notice.startswith(f"{CFG}:1: alerts must be an array of tables")
    (notice,) = parse_config('alerts = [1]\n', CFG).notices
    assert notice.startswith(f"{CFG}:1: alerts[1].alerts each alert must be a table")


# ---- evaluator ------------------------------------------------------------------------------
def device(index: int, used_gib: float | None, total_gib: float | None = 80, error: str | None = None) -> DeviceSample:
    return DeviceSample(index, "GPU", f"GPU-{index}", None if total_gib is None else int(total_gib * GiB),
                        None if used_gib is None else int(used_gib * GiB), None, None, None, None, error=error)


def snap(t: float, *devices: DeviceSample, nvml_error: str | None = None) -> Snapshot:
    return Snapshot(time=t, devices=tuple(devices), nvml_error=nvml_error)


def test_memory_above_says_what_it_measured_and_respects_the_gpu_filter():
    rules = [parse_rule({"rule": "memory_above", "percent": 90, "name": "full", "gpus": [0, 1]})]
    engine = AlertEngine(rules)
    fired = engine.evaluate(snap(0, device(0, 74.72), device(1, 72.0), device(2, 79.0)))
    (alert,) = fired  # GPU 1 is at exactly 90 % (not above); GPU 2 is not watched
    assert alert.subject == "GPU 0" and alert.gpu == 0
    assert alert.value == pytest.approx(93.4, abs=0.01) and alert.threshold == 90.0 and alert.unit == "%"
    assert alert.message == "GPU 0: 93.4 % of 80.0 GiB used (74.7 GiB, NVML) (rule full: above 90 %)"


def test_memory_above_skips_unknown_figures():
    engine = AlertEngine([parse_rule({"rule": "memory_above", "percent": 1})])
    assert engine.evaluate(snap(0, device(0, None), device(1, 5, total_gib=None), device(2, 5, total_gib=0))) == []


def test_for_duration_needs_the_condition_on_every_poll_for_that_long():
    engine = AlertEngine([parse_rule({"rule": "memory_above", "percent": 50, "for": 10})])
    high, low = device(0, 60), device(0, 10)
    assert engine.evaluate(snap(100, high)) == []
    assert engine.evaluate(snap(105, high)) == []
    assert engine.evaluate(snap(108, low)) == []  # broke: the clock starts again
    assert engine.evaluate(snap(109, high)) == []
    assert engine.evaluate(snap(118, high)) == []
    assert [a.time for a in engine.evaluate(snap(119, high))] == [119]


def test_repeat_limits_each_rule_and_subject_separately():
    rules = [parse_rule({"rule": "memory_above", "percent": 50, "repeat": 60, "name": "a"}),
             parse_rule({"rule": "memory_above", "percent": 40, "repeat": 60, "name": "b"})]
    engine = AlertEngine(rules)
    first = engine.evaluate(snap(0, device(0, 60)))
    assert [(a.rule.name, a.subject) for a in first] == [("a", "GPU 0"), ("b", "GPU 0")]
    # GPU 1 crosses later: its own subject, not limited by GPU 0's firing
    assert [(a.rule.name, a.subject) for a in engine.evaluate(snap(10, device(0, 60), device(1, 60)))] == \
        [("a", "GPU 1"), ("b", "GPU 1")]
    assert engine.evaluate(snap(30, device(0, 10), device(1, 60))) == []
    assert engine.evaluate(snap(40, device(0, 60), device(1, 60))) == []  # came back within repeat
    again = engine.evaluate(snap(60, device(0, 60), device(1, 60)))
    assert [(a.rule.name, a.subject) for a in again] == [("a", "GPU 0"), ("b", "GPU 0")]


def test_gpu_lost_when_a_seen_index_goes_missing_or_reports_an_error():
    engine = AlertEngine([parse_rule({"rule": "gpu_lost", "repeat": 0})])
    assert engine.evaluate(snap(0, device(0, 1), device(1, 1))) == []
    (missing,) = engine.evaluate(snap(1, device(0, 1)))
    assert missing.subject == "GPU 1" and missing.message.startswith("GPU 1: lost (no longer listed by NVML)")
    (errored,) = engine.evaluate(snap(2, device(0, None, error="GPU is lost"), device(1, 1)))
    assert errored.subject == "GPU 0" and "GPU 0: lost (GPU is lost)" in errored.message


def test_nvml_lost_only_after_it_had_worked():
    rule = parse_rule({"rule": "gpu_lost"})
    never = AlertEngine([rule])
    assert never.evaluate(snap(0, nvml_error="NVML Shared Library Not Found")) == []
    engine = AlertEngine([rule])
    assert engine.evaluate(snap(0, device(0, 1))) == []
    (alert,) = engine.evaluate(snap(1, nvml_error="Driver Not Loaded"))
    assert alert.subject == "NVML"  # one alert, not one per GPU too
    assert alert.message.startswith("NVML: failing after it had worked (Driver Not Loaded)")


def test_will_not_fit_counts_the_memory_the_job_holds_as_its_own():
    engine = AlertEngine([parse_rule({"rule": "will_not_fit", "repeat": 0})])
    gpu = device(0, 60)  # 60 GiB used on an 80 GiB GPU, 20 of them by the job
    fits = JobInput(pid=7, gpu=0, predicted_peak_bytes=35 * GiB, used_bytes=20 * GiB, label="llama-3.2-1b")
    assert engine.evaluate(snap(0, gpu), [fits]) == []  # 80 - 40 others = 40 GiB it can have
    (alert,) = engine.evaluate(snap(1, gpu), [replace(fits, predicted_peak_bytes=41 * GiB)])
    assert (alert.subject, alert.pid, alert.gpu, alert.unit) == ("PID 7", 7, 0, "bytes")
    assert (alert.value, alert.threshold) == (41 * GiB, 40 * GiB)
    assert alert.message.startswith("PID 7 (llama-3.2-1b) on GPU 0 will not fit: predicted peak 41.0 GiB > "
                                    "40.0 GiB it can have (80.0 GiB total, 40.0 GiB used by other processes, NVML)")
    unknown = [JobInput(pid=8, gpu=0), JobInput(pid=9, gpu=None, predicted_peak_bytes=10**15),
               JobInput(pid=10, gpu=5, predicted_peak_bytes=10**15)]
    assert engine.evaluate(snap(2, gpu), unknown) == []


def test_time_to_oom_and_drift_use_the_optional_inputs():
    engine = AlertEngine([parse_rule({"rule": "time_to_oom_below", "seconds": 600}),
                          parse_rule({"rule": "drift", "bytes_per_step": "1MiB"})])
    jobs = [JobInput(pid=1, gpu=0, seconds_to_oom=None, drift_bytes_per_step=None),  # unknown: nothing
            JobInput(pid=2, gpu=0, seconds_to_oom=900, drift_bytes_per_step=512 * 1024),  # under the thresholds
            JobInput(pid=3, gpu=1, seconds_to_oom=240, drift_bytes_per_step=3 * (1 << 20))]
    oom, drift = engine.evaluate(snap(0, device(0, 1), device(1, 1)), jobs)
    assert (oom.subject, oom.value, oom.threshold, oom.unit) == ("PID 3", 240, 600, "s")
    assert oom.message == "PID 3 on GPU 1: out of memory in about 240 s (rule time_to_oom_below: under 600 s to OOM)"
    assert (drift.subject, drift.value, drift.unit) == ("PID 3", 3 * (1 << 20), "bytes/step")
    assert "memory drifts up 3.0 MiB per step" in drift.message


def test_text_from_outside_is_made_printable_in_the_message():
    engine = AlertEngine([parse_rule({"rule": "drift"}), parse_rule({"rule": "gpu_lost"})])
    hostile = "[bold red]x[/]\x1b[31m\nnext"
    engine.evaluate(snap(0, device(0, 1)))
    drift, lost = engine.evaluate(snap(1, device(0, None, error=hostile)),
                                  [JobInput(pid=5, drift_bytes_per_step=1 << 20, label=hostile)])
    for alert in (drift, lost):
        assert "\x1b" not in alert.message and "\n" not in alert.message
        assert "[bold red]x[/]" in alert.message  # literal: the dashboard shows it with markup=False


def test_a_replay_that_goes_back_starts_the_rate_limits_again():
    engine = AlertEngine([parse_rule({"rule": "memory_above", "percent": 50, "repeat": 0})])
    assert len(engine.evaluate(snap(1000, device(0, 60)))) == 1
    assert engine.evaluate(snap(1000, device(0, 60))) == []  # a finished replay repeats its last reading
    assert len(engine.evaluate(snap(1001, device(0, 60)))) == 1  # repeat = 0: every new reading
    assert len(engine.evaluate(snap(10, device(0, 60)))) == 1


# ---- actions --------------------------------------------------------------------------------
ENV_DUMP = "import json, os, sys\njson.dump({k: v for k, v in os.environ.items() if k.startswith('GPUMEM_ALERT_')}, open(sys.argv[1], 'w'))\n"


def an_alert(**rule_keys):
    rule = parse_rule({"rule": "memory_above", "percent": 90, "name": "full", **rule_keys})
    (alert,) = AlertEngine([rule]).evaluate(snap(1_700_000_000.5, device(0, 74.72)))
    return alert


def test_the_hook_gets_the_alert_in_its_environment_as_an_argument_list(tmp_path):
    script = tmp_path / "dump.py"
    script.write_text(ENV_DUMP)
    out = tmp_path / "env; touch pwned.json"  # a shell would split this; an argument list does not
    alert = an_alert(command=[sys.executable, str(script), str(out)], desktop=False)
    log = AlertLog(tmp_path / "alerts.log")
    problems: list[str] = []
    actions = AlertActions(log, problems.append, env={"PATH": "/usr/bin"})
    actions.handle(alert)
    actions.runner.join(30)
    assert problems == []
    env = json.loads(out.read_text())
    assert env == {
        "GPUMEM_ALERT_RULE": "full", "GPUMEM_ALERT_KIND": "memory_above", "GPUMEM_ALERT_SUBJECT": "GPU 0",
        "GPUMEM_ALERT_GPU": "0", "GPUMEM_ALERT_PID": "", "GPUMEM_ALERT_VALUE": f"{alert.value:g}",
        "GPUMEM_ALERT_THRESHOLD": "90", "GPUMEM_ALERT_UNIT": "%", "GPUMEM_ALERT_MESSAGE": alert.message,
        "GPUMEM_ALERT_TIME": "1700000000.500",
    }
    assert not (tmp_path / "pwned.json").exists()
    lines = log.path.read_text().splitlines()
    assert "alert full GPU 0: GPU 0: 93.4 %" in lines[0]
    assert any("exit status 0" in line for line in lines)
    assert oct(log.path.stat().st_mode & 0o777) == "0o600"


def test_a_failing_hook_is_logged_with_its_stderr_and_reported(tmp_path):
    alert = an_alert(command=[sys.executable, "-c", "import sys; sys.stderr.write('no pager\\n'); sys.exit(3)"],
                     desktop=False)
    problems: list[str] = []
    actions = AlertActions(AlertLog(tmp_path / "a.log"), problems.append, env={})
    actions.handle(alert)
    actions.runner.join(30)
    assert len(problems) == 1
    assert "hook of rule full (GPU 0) failed:" in problems[0]
    assert "exited with status 3; stderr: no pager" in problems[0]
    assert problems[0] in (tmp_path / "a.log").read_text()


def test_a_hook_that_cannot_start_is_logged(tmp_path):
    problems: list[str] = []
    actions = AlertActions(AlertLog(tmp_path / "a.log"), problems.append, env={})
    actions.handle(an_alert(command=[str(tmp_path / "missing-program")], desktop=False))
    actions.runner.join(30)
    (line,) = problems
    assert "could not start" in line and "missing-program" in line and "FileNotFoundError" in line


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def test_a_hanging_hook_and_its_children_are_killed_after_the_timeout(tmp_path):
    import os
    import signal

    marker = tmp_path / "child.pid"
    # The 3 s timeout is what is tested (real time, the runner's process.wait). The hook must
    # have started its child by then: a shell does that in milliseconds (a Python hook took a
    # start-up of its own), so even a loaded machine leaves it a wide margin.
    sh = shutil.which("sh")
    script = f"sleep 600 & echo $! > {shlex.quote(str(marker))}; wait"
    problems: list[str] = []
    runner = HookRunner(AlertLog(tmp_path / "a.log"), problems.append)
    assert runner.start("hook x", [sh, "-c", script], {}, 3.0)
    runner.join(60)
    assert runner.running == 0
    assert problems == [f"hook x failed: {sh} killed after running past its 3 s timeout"]
    child = int(marker.read_text())  # written before the timeout: the hook got as far as its child
    try:
        # SIGKILL takes effect asynchronously: wait for it (a hang guard, no speed check)
        wait_until(lambda: _gone(child), what="the hook's child to be killed with it (it survived the timeout)")
    finally:
        if not _gone(child):
            os.kill(child, signal.SIGKILL)


def test_closing_kills_the_hooks_still_running_and_starts_no_more(tmp_path):
    problems: list[str] = []
    runner = HookRunner(AlertLog(tmp_path / "a.log"), problems.append)
    assert runner.start("slow", [sys.executable, "-c", "import time; time.sleep(600)"], {}, 600.0)
    wait_until(lambda: runner._processes, what="the hook to start")
    runner.close()
    runner.join(60)
    assert runner.running == 0
    assert len(problems) == 1 and problems[0].startswith("slow failed:") and problems[0].endswith("killed by signal 9")
    assert runner.start("later", [sys.executable, "-c", "pass"], {}, 5.0) is False


def test_at_most_max_running_hooks_at_once(tmp_path):
    problems: list[str] = []
    runner = HookRunner(AlertLog(tmp_path / "a.log"), problems.append, max_running=1)
    # a timeout no test run reaches: "slow" is still running at the second start, however long
    # that takes on a loaded machine; close() ends it
    assert runner.start("slow", [sys.executable, "-c", "import time; time.sleep(600)"], {}, 600.0)
    assert runner.start("second", [sys.executable, "-c", "pass"], {}, 5.0) is False
    assert problems == ["second not run: 1 alert programs are still running"]
    runner.close()
    runner.join(60)


def test_desktop_notifications_only_where_the_session_has_one(tmp_path):
    program = tmp_path / "notify-send"
    out = tmp_path / "args.json"
    program.write_text(f"#!{sys.executable}\nimport json, sys\njson.dump(sys.argv[1:], open({str(out)!r}, 'w'))\n")
    program.chmod(0o755)
    assert desktop_command({"PATH": str(tmp_path)}) is None  # over SSH: no display, no bus
    assert desktop_command({"PATH": "/nonexistent", "DISPLAY": ":0"}) is None
    env = {"PATH": str(tmp_path), "WAYLAND_DISPLAY": "wayland-0"}
    assert desktop_command(env) == [str(program)]
    actions = AlertActions(AlertLog(tmp_path / "a.log"), env=env)
    alert = an_alert()
    actions.handle(alert)
    actions.runner.join(30)
    assert json.loads(out.read_text()) == ["--app-name=gpumem-tui", "--", "gpumem-tui: full", alert.message]


def test_without_a_desktop_session_it_is_said_once_in_the_log(tmp_path):
    actions = AlertActions(AlertLog(tmp_path / "a.log"), env={"PATH": str(tmp_path)})
    actions.handle(an_alert())
    actions.handle(an_alert())
    assert (tmp_path / "a.log").read_text().count("desktop notifications: none in this session") == 1


def test_a_replay_runs_no_program(tmp_path):
    out = tmp_path / "ran"
    actions = AlertActions(AlertLog(tmp_path / "a.log"), env={}, run_programs=False)
    actions.handle(an_alert(command=[sys.executable, "-c", f"open({str(out)!r}, 'w')"]))
    actions.runner.join(30)
    assert not out.exists()
    assert "a replayed trace runs no hook" in (tmp_path / "a.log").read_text()


def test_hook_environment_keeps_the_base_and_writes_bytes_as_integers():
    engine = AlertEngine([parse_rule({"rule": "will_not_fit"})])
    (alert,) = engine.evaluate(snap(0, device(0, 60)), [JobInput(pid=7, gpu=0, predicted_peak_bytes=30 * GiB)])
    env = hook_environment(alert, {"HOME": "/home/me"})
    assert env["HOME"] == "/home/me"
    assert (env["GPUMEM_ALERT_VALUE"], env["GPUMEM_ALERT_THRESHOLD"]) == (str(30 * GiB), str(20 * GiB))
    assert (env["GPUMEM_ALERT_PID"], env["GPUMEM_ALERT_UNIT"]) == ("7", "bytes")


# ---- property: `for` and `repeat` over any sequence of polls --------------------------------
@settings(max_examples=200, deadline=None)
@given(hold=st.integers(0, 20), repeat=st.integers(0, 50),
       polls=st.lists(st.tuples(st.integers(1, 15), st.booleans()), min_size=1, max_size=60))
def test_firings_respect_for_and_repeat(hold, repeat, polls):
    engine = AlertEngine([parse_rule({"rule": "memory_above", "percent": 50, "for": hold, "repeat": repeat})])
    t, true_since, fired_at = 0, None, []
    for step, high in polls:
        t += step
        true_since = (t if true_since is None else true_since) if high else None
        fired = engine.evaluate(snap(t, device(0, 60 if high else 10)))
        if fired:
            fired_at.append(t)
            assert high and t - true_since >= hold  # held on every poll for `for` seconds
        else:
            # it did not fire: the condition was off, not held long enough, or within `repeat`
            assert not high or t - true_since < hold or (fired_at and t - fired_at[-1] < repeat)
    assert all(b - a >= repeat for a, b in zip(fired_at, fired_at[1:]))


def test_gpu_lost_from_the_live_source_with_nvml_failing_mid_run(fake_nvml, tmp_path):
    """End to end with the fake pynvml: a GPU that NVML reports lost mid-run fires the rule."""
    from gpumem_tui.telemetry.host import HostEnricher
    from gpumem_tui.telemetry.live import LiveSource

    source = LiveSource(tmp_path / "probes", host=HostEnricher(in_container=False))
    try:
        engine = AlertEngine([parse_rule({"rule": "gpu_lost"}),
                              parse_rule({"rule": "memory_above", "percent": 99.9})])
        assert engine.evaluate(source.poll()) == []
        fake_nvml.lose_gpu(1)
        (alert,) = engine.evaluate(source.poll())
        assert (alert.subject, alert.rule.kind) == ("GPU 1", "gpu_lost")
        assert alert.message.startswith("GPU 1: lost (GPU is lost)")
    finally:
        source.close()
