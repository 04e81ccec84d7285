"""Time-to-OOM of a real torch loop (CPU) under the probe: a job that keeps one tensor of
known size per step, recorded to a trace and compared with ``gpumem-tui compare --limit``.

The model is a plain ``nn.Module`` with no model config, so compare has no prediction: it
must still report what was measured (per-step peaks, drift, time-to-limit) and exit 0.
"""

from __future__ import annotations

import json
import math
import time

import pytest

import gpumem_tui.probe as gprobe  # noqa: E402
from gpumem_tui import cli  # noqa: E402
from gpumem_tui.telemetry.model import Snapshot  # noqa: E402
from gpumem_tui.telemetry.probe_source import ProbeSource  # noqa: E402
from gpumem_tui.telemetry.replay import TraceRecorder  # noqa: E402

# torch_in_process: these tests import torch here; under xdist they share one worker (tests/conftest.py)
pytestmark = pytest.mark.torch_in_process

MiB = 1 << 20
KEPT_BYTES = 256 * 1024 * 4  # one float32 tensor of 256 Ki elements kept per step: 1 MiB
STEPS = 24


def leaky_job(directory) -> int:  # returns the tensors kept
    """A tiny training loop that keeps one tensor per step (a leak of KEPT_BYTES per step)."""
    import torch
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 8))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    probe = gprobe.attach(model, opt, batch=4, directory=directory, min_step_interval=0.0, interval=30.0)
    kept = []
    try:
        for _ in range(STEPS):
            loss = model(torch.randn(4, 32)).square().mean()
            kept.append(torch.zeros(256 * 1024))  # e.g. a metric tensor appended to a list
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    finally:
        probe.close()
    return len(kept)


@pytest.fixture(scope="module")
def leaky_trace(tmp_path_factory):
    directory = tmp_path_factory.mktemp("probes")
    leaky_job(directory)
    trace = directory.parent / "leaky.jsonl"
    source = ProbeSource(directory)
    got = source.poll()  # the whole stream: the job has ended
    source.close()
    with TraceRecorder(trace) as rec:
        rec.write(Snapshot(time=time.time(), probes=got.probes, probe_infos=got.probe_infos,
                           phase_marks=got.phase_marks, phase_peaks=got.phase_peaks))
    return trace


def test_compare_measures_the_drift_within_10_percent_and_counts_steps_to_the_limit(leaky_trace, capsys):
    limit = 64 * MiB
    assert cli.main(["compare", str(leaky_trace), "--json", "--limit", "64MiB"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "no model config" in out["no_prediction"]  # a plain nn.Module: nothing predicted
    assert [s["step"] for s in out["steps"]] == list(range(STEPS + 1))  # step 0: the probe's init
    drift = out["drift"]
    assert drift is not None, out["drift_reason"]
    assert abs(drift["bytes_per_step"] - KEPT_BYTES) <= 0.10 * KEPT_BYTES
    assert drift["over_steps"] >= 20
    assert out["limit_bytes"] == limit
    latest = out["latest_peak_bytes"]
    assert latest == max(s["peak_bytes"] for s in out["steps"][-3:])
    expected = (limit - latest) / drift["bytes_per_step"]
    assert abs(out["steps_to_limit"] - expected) <= 1
    assert out["seconds_per_step"] > 0
    assert math.isclose(out["seconds_to_limit"], out["steps_to_limit"] * out["seconds_per_step"], rel_tol=0.01,
                        abs_tol=0.1)


def test_compare_text_says_no_prediction_and_gives_the_time_to_oom(leaky_trace, capsys):
    assert cli.main(["compare", str(leaky_trace), "--limit", "64MiB"]) == 0
    text = capsys.readouterr().out
    assert "no prediction: pid" in text and "the probe published no model config" in text
    assert f"high-water marks of {STEPS + 1} steps" in text
    line = next(line for line in text.splitlines() if line.startswith("time-to-OOM: "))
    assert "MiB per step: out of memory in ~" in line and line.endswith("(limit 64.0 MiB)")


def test_compare_without_a_limit_says_how_to_give_one(leaky_trace, capsys):
    assert cli.main(["compare", str(leaky_trace), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["drift"] is not None and out["steps_to_limit"] is None and out["seconds_to_limit"] is None
    assert out["forecast_reason"] == "no limit known: pass --limit"


@pytest.mark.parametrize("bad", ["lots", "-5GiB", "0", "12 parsecs"])
def test_a_bad_limit_is_one_line_and_exit_2(leaky_trace, capsys, bad):
    assert cli.main(["compare", str(leaky_trace), "--limit", bad]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--limit" in err and "Traceback" not in err
