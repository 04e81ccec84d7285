"""``gpumem-tui compare`` of a trace that holds several ranks of one job.

A trace of a torchrun / accelerate job has one probed process per rank. Without ``--pid``,
when every probed process belongs to the same job (the ``job_id`` its probe published, see
:mod:`gpumem_tui.telemetry.launch`), ``compare`` reports the job: each rank's predicted vs
measured peak and error, the worst rank and the imbalance (:class:`~gpumem_tui.analysis.jobs.Job`,
the same value the dashboard's group row shows). Anything else -- one probed process, ``--pid``,
probed processes of several jobs -- is compared exactly as before
(:func:`gpumem_tui.analysis.process_estimate.compare_folded`), with the same output.

Every figure is per rank; a rank's predicted and measured peak are in its probe's figure
(torch allocated on CUDA, CPU live tensors on the CPU), the imbalance in the figure
``job.peak_figure`` names.

Headless: imports neither Textual nor torch.
"""

from __future__ import annotations

import os
from typing import Any

from gpumem_tui.analysis.jobs import Job, RankPeak, build_jobs, merge_identities, probe_peaks
from gpumem_tui.analysis.comparison import ComparisonError
from gpumem_tui.telemetry.probed_state import ProbedProcesses
from gpumem_tui.analysis.process_estimate import (
    NoPrediction,
    check_finite,
    compare_folded,
    compare_summary,
    from_probe_info,
    measured_only,
)
from gpumem_tui.telemetry.launch import RankLaunch


def compare_trace_ranks(path: str | os.PathLike[str], pid: int | None = None, until: float | None = None,
                        limit_bytes: int | None = None) -> dict[str, Any]:
    """``gpumem-tui compare TRACE [--json]``: one process, or every rank of one job.

    Arguments as :func:`gpumem_tui.analysis.process_estimate.compare_trace`. Returns, for one
    process, exactly what that function returns; for a job (see the module doc)::

        {"job": Job.to_json(), "ranks": [per rank: "rank", "local_rank", "world_size",
         "pid", "probed", "nvml_peak_bytes" and, for a probed rank, its own comparison
         (ComparisonResult.to_json, or measured_only's keys, or "no_prediction")],
         "trace_notices": [...]}

    Raises:
        TraceError: empty or non-JSON trace.
        ComparisonError: nothing to compare (as :func:`~gpumem_tui.analysis.process_estimate.compare_snapshots`).
        OSError: the file cannot be read.
    """
    from gpumem_tui.telemetry.trace_file import iter_snapshots, scan_trace

    scan = scan_trace(path)
    unreadable = [0, 0]
    state = ProbedProcesses()
    launches: dict[int, RankLaunch] = {}
    devices: dict[int, int] = {}
    for snap in iter_snapshots(scan, until, unreadable):
        state.add_snapshot(snap)
        for p in snap.processes:
            if p.launch is not None:
                launches[p.pid] = p.launch
            if p.device_index is not None:
                devices.setdefault(p.pid, p.device_index)
    job_ranks = _one_job(state, launches) if pid is None else None
    if job_ranks is None:
        result = compare_folded(state, pid, limit_bytes)
    else:
        result = _job_result(state, job_ranks, devices, limit_bytes)
    result["trace_notices"] = scan.notices_with_unreadable(*unreadable)
    check_finite(result)
    return result


def _one_job(state: ProbedProcesses, launches: dict[int, RankLaunch]) -> dict[int, RankLaunch] | None:
    """The ranks of the job that every probed process belongs to, when there are two or more
    probed processes and they all name one job; else None (compare as before)."""
    infos = state.infos()
    probed = sorted(infos) or state.sampled_pids()
    if len(probed) < 2:
        return None
    identities = merge_identities(launches, infos)  # the probe's word first, as the dashboard
    jobs = {identities[p].job_id if p in identities else None for p in probed}
    if len(jobs) != 1 or None in jobs:
        return None
    job_id = jobs.pop()
    return {p: launch for p, launch in identities.items() if launch.job_id == job_id}


def _job_result(state: ProbedProcesses, ranks: dict[int, RankLaunch], devices: dict[int, int],
                limit_bytes: int | None) -> dict[str, Any]:
    """The job's summary and each rank's comparison (see :func:`compare_trace_ranks`)."""
    peaks: list[RankPeak] = []
    per_rank: dict[int, dict[str, Any]] = {}
    infos = state.infos()
    for pid, launch in ranks.items():
        summary = state.summary(pid)
        detail: dict[str, Any] = {}
        figures = None
        if summary is not None and summary.record.sample_count:
            info = infos.get(pid)
            process = from_probe_info(info, summary.record.device, summary.context) if info is not None else None
            try:
                if process is None:
                    raise NoPrediction(f"pid {pid} published no model/setup information (ProbeInfo)", summary)
                result = compare_summary(process, summary, limit_bytes)
                detail = result.to_json()
                figures = probe_peaks(summary, process, lambda *_: result)
            except NoPrediction as exc:
                detail = measured_only(exc.summary, str(exc), limit_bytes)
                figures = probe_peaks(summary, None, compare_summary)
            except ComparisonError as exc:
                detail = {"pid": pid, "no_prediction": str(exc)}
        rank = RankPeak(pid, launch, devices.get(pid), state.nvml_peak(pid),
                        *((figures.peak, figures.figure, figures.predicted, figures.error) if figures else ()))
        peaks.append(rank)
        per_rank[pid] = {"rank": launch.rank, "local_rank": launch.local_rank, "world_size": launch.world_size,
                         "pid": pid, "probed": figures is not None, "nvml_peak_bytes": rank.nvml_peak_bytes, **detail}
    job: Job = build_jobs(peaks)[0]
    return {"job": job.to_json(), "ranks": [per_rank[r.pid] for r in job.ranks]}
