"""Per-phase high-water marks: probe records, reader, trace, compare's steps, drift, envelope."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from gpumem_tui.analysis.process_estimate import compare_trace
from gpumem_tui.telemetry.step_peaks import detect_drift, step_drift, step_peaks
from gpumem_tui.telemetry.model import Phase, PhasePeak, ProcessSample, ProcessType, Snapshot
from gpumem_tui.telemetry.probe_source import ProbeSource
from gpumem_tui.telemetry.replay import ReplaySource, TraceRecorder
from gpumem_tui.telemetry.serialize import snapshot_from_dict, snapshot_to_dict
from gpumem_tui.ui.chart_scale import envelope
from demo_inprocess import run_demo_job
from waiting import settle

MiB = 1 << 20


def _peak(step, phase, start, end, value, pid=7, steps=1, end_bytes=None):
    return PhasePeak(pid=pid, step=step, phase=Phase(phase), start=start, end=end, peak_bytes=value,
                     device="cpu", steps=steps, end_bytes=end_bytes)


# -- grouping and drift --------------------------------------------------------------------


def test_step_peaks_group_by_step_and_keep_the_highest_phase():
    peaks = [_peak(1, "forward", 0, 1, 10), _peak(1, "backward", 1, 2, 30), _peak(1, "optimizer_step", 2, 3, 20),
             _peak(2, "forward", 3, 4, 11), _peak(2, "backward", 4, 5, 25), _peak(2, "backward", 4, 5, 27),
             _peak(3, "forward", 5, 6, 99, pid=8)]
    steps = step_peaks(peaks, pid=7)
    assert [s.step for s in steps] == [1, 2]
    assert steps[0].to_json() == {"step": 1, "peak_bytes": 30,
                                  "phase_peaks": {"forward": 10, "backward": 30, "optimizer_step": 20}}
    assert steps[1].peak_bytes == 27  # a re-sent backward record keeps the higher value


def test_drift_flags_a_steady_rise_with_its_rate():
    base = 2000 * MiB
    series = [(s, base + 12 * MiB * s + (s % 3) * MiB // 4) for s in range(1, 43)]
    drift = detect_drift(series)
    assert drift is not None
    assert drift.steps == 40 and drift.first_step == 3 and drift.last_step == 42
    assert drift.text() == "+12 MiB per step over 40 steps"


@pytest.mark.parametrize(
    "series",
    [
        [(s, 1000 * MiB + (s * 7919 % 13) * MiB) for s in range(1, 40)],  # noise, no trend
        [(s, 1000 * MiB if s < 20 else 1200 * MiB) for s in range(1, 40)],  # one jump (a new buffer)
        [(s, 1000 * MiB + s * 1024) for s in range(1, 40)],  # a rise too small to matter
        [(s, 1000 * MiB + s * 50 * MiB) for s in range(1, 9)],  # too few steps for a verdict
        [(s, 1000 * MiB) for s in range(1, 40)],  # flat
    ],
    ids=["noise", "jump", "tiny", "short", "flat"],
)
def test_no_drift_without_a_steady_rise(series):
    assert detect_drift(series) is None


def test_a_leak_the_peak_hides_is_flagged_by_the_memory_left_after_each_step():
    """Issue 11: "(or of the memory left after each step)". 256 KiB kept per step is lost in
    the noise of a 4 GiB peak, but is a clear line in what each step leaves behind."""
    peaks = []
    for s in range(1, 43):
        noisy_peak = 4096 * MiB + (s * 7919 % 13) * MiB  # transient activations: noise, no trend
        left = 1500 * MiB + s * 256 * 1024
        peaks += [_peak(s, "forward", s, s + 0.3, noisy_peak // 2),
                  _peak(s, "backward", s + 0.3, s + 0.6, noisy_peak),
                  _peak(s, "optimizer_step", s + 0.6, s + 0.9, left + 8 * MiB, end_bytes=left)]
    steps = step_peaks(peaks)
    assert steps[0].left_bytes == 1500 * MiB + 256 * 1024
    assert steps[0].to_json()["left_bytes"] == steps[0].left_bytes
    assert detect_drift([(s.step, s.peak_bytes) for s in steps]) is None
    drift = step_drift(steps)
    assert drift is not None and drift.what == "memory left after each step"
    assert drift.text() == "+0.2 MiB per step over 40 steps"
    flat = [p if p.phase is not Phase.OPTIMIZER_STEP else _peak(p.step, "optimizer_step", p.start, p.end,
                                                                 p.peak_bytes, end_bytes=1500 * MiB)
            for p in peaks]
    assert step_drift(step_peaks(flat)) is None


# -- envelope ------------------------------------------------------------------------------


def test_envelope_is_a_staircase_coloured_by_phase():
    peaks = [_peak(1, "forward", 0, 1, 10), _peak(1, "backward", 1, 2, 30), _peak(1, "optimizer_step", 2, 3, 20)]
    runs = envelope(peaks, -10, 10, buckets=100)
    assert [phase for phase, _ in runs] == [Phase.FORWARD, Phase.BACKWARD, Phase.OPTIMIZER_STEP]
    assert runs[0][1] == [(0, 10), (1, 10)]
    assert runs[1][1] == [(1, 10), (1, 30), (2, 30)]  # the vertical step, then the flat top
    assert runs[2][1] == [(2, 30), (2, 20), (3, 20)]


def test_envelope_merged_into_buckets_keeps_every_maximum():
    peaks = [_peak(s, "forward", s, s + 0.4, 10 + s) for s in range(100)]
    peaks += [_peak(s, "backward", s + 0.4, s + 1, 1000 + s) for s in range(100)]
    runs = envelope(peaks, 0, 100, buckets=10)
    values = [v for _, points in runs for _, v in points]
    assert max(values) == 1099
    assert len(values) <= 3 * 10
    assert {phase for phase, _ in runs} == {Phase.BACKWARD}


# -- trace format ------------------------------------------------------------------------


def test_phase_peaks_survive_a_trace_round_trip_and_old_traces_read():
    snap = Snapshot(time=5.0, phase_peaks=(_peak(3, "backward", 1.0, 2.0, 123, steps=2),
                                           _peak(3, "optimizer_step", 2.0, 2.5, 120, end_bytes=100)))
    back = snapshot_from_dict(json.loads(json.dumps(snapshot_to_dict(snap))))
    assert back.phase_peaks == snap.phase_peaks
    old = snapshot_to_dict(Snapshot(time=5.0))
    assert "phase_peaks" not in old  # traces without peaks stay byte-identical to before
    assert snapshot_from_dict(old).phase_peaks == ()
    bad = dict(snapshot_to_dict(snap))
    bad["phase_peaks"] = [dict(bad["phase_peaks"][0], start=3.0)]  # ends before it starts
    read = snapshot_from_dict(bad)
    assert read.phase_peaks == () and any("phase_peaks" in n for n in read.notices)


def test_probe_source_reads_peak_records_and_counts_bad_ones(tmp_path):
    lines = [
        {"kind": "info", "format": "gpumem-tui-probe", "version": 1, "pid": 4242, "time": 1.0, "setup": {}},
        {"kind": "peak", "time": 3.0, "start": 2.0, "step": 1, "phase": "backward", "device": "cuda:0",
         "peak_bytes": 5 * MiB, "steps": 1},
        {"kind": "peak", "time": 3.0, "start": 2.0, "step": 1, "phase": "nosuch", "device": "cuda:0",
         "peak_bytes": 5},
        {"kind": "peak", "time": 3.0, "start": 4.0, "step": 1, "phase": "forward", "device": "cuda:0",
         "peak_bytes": 5},
    ]
    (tmp_path / "4242.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    reading = ProbeSource(tmp_path, alive=lambda pid, ct: True).poll()
    assert reading.phase_peaks == (
        PhasePeak(pid=4242, step=1, phase=Phase.BACKWARD, start=2.0, end=3.0, peak_bytes=5 * MiB, device="cuda"),
    )
    assert any("2 unreadable lines" in n for n in reading.notices)


# -- the probe -----------------------------------------------------------------------------


@pytest.mark.torch_in_process
def test_probe_writes_each_phase_high_water_mark(tmp_path):
    import torch
    import gpumem_tui.probe

    model = torch.nn.Sequential(torch.nn.Linear(32, 512), torch.nn.ReLU(), torch.nn.Linear(512, 32))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    probe = gpumem_tui.probe.attach(model, opt, directory=tmp_path, interval=60, min_step_interval=0)
    try:
        for _ in range(3):
            x = torch.randn(256, 32)
            loss = model(x).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
    finally:
        probe.close()
    reading = ProbeSource(tmp_path, alive=lambda pid, ct: False).poll()
    steps = step_peaks(reading.phase_peaks)
    assert [s.step for s in steps] == [0, 1, 2, 3]
    for s in steps[1:]:
        assert set(dict(s.phase_peaks)) == {"forward", "backward", "optimizer_step", "idle"}
        # what the step left: parameters, their gradients (kept until zero_grad) and the
        # momentum buffers, below the step's own peak
        params = sum(p.numel() * 4 for p in model.parameters())
        assert s.left_bytes is not None and 2 * params <= s.left_bytes <= s.peak_bytes
    # forward's high-water mark holds the 256 x 512 hidden activations (fp32) twice (Linear
    # output and ReLU output) on top of what was alive before: more than any phase-boundary sample
    hidden = 256 * 512 * 4
    (s3,) = [s for s in steps if s.step == 3]
    before = min(p.allocated_bytes for p in reading.probes)
    assert dict(s3.phase_peaks)["forward"] >= before + 2 * hidden
    # every sample lies under the high-water mark of the phase it was taken in
    for peak in reading.phase_peaks:
        inside = [p.allocated_bytes for p in reading.probes if peak.start < p.time < peak.end]
        assert all(v <= peak.peak_bytes for v in inside)


# -- end to end: a slow sampler, replayed ------------------------------------------------


def _trace_of_demo_job(tmp_path: Path) -> tuple[Path, int]:
    """Run the CPU demo job with a sampler slower than its steps; write its streams as a
    trace of one snapshot per half second (like ``record``), with a host row for the job."""
    probe_dir = tmp_path / "probes"
    # in this process (tests/demo_inprocess.py): the job's code and streams without a child's imports
    code = run_demo_job(["--steps", "4", "--probe-dir", str(probe_dir), "--model", "builtin", "--quiet",
                         "--threads", "1", "--probe-interval", "30", "--pause", "0.25", "--layers", "2",
                         "--hidden", "64", "--heads", "2", "--vocab", "2048", "--batch", "2", "--seq", "64"])
    assert code == 0
    reading = ProbeSource(probe_dir, alive=lambda pid, ct: False).poll()
    (info,) = reading.probe_infos
    assert len(reading.phase_peaks) >= 4 * 3
    times = [p.time for p in reading.probes] + [p.end for p in reading.phase_peaks]
    t0, t1 = min(times), max(times)
    row = ProcessSample(pid=info.pid, device_index=None, type=ProcessType.HOST, command="demo_job")
    trace = tmp_path / "trace.jsonl"
    with TraceRecorder(trace) as rec:
        t = t0
        while t <= t1 + 0.5:
            rec.write(Snapshot(
                time=t + 0.5, processes=(row,), probe_infos=(info,),
                probes=tuple(p for p in reading.probes if t <= p.time < t + 0.5),
                phase_marks=tuple(m for m in reading.phase_marks if t <= m.time < t + 0.5),
                phase_peaks=tuple(p for p in reading.phase_peaks if t <= p.end < t + 0.5),
            ))
            t += 0.5
    return trace, info.pid


@pytest.mark.torch_in_process
def test_replayed_envelope_reaches_the_measured_peak_and_the_prediction(tmp_path):
    import torch  # noqa: F401 -- installed by setup (README): missing is a failure
    import textual  # noqa: F401 -- installed by setup (README): missing is a failure
    from gpumem_tui.ui.app import GpuMemApp
    from gpumem_tui.ui.themes import load_themes

    trace, pid = _trace_of_demo_job(tmp_path)
    result = compare_trace(trace)
    measured = result["peak_measured_bytes"]
    assert [s["step"] for s in result["steps"]][-4:] == [1, 2, 3, 4]
    assert measured == max(s["peak_bytes"] for s in result["steps"])
    assert abs(result["peak_error_percent"]) <= 2.0, (result["peak_predicted_bytes"], measured)

    async def run() -> int | None:
        app = GpuMemApp(ReplaySource(trace, speed=64.0), interval=0.05, themes=load_themes(),
                        side_pane=False, select_pid=pid)
        async with app.run_test(size=(160, 48)) as pilot:
            await settle(pilot, lambda: app.source.finished and app.chart.envelope_runs and app.chart_pid() == pid,
                         what="the replay to reach the end with the job's envelope drawn")
            app.action_window(-99)  # the shortest window first, then back to the widest that holds it all
            app.chart.window = 2.0  # the chart's window watcher redraws at once (envelope_runs too)
            await pilot.pause()
            app.save_screenshot(str(tmp_path / "envelope.svg"))
            return app.chart.envelope_peak()

    assert asyncio.run(run()) == measured
    assert (tmp_path / "envelope.svg").stat().st_size > 0


# -- CUDA split, with torch's CUDA memory statistics played by a CPU tensor tracker ---------


@pytest.mark.torch_in_process
def test_cuda_peak_split_names_what_the_probe_knows(tmp_path, monkeypatch):
    """The CUDA path of the probe on a CPU model: ``torch.cuda``'s allocated / peak figures
    come from a live-tensor tracker (what they count on a GPU), so every part of the split can
    be checked against tensors the test knows."""
    import torch
    import gpumem_tui.probe
    from gpumem_tui.probe.core import Probe
    from gpumem_tui.probe.peak_split import UNSPLIT
    from gpumem_tui.probe.tracker import LiveTensorTracker

    allocator = LiveTensorTracker("cpu")

    def reset(device=None):
        allocator.reset_peak()

    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: allocator.live_bytes)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: allocator.live_bytes)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: allocator.peak_bytes)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", reset)
    monkeypatch.setattr(torch._C, "_cuda_memoryStats",
                        lambda index: {"allocated_bytes": {"all": {"peak": allocator.peak_bytes}}}, raising=False)
    monkeypatch.setattr(Probe, "_on_device", lambda self, tensor: True)

    class Output(dict):
        __getattr__ = dict.__getitem__

    class LM(torch.nn.Module):
        def __init__(self, vocab=512, hidden=64):
            super().__init__()
            self.embed = torch.nn.Embedding(vocab, hidden)
            self.mlp = torch.nn.Linear(hidden, 4 * hidden)
            self.head = torch.nn.Linear(4 * hidden, vocab, bias=False)

        def forward(self, ids):
            logits = self.head(torch.relu(self.mlp(self.embed(ids))))
            loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]), ids.view(-1))
            return Output(loss=loss, logits=logits)

    model = LM()
    opt = torch.optim.AdamW(model.parameters())
    param_bytes = sum(p.numel() * 4 for p in model.parameters())
    allocator.register(model.parameters())
    allocator.start()
    try:
        probe = gpumem_tui.probe.attach(model, opt, directory=tmp_path, interval=60, min_step_interval=0,
                                        device=torch.device("cuda", 0))
        try:
            for _ in range(3):
                ids = torch.randint(0, 512, (4, 32))
                out = model(ids)
                out.loss.backward()
                del out
                opt.step()
                opt.zero_grad(set_to_none=True)
        finally:
            probe.close()
    finally:
        allocator.stop()
    reading = ProbeSource(tmp_path, alive=lambda pid, ct: False).poll()
    peaks = {(p.step, p.phase.value): p for p in reading.phase_peaks}
    logits = 4 * 32 * 512 * 4
    # AdamW: exp_avg and exp_avg_sq like each parameter, plus a 4-byte step count per parameter
    state_bytes = 2 * param_bytes + 4 * len(list(model.parameters()))
    for phase in ("forward", "backward", "optimizer_step"):
        peak = peaks[(3, phase)]
        parts = dict(peak.categories)
        assert sum(parts.values()) == peak.peak_bytes
        assert parts["parameters"] == param_bytes
        assert parts["optimizer_states"] == state_bytes
        assert parts[UNSPLIT] >= 0
    forward, backward = dict(peaks[(3, "forward")].categories), dict(peaks[(3, "backward")].categories)
    # logits + the log-softmax cross_entropy saved for its backward (both b x s x V fp32)
    # (and the loss's scalar total weight), not the integer labels
    assert forward["logits_and_loss"] == backward["logits_and_loss"]
    assert 2 * logits <= forward["logits_and_loss"] <= 2 * logits + 64
    assert forward["gradients"] == 0  # set_to_none: no gradient exists in forward
    # backward's peak comes with the first gradients (the logits' gradient, before .grad
    # is filled), not with all of them
    assert 0 <= backward["gradients"] < param_bytes
    assert dict(peaks[(3, "optimizer_step")].categories)["gradients"] == param_bytes


def test_compare_uses_the_split_of_the_highest_peak():
    from gpumem_tui.analysis.comparison import compare
    from gpumem_tui.telemetry.model import ProbeSample

    split = (("parameters", 100), ("optimizer_states", 200), ("gradients", 10), ("logits_and_loss", 40),
             ("activations_and_temporaries", 150))
    peak = PhasePeak(pid=7, step=3, phase=Phase.BACKWARD, start=1.0, end=2.0, peak_bytes=500, device="cuda",
                     categories=split)
    low = PhasePeak(pid=7, step=3, phase=Phase.FORWARD, start=0.0, end=1.0, peak_bytes=450, device="cuda",
                    categories=split[:-1] + (("activations_and_temporaries", 100),))
    sample = ProbeSample(time=1.5, pid=7, device="cuda", allocated_bytes=380, categories=(("parameters", 100),))
    estimate = {"components_bytes": {"parameters": 100, "gradients": 0, "optimizer_states": 200,
                                     "optimizer_intermediates": 0, "activations": 140, "logits_and_loss": 40,
                                     "kv_cache": 0, "cuda_context": 0, "allocator_reserve": 0},
                "peak_bytes": 480, "device": "cuda"}
    result = compare(estimate, [sample], pid=7, phase_peaks=[low, peak])
    assert result.headline.measured_bytes == 500
    assert result.measured_peak_phase == "backward"
    assert result.row("logits_and_loss").measured_bytes == 40
    assert result.row("gradients").measured_bytes == 10
    assert result.row("activations+optimizer_intermediates").measured_bytes == 150
    assert result.row("activations").measured_bytes is None  # not split from the temporaries
    assert result.to_json()["steps"] == [{"step": 3, "peak_bytes": 500,
                                          "phase_peaks": {"forward": 450, "backward": 500}}]


def test_a_rising_per_step_peak_is_flagged_in_the_process_row():
    import textual  # noqa: F401 -- installed by setup (README): missing is a failure
    from gpumem_tui.ui.app import GpuMemApp
    from gpumem_tui.ui.process_table import ProcessTable
    from gpumem_tui.ui.themes import load_themes

    class LeakySource:
        """One probed process whose per-step peak grows by 12 MiB a step (a leak)."""

        def __init__(self) -> None:
            self.step = 0

        def poll(self) -> Snapshot:
            self.step += 1
            peaks = tuple(
                _peak(s, phase, s + i / 3, s + (i + 1) / 3, 2000 * MiB + 12 * MiB * s + i * MiB, pid=4242)
                for s in range(4 * self.step - 3, 4 * self.step + 1)
                for i, phase in enumerate(("forward", "backward", "optimizer_step"))
            )
            row = ProcessSample(pid=4242, device_index=None, type=ProcessType.HOST, command="python train.py")
            return Snapshot(time=1000.0 + self.step, processes=(row,), phase_peaks=peaks)

        def close(self) -> None:
            pass

    async def run() -> str:
        app = GpuMemApp(LeakySource(), interval=0.02, themes=load_themes(), side_pane=False)
        async with app.run_test(size=(160, 40)) as pilot:
            table = app.query_one(ProcessTable)

            def row() -> str:
                return " ".join(str(getattr(c, "plain", c)) for c in table.get_row_at(0)) if table.row_count else ""

            return await settle(pilot, lambda: "leak?" in row() and row(), what=lambda: f"a leak? row; the row: {row()!r}")

    text = asyncio.run(run())
    assert "[leak? +12 MiB/step over" in text and "python train.py" in text
