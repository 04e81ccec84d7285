"""Time-to-OOM (gpumem_tui.analysis.forecast): the fit, its reasons, the limit, the text."""

from __future__ import annotations

import math
from dataclasses import replace

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gpumem_tui.analysis.forecast import NO_LIMIT, forecast, format_duration, live_limit, snapshot_limit
from gpumem_tui.telemetry.step_peaks import MIN_DRIFT_STEPS, WARMUP_STEPS, StepPeak
from gpumem_tui.telemetry.model import DeviceSample, ProcessSample, ProcessType, Snapshot

MiB = 1 << 20


def _steps(values, seconds=2.0, start=1000.0):
    return [StepPeak(step, value, (("backward", value),), end=start + step * seconds)
            for step, value in enumerate(values, start=1)]


def test_an_exact_line_gives_its_exact_rate_steps_and_seconds():
    steps = _steps([1000 * MiB + 12 * MiB * s for s in range(1, 41)], seconds=4.5)
    fc = forecast(steps, limit_bytes=2000 * MiB)
    assert fc.drift is not None and math.isclose(fc.drift.bytes_per_step, 12 * MiB)
    assert fc.drift.steps == 40 - WARMUP_STEPS
    assert math.isclose(fc.seconds_per_step, 4.5)
    assert fc.latest_peak_bytes == 1000 * MiB + 12 * MiB * 40
    assert fc.steps_to_limit == (2000 - 1000 - 480) // 12  # 43 steps of 12 MiB still fit
    assert math.isclose(fc.seconds_to_limit, 43 * 4.5)
    assert fc.reason is None
    assert fc.text() == "+12 MiB per step: out of memory in ~43 steps (~3 min)"
    assert fc.short() == "OOM ~3 min"
    out = fc.to_json()
    assert out["drift"]["bytes_per_step"] == 12 * MiB and out["drift"]["over_steps"] == 38
    assert out["steps_to_limit"] == 43 and out["seconds_to_limit"] == 193.5


def test_no_drift_is_null_with_its_reason():
    fc = forecast(_steps([1000 * MiB] * 30), limit_bytes=2000 * MiB)
    assert fc.drift is None and fc.steps_to_limit is None and fc.seconds_to_limit is None
    assert fc.reason == "no drift" and fc.text() == "no time-to-OOM: no drift"
    assert fc.short() is None
    falling = forecast(_steps([1000 * MiB - MiB * s for s in range(30)]), limit_bytes=2000 * MiB)
    assert falling.reason == "no drift"


def test_noise_around_a_rise_is_a_poor_fit_with_its_r2():
    values = [1000 * MiB + 4 * MiB * s + (s * 7919 % 13) * 8 * MiB for s in range(1, 41)]  # R² 0.65
    fc = forecast(_steps(values), limit_bytes=4000 * MiB)
    assert fc.drift is None and fc.steps_to_limit is None
    assert fc.reason.startswith("fit too poor (R² 0.") and fc.reason == fc.drift_reason


def test_too_few_steps_and_no_limit_say_so():
    short = forecast(_steps([1000 * MiB + 50 * MiB * s for s in range(1, 6)]), limit_bytes=4000 * MiB)
    assert short.reason == f"too few steps (3 of {MIN_DRIFT_STEPS} needed after {WARMUP_STEPS} warm-up steps)"
    rising = _steps([1000 * MiB + 12 * MiB * s for s in range(1, 41)])
    fc = forecast(rising, limit_bytes=None)
    assert fc.drift is not None and fc.steps_to_limit is None and fc.reason == NO_LIMIT
    assert fc.text() == f"+12 MiB per step: no time-to-OOM ({NO_LIMIT})"
    over = forecast(rising, limit_bytes=1000 * MiB)  # already past the limit: nothing left
    assert over.steps_to_limit == 0 and over.seconds_to_limit == 0


def test_steps_without_times_give_steps_only():
    steps = [StepPeak(s, 1000 * MiB + 12 * MiB * s, ()) for s in range(1, 41)]
    fc = forecast(steps, limit_bytes=2000 * MiB)
    assert fc.steps_to_limit == 43 and fc.seconds_to_limit is None and fc.seconds_per_step is None
    assert fc.short() == "OOM ~43 steps"


@settings(max_examples=60, deadline=None)
@given(base=st.integers(0, 1 << 36), rate=st.integers(1, 1 << 30), n=st.integers(12, 120),
       seconds=st.floats(0.01, 600), room=st.integers(0, 1 << 40))
def test_a_line_is_fitted_exactly_and_meets_the_limit_where_it_says(base, rate, n, seconds, room):
    # the rise must clear the drift rule's floor (1 MiB and 0.5 % of the highest value)
    assume(rate * (n - WARMUP_STEPS - 1) >= max(MiB, 0.005 * (base + rate * n)))
    steps = _steps([base + rate * s for s in range(1, n + 1)], seconds=seconds)
    latest = base + rate * n
    fc = forecast(steps, limit_bytes=latest + room)
    assert fc.drift is not None and math.isclose(fc.drift.bytes_per_step, rate, rel_tol=1e-6)
    assert abs(fc.steps_to_limit - room // rate) <= 1  # floor of room / rate, float rounding aside
    assert math.isclose(fc.seconds_to_limit, fc.steps_to_limit * seconds, rel_tol=1e-6, abs_tol=1e-6)


def test_live_limit_is_free_plus_own_used_minus_context():
    assert live_limit(30 * 1024 * MiB, 20 * 1024 * MiB, 500 * MiB) == (50 * 1024 - 500) * MiB
    assert live_limit(None, 20 * 1024 * MiB, None) is None
    assert live_limit(0, 0, 10) is None  # nothing left: no limit, not a negative one


def test_snapshot_limit_reads_the_process_row_and_its_gpu():
    gpu = DeviceSample(0, "GPU", "GPU-0", 80 * 1024 * MiB, 50 * 1024 * MiB, None, None, None, None)
    row = ProcessSample(pid=7, device_index=0, type=ProcessType.COMPUTE, used_memory_bytes=20 * 1024 * MiB)
    snap = Snapshot(time=1.0, devices=(gpu,), processes=(row,))
    assert snapshot_limit(snap, 7) == 50 * 1024 * MiB  # total - used + own
    with_free = Snapshot(time=1.0, devices=(replace(gpu, memory_free_bytes=10 * 1024 * MiB),), processes=(row,))
    assert snapshot_limit(with_free, 7, 300 * MiB) == (30 * 1024 - 300) * MiB  # NVML's free wins
    assert snapshot_limit(snap, 8) is None  # not on a GPU
    two = Snapshot(time=1.0, devices=(gpu, replace(gpu, index=1)), processes=(row, replace(row, device_index=1)))
    assert snapshot_limit(two, 7) is None  # several GPUs: no single limit


def test_durations_read_in_the_largest_sensible_unit():
    assert [format_duration(x) for x in (45, 1500, 5.2 * 3600, 3 * 86400)] == ["~45 s", "~25 min", "~5.2 h", "~3.0 d"]


def test_a_comparison_with_a_prediction_carries_the_time_to_oom_against_the_limit():
    import json

    from gpumem_tui.estimator.architecture import CATALOGUE_DIR
    from gpumem_tui.analysis.process_estimate import compare_snapshots
    from gpumem_tui.telemetry.model import Phase, PhasePeak, ProbeInfo, ProbeSample

    config = json.loads((CATALOGUE_DIR / "gpt2.json").read_text())
    info = ProbeInfo(9, config, (("batch", 1), ("seq", 32), ("device", "cpu")))
    snaps = [Snapshot(time=100.0 + s, probe_infos=(info,),
                      probes=(ProbeSample(100.0 + s, 9, "cpu", 600 * MiB + 4 * MiB * s),),
                      phase_peaks=(PhasePeak(9, s, Phase.BACKWARD, 99.5 + s, 100.0 + s, 700 * MiB + 4 * MiB * s,
                                             device="cpu"),))
             for s in range(1, 31)]
    out = compare_snapshots(snaps, limit_bytes=2048 * MiB).to_json()
    assert "no_prediction" not in out and out["peak_predicted_bytes"] > 0
    assert out["drift"]["bytes_per_step"] == 4 * MiB and out["drift"]["over_steps"] == 28
    assert out["steps_to_limit"] == (2048 - 700 - 120) // 4 and out["seconds_to_limit"] == out["steps_to_limit"] * 1.0


@settings(max_examples=100, deadline=None)
@given(values=st.lists(st.tuples(st.integers(0, 1 << 50), st.one_of(st.none(), st.floats(allow_nan=True))),
                       max_size=40),
       limit=st.one_of(st.none(), st.integers(1, 1 << 50)))
def test_any_steps_give_a_forecast_or_a_reason_never_an_error(values, limit):
    steps = [StepPeak(i + 1, peak, (), end=end) for i, (peak, end) in enumerate(values)]
    fc = forecast(steps, limit)
    assert (fc.steps_to_limit is None) == (fc.drift is None or limit is None)
    assert fc.steps_to_limit is None or fc.steps_to_limit >= 0
    assert fc.seconds_per_step is None or (math.isfinite(fc.seconds_per_step) and fc.seconds_per_step > 0)
    assert fc.seconds_to_limit is None or math.isfinite(fc.seconds_to_limit)
    assert (fc.reason is None) == (fc.seconds_to_limit is not None)
    assert fc.text()
