"""Taking one snapshot into the dashboard's stores (:meth:`gpumem_tui.ui.app_poll.DashboardPoll.
apply_snapshot`): the measured curves (history), each probed process's samples, phase marks and
per-phase high-water marks (bounded per PID and in PIDs), the start times that tell a reused PID,
the probed processes' state and their estimates.

A module of its own so that the dashboard's first frame, drawn before any snapshot, does not
compile it on a first start (benchmarks/first_frame.py). Every function takes the app
(``GpuMemApp``) whose stores it updates.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from gpumem_tui.telemetry.model import PhasePeak, ProbeSample, Snapshot

MAX_MARKS_PER_PID = 4096
MAX_MARK_PIDS = 64


def _kept_for(store: Any, pid: int, evicted: Callable[[int], None] | None = None) -> deque:
    """``store[pid]`` (an OrderedDict of PID -> deque), made on first use with room for
    :data:`MAX_MARKS_PER_PID` items; past :data:`MAX_MARK_PIDS` PIDs the oldest PID's deque is
    dropped and ``evicted(that PID)`` called."""
    kept = store.get(pid)
    if kept is None:
        kept = store[pid] = deque(maxlen=MAX_MARKS_PER_PID)
        while len(store) > MAX_MARK_PIDS:
            old, _ = store.popitem(last=False)
            if evicted is not None:
                evicted(old)
    return kept


def record_snapshot(app: Any, snap: Snapshot) -> None:
    """Take ``snap``'s figures into ``app``'s stores: the GPUs' and processes' NVML used memory
    into the history (a process on several GPUs summed; with thousands of processes only the
    listed and charted ones), the probes' samples, the probed state and estimates, the phase
    marks (each once) and the phase peaks."""
    t = snap.time
    history = app.history
    history.add_many(t, [(("gpu", dev.index), dev.memory_used_bytes) for dev in snap.devices])
    per_pid: dict[int, int] = {}
    processes = snap.processes
    if len(processes) > history.max_series // 2:
        # Thousands of processes: keep curves only for the rows the table shows (what can
        # be selected) and the charted one, not a series created and evicted per process.
        wanted = {p.pid for p in app.table.shown}
        wanted.add(app.chart_pid())
        processes = tuple(p for p in processes if p.pid in wanted)
    starts = app._proc_start
    for p in processes:
        pid, used, start = p.pid, p.used_memory_bytes, p.start_time
        if used is not None:
            before = per_pid.get(pid)
            per_pid[pid] = used if before is None else before + used
        if start is not None:
            previous = starts.get(pid)
            if previous is not None and abs(previous - start) > 1.0:
                # the PID now names another process: its curve and estimate start afresh
                history.drop(("proc", pid))
                app.process_estimates.clear_user(pid)
            starts[pid] = start
    if len(starts) > 4096:  # churn: keep only the PIDs listed now
        current = {p.pid for p in snap.processes}
        app._proc_start = {pid: st for pid, st in starts.items() if pid in current}
    history.add_many(t, [(("proc", pid), used) for pid, used in per_pid.items()])
    for probe in snap.probes:
        _record_probe(app, probe)
    probed = app.probed
    if app._feeds_probed:
        probed.add_snapshot(snap)
    app.probe_infos = probed.infos()
    estimates = app.process_estimates
    estimates.keep_probes(app.probe_infos)  # after a seek back: those seen so far
    if app.probe_infos:
        gpu_of = {p.pid: p.device_index for p in snap.processes if p.device_index is not None}
        for pid, info in app.probe_infos.items():  # the device may be known only after the info
            estimates.update_probe(info, probed.device(pid), probed.context(pid))
            job = estimates.probe_estimate(pid)
            measured = getattr(job.spec, "measured_context", None) if job is not None else None
            if measured is not None and gpu_of.get(pid) is not None:
                app.gpu_contexts[gpu_of[pid]] = measured
    if snap.phase_peaks:
        _record_phase_peaks(app, snap.phase_peaks)
    for mark in snap.phase_marks:
        key = (mark.time, mark.phase.value, mark.step)
        seen = app._mark_keys.setdefault(mark.pid, set())
        if key in seen:
            continue
        marks = _kept_for(app.phase_marks, mark.pid, lambda old: app._mark_keys.pop(old, None))
        if len(marks) == marks.maxlen:
            seen.discard((marks[0].time, marks[0].phase.value, marks[0].step))
        marks.append(mark)
        seen.add(key)


def _record_phase_peaks(app: Any, peaks: Sequence[PhasePeak]) -> None:
    """Keep the probe's high-water marks per PID, and flag a PID whose per-step peak rises
    steadily (gpumem_tui.telemetry.step_peaks) in its table row. Its forecast is kept in
    ``outlooks``: the alerts read it there (computed once per poll)."""
    from gpumem_tui.analysis.forecast import forecast
    from gpumem_tui.telemetry.step_peaks import step_peaks

    def forget(old: int) -> None:
        app.table.flags.pop(old, None)
        app.outlooks.pop(old, None)

    touched = set()
    for peak in peaks:
        _kept_for(app.phase_peaks, peak.pid, forget).append(peak)
        touched.add(peak.pid)
    flags = app.table.flags
    for pid in touched:
        kept = app.phase_peaks.get(pid)
        if kept is None:  # a snapshot with more than MAX_MARK_PIDS PIDs: dropped by a later one
            continue
        # the GPU's free memory (+ the process's own) is the limit (gpumem_tui.analysis.forecast)
        outlook = app.outlooks[pid] = forecast(step_peaks(kept), app.live_limit(pid))
        if outlook.drift is None:
            flags.pop(pid, None)
        else:
            when = outlook.short()
            flags[pid] = "leak? " + outlook.drift.text().replace(" per step", "/step") + (
                f", {when}" if when else "")


def _record_probe(app: Any, probe: ProbeSample) -> None:
    app.probe_devices[probe.pid] = probe.device
    samples = _kept_for(app.probe_samples, probe.pid)
    if not samples or probe.time > samples[-1].time:
        samples.append(probe)
    app.history.add(("probe", probe.pid, "allocated"), probe.time, probe.allocated_bytes)
    app.history.add(("probe", probe.pid, "reserved"), probe.time, probe.reserved_bytes)
