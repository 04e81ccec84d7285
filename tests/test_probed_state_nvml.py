"""ProbedProcesses' NVML bookkeeping at every poll: the peaks of every PID, probed or not, and
the context of a probed one (its path with no probed process is the dashboard's every poll)."""

from __future__ import annotations

from gpumem_tui.telemetry.model import ProbeSample, ProcessSample, ProcessType, Snapshot
from gpumem_tui.telemetry.probed_state import ProbedProcesses

MiB = 1 << 20


def _row(pid: int, used: int | None, gpu: int = 0) -> ProcessSample:
    return ProcessSample(pid, gpu, ProcessType.COMPUTE, used)


def _probe(pid: int, t: float, reserved: int) -> ProbeSample:
    return ProbeSample(pid=pid, time=t, device="cuda:0", allocated_bytes=reserved // 2, reserved_bytes=reserved)


def test_nvml_peaks_of_unprobed_processes_are_kept_without_any_probe():
    state = ProbedProcesses()
    for t, used in enumerate((100, 300, 200, None)):
        state.add_snapshot(Snapshot(time=float(t), processes=(_row(7, used), _row(8, 50 + t))))
    assert state.nvml_peak(7) == 300 * 1  # the highest, not the last; None adds nothing
    assert state.nvml_peak(8) == 53
    assert state.nvml_peak(9) is None
    assert state.summary(7) is None  # not probed
    assert not state._contexts  # nothing followed while no process is probed


def test_a_probe_that_starts_later_gets_the_nvml_peak_and_its_context_measured():
    state = ProbedProcesses()
    state.add_snapshot(Snapshot(time=0.0, processes=(_row(7, 900 * MiB),)))  # before its probe
    state.add_snapshot(Snapshot(time=1.0, processes=(_row(7, 1200 * MiB),), probes=(_probe(7, 1.0, 400 * MiB),)))
    state.add_snapshot(Snapshot(time=1.5, processes=(_row(7, 1100 * MiB),), probes=(_probe(7, 1.8, 400 * MiB),)))
    summary = state.summary(7)
    assert summary is not None and summary.record.peak_nvml == 1200 * MiB
    # NVML at 1.5 s lies between two samples with the same reserved: 1100 - 400 MiB
    assert state.context(7) == 700 * MiB
    version = summary.version
    state.add_snapshot(Snapshot(time=2.0, processes=(_row(7, 1300 * MiB),)))
    assert state.summary(7).record.peak_nvml == 1300 * MiB
    assert state.summary(7).version != version  # a new NVML peak is a change of the summary
