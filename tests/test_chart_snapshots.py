"""Snapshots of the chart's high-water envelope (H100-like 300 ms steps sampled every 100 ms)
and of the chart in the ANSI themes. Update after an intended change with
``pytest tests/test_chart_snapshots.py --snapshot-update``, then look at the SVGs."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from ui_fakes import T0, FakeSource  # noqa: E402

from gpumem_tui.telemetry.model import (  # noqa: E402
    DeviceSample, Phase, PhaseMark, PhasePeak, ProbeSample, ProcessSample, ProcessType, Snapshot,
)
from gpumem_tui.ui.app import GpuMemApp  # noqa: E402
from gpumem_tui.ui.themes import load_themes  # noqa: E402
from gpumem_tui.support.units import GiB  # noqa: E402

import pytest_textual_snapshot  # noqa: F401 -- installed by setup (README): missing is a failure

STEP = 0.3  # seconds: forward 0.1, backward 0.15, optimizer step 0.05
PHASES = ((Phase.FORWARD, 0.0, 0.1, 24 * GiB), (Phase.BACKWARD, 0.1, 0.25, 34 * GiB),
          (Phase.OPTIMIZER_STEP, 0.25, 0.3, 20 * GiB))


class SteppingJob:
    """A probed job whose backward peak (34 GiB) lasts less than the 100 ms between samples."""

    def __init__(self, steps: int = 12) -> None:
        self.steps = steps
        self.polled = False

    def poll(self) -> Snapshot:
        if self.polled:
            return Snapshot(time=T0 + self.steps * STEP, devices=self._devices(), processes=self._rows())
        self.polled = True
        marks, peaks, samples = [], [], []
        for step in range(1, self.steps + 1):
            t0 = T0 + (step - 1) * STEP
            for phase, start, end, peak in PHASES:
                marks.append(PhaseMark(time=t0 + start, pid=88, phase=phase, step=step))
                peaks.append(PhasePeak(pid=88, step=step, phase=phase, start=t0 + start, end=t0 + end,
                                       peak_bytes=peak, device="cuda"))
        for i in range(int(self.steps * STEP / 0.1) + 1):  # samples every 100 ms, off the peak
            t = T0 + i * 0.1 + 0.03
            samples.append(ProbeSample(time=t, pid=88, device="cuda", allocated_bytes=(16 + 3 * (i % 3)) * GiB))
        return Snapshot(time=T0 + self.steps * STEP, devices=self._devices(), processes=self._rows(),
                        probes=tuple(samples), phase_marks=tuple(marks), phase_peaks=tuple(peaks))

    @staticmethod
    def _devices() -> tuple[DeviceSample, ...]:
        return (DeviceSample(0, "NVIDIA H100 80GB HBM3", "GPU-0", 80 * GiB, 36 * GiB, 90.0, 60.0, 500.0, 700.0),)

    @staticmethod
    def _rows() -> tuple[ProcessSample, ...]:
        return (ProcessSample(88, 0, ProcessType.COMPUTE, 36 * GiB, 90.0, "alice", "python train_llama.py"),)

    def close(self) -> None:
        pass


def _settled(app: GpuMemApp, *keys: str):
    async def run_before(pilot) -> None:
        for _ in range(200):
            if app.snapshot is not None and app.chart.curves:
                break
            await asyncio.sleep(0.02)
        app.poller.stop()
        for key in keys:
            await pilot.press(key)
        await pilot.pause()

    return run_before


def test_envelope_of_short_peaks_at_a_two_second_window(snap_compare):
    app = GpuMemApp(SteppingJob(), interval=0.05, themes=load_themes(), side_pane=False, select_pid=88)
    # the estimate set for PID 88 (parameters 2, + optimizer states 14, + activations 34 GiB)
    components = {"parameters": 2 * GiB, "optimizer_states": 12 * GiB, "activations": 20 * GiB}
    app.process_estimates.set_user(88, None, None, {"components_bytes": components}, "llama-3.2-1b")
    keys = ["left_square_bracket"] * 9  # down to the shortest window
    assert snap_compare(app, terminal_size=(140, 40), run_before=_settled(app, *keys))


@pytest.mark.parametrize("theme", ["ansi-dark", "ansi-light"])
def test_chart_in_ansi_themes(snap_compare, theme):
    app = GpuMemApp(FakeSource(steps=1), interval=0.05, themes=load_themes(), side_pane=False, theme=theme)
    assert snap_compare(app, terminal_size=(120, 36), run_before=_settled(app))
