"""Time-to-OOM on the dashboard: the process row's flag and the comparison pane, with the
GPU's free memory (NVML, faked here by the source) as the limit."""

from __future__ import annotations

import asyncio
import math
import re

import pytest

from gpumem_tui.analysis.forecast import format_duration
from gpumem_tui.telemetry.model import (
    DeviceSample,
    Phase,
    PhasePeak,
    ProbeInfo,
    ProbeSample,
    ProcessSample,
    ProcessType,
    Snapshot,
)
from gpumem_tui.ui.app import GpuMemApp
from gpumem_tui.ui.process_table import ProcessTable
from gpumem_tui.ui.themes import load_themes
from waiting import settle

MiB = 1 << 20
PID = 4242
TOTAL, USED, OWN_USED = 16384 * MiB, 8000 * MiB, 6000 * MiB  # the limit: 16384 - 8000 + 6000 MiB


pytestmark = pytest.mark.usefixtures("no_user_config")  # tests/conftest.py


class LeakyGpuJob:
    """A probed CUDA job without a model config whose per-step peak grows 12 MiB a step,
    one step a second (four steps per poll), on a 16 GiB GPU."""

    def __init__(self) -> None:
        self.poll_count = 0

    def poll(self) -> Snapshot:
        self.poll_count += 1
        first = 4 * self.poll_count - 3
        peaks = tuple(
            PhasePeak(pid=PID, step=s, phase=Phase(phase), start=1000 + s + i / 3, end=1000 + s + (i + 1) / 3,
                      peak_bytes=2000 * MiB + 12 * MiB * s + i * MiB, device="cuda")
            for s in range(first, first + 4)
            for i, phase in enumerate(("forward", "backward", "optimizer_step"))
        )
        now = 1000.0 + first + 4
        sample = ProbeSample(now, PID, "cuda:0", allocated_bytes=2000 * MiB + 12 * MiB * (first + 3))
        device = DeviceSample(0, "Fake GPU", "GPU-0", TOTAL, USED, 90.0, 60.0, 200.0, 300.0)
        row = ProcessSample(pid=PID, device_index=0, type=ProcessType.COMPUTE, used_memory_bytes=OWN_USED,
                            command="python train.py")
        info = ProbeInfo(pid=PID, setup=(("batch", 4), ("model_class", "MyNet")))
        return Snapshot(time=now, devices=(device,), processes=(row,), probes=(sample,), probe_infos=(info,),
                        phase_peaks=peaks)

    def close(self) -> None:
        pass


def expected_oom(last_step: int) -> str:
    """The row's text for a fit up to ``last_step``: the latest peak is that step's optimizer
    step (2 MiB over its forward), the limit 14384 MiB, one second per step."""
    latest = 2000 * MiB + 12 * MiB * last_step + 2 * MiB
    steps = math.floor((TOTAL - USED + OWN_USED - latest) / (12 * MiB))
    return f"OOM {format_duration(steps * 1.0)}"


def test_the_process_row_says_when_the_leak_runs_out_of_gpu_memory():
    async def run() -> str:
        app = GpuMemApp(LeakyGpuJob(), interval=0.05, themes=load_themes(), side_pane=False)
        async with app.run_test(size=(200, 40)) as pilot:
            table = app.query_one(ProcessTable)

            def row() -> str:
                return " ".join(str(getattr(c, "plain", c)) for c in table.get_row_at(0)) if table.row_count else ""

            text = await settle(pilot, lambda: "OOM" in row() and row(), what=lambda: f"an OOM forecast; the row: {row()!r}")
            assert app.probed.context(PID) is None  # no context measured: the limit is free + own
            return text

    text = asyncio.run(run())
    match = re.search(r"\[leak\? \+12 MiB/step over (\d+) steps, (OOM [^\]]+)\]", text)
    assert match, text
    last_step = int(match.group(1)) + 2  # the fit leaves out the first two steps
    assert match.group(2) == expected_oom(last_step)


def test_the_pane_says_there_is_no_prediction_and_gives_the_time_to_oom():
    import textual  # noqa: F401 -- installed by setup (README): missing is a failure
    from gpumem_tui.ui.comparison_view import ComparisonView

    async def run() -> str:
        app = GpuMemApp(LeakyGpuJob(), interval=0.05, themes=load_themes(), side_pane=True, select_pid=PID)
        async with app.run_test(size=(200, 50)) as pilot:
            def figure() -> str:
                return str(app.query_one("#cmp-figure").render()) if app.query(ComparisonView) else ""

            text = await settle(pilot, lambda: "out of memory in" in figure() and figure(),
                                what=lambda: f"a time-to-OOM in the pane; the pane: {figure()!r}")
            assert app.query(ComparisonView).first().result is None
            return text

    text = asyncio.run(run())
    assert text.startswith(f"no prediction: pid {PID}: the probe published no model config"), text
    match = re.search(r"time-to-OOM: \+12 MiB per step: out of memory in ~(\d+) steps \((~[^)]+)\)", text)
    assert match, text
    steps = int(match.group(1))
    # floor((14384 - 2002 - 12 N) / 12) = 1031 - N steps left after step N, a whole poll's (4)
    assert (1031 - steps) % 4 == 0 and 8 <= 1031 - steps < 1031
    assert format_duration(steps * 1.0) == match.group(2)
    lines = text.splitlines()  # one line each, not an escaped "\n"
    assert len(lines) == 3 and lines[1].startswith("measured peak ") and lines[2].startswith("time-to-OOM: ")
