"""The measured state of every probed process, as a function of the records seen so far.

Headless (no Textual, no torch). DESIGN.md rule 4: ``gpumem-tui compare`` and the
dashboard's comparison pane read the same per-process value, a :class:`ProbedSummary`, so
they cannot disagree. A :class:`ProbedProcesses` takes the records of a trace (or the live
polls) one at a time, in order, and keeps per probed PID: its last ProbeInfo, a
:class:`~gpumem_tui.telemetry.measured_record.MeasuredFold` of its samples, marks and high-water
marks, its NVML peak, and its CUDA context (:class:`~gpumem_tui.telemetry.measured_context.ContextMeter`).

It depends only on the records fed, never on when or how often they were looked at: fed the
records of a trace up to a position, it equals ``compare`` of that trace cut there. A
replay that goes back in time restores an earlier copy (:meth:`copy`, :meth:`restore`)
instead of feeding on. Memory is bounded: at most :data:`MAX_PROBED_PIDS` probed processes
(the ones seen longest ago go first) and :data:`MAX_NVML_PIDS` NVML peaks.

Thread-safe: a replay feeds it from the poller's thread while the UI reads summaries.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpumem_tui.telemetry.measured_context import ContextMeter
from gpumem_tui.telemetry.model import ProbeInfo, Snapshot

if TYPE_CHECKING:  # the records are made at the first probed PID (_fold): off the dashboard's start-up
    from gpumem_tui.telemetry.measured_record import MeasuredFold, MeasuredRecord

#: Probed processes kept (the dashboard keeps as many probed PIDs' marks).
MAX_PROBED_PIDS = 64
#: NVML peaks kept: of every listed PID, since a process may be listed before its probe
#: starts; the PID listed longest ago goes first.
MAX_NVML_PIDS = 65536


@dataclass(frozen=True, slots=True)
class ProbedSummary:
    """One probed process as measured so far.

    ``info`` is its last ProbeInfo (None: it sent samples but no setup); ``context`` its
    CUDA context in bytes (NVML used - torch reserved, bracketed; None: not measured);
    ``version`` changes whenever a figure of it may have changed (for caching).
    """

    record: MeasuredRecord
    info: ProbeInfo | None
    context: int | None
    version: tuple[int, int]


class ProbedProcesses:
    """Per probed PID, what the records fed so far measured (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._folds: OrderedDict[int, MeasuredFold] = OrderedDict()
        self._infos: dict[int, ProbeInfo] = {}
        self._nvml: OrderedDict[int, int] = OrderedDict()
        self._contexts = ContextMeter()
        self._changes: dict[int, int] = {}
        self._epoch = 0  # changes on every restore: summaries of before are stale

    def _fold(self, pid: int) -> MeasuredFold:
        fold = self._folds.get(pid)
        if fold is None:
            from gpumem_tui.telemetry.measured_record import MeasuredFold

            fold = self._folds[pid] = MeasuredFold(pid)
            nvml = self._nvml.get(pid)
            if nvml is not None:
                fold.add_nvml(nvml)
            while len(self._folds) > MAX_PROBED_PIDS:
                old, _ = self._folds.popitem(last=False)
                self._infos.pop(old, None)
                self._changes.pop(old, None)
            self._contexts.prune(self._folds)
        self._changes[pid] = self._changes.get(pid, 0) + 1
        return fold

    def add_snapshot(self, snap: Snapshot) -> None:
        """One record (a poll, or a trace line): its ProbeInfos, probe samples, phase marks,
        phase high-water marks and NVML rows."""
        with self._lock:
            for info in snap.probe_infos:
                self._fold(info.pid)
                self._infos[info.pid] = info
            for sample in snap.probes:
                self._fold(sample.pid).add_sample(sample)
            for mark in snap.phase_marks:
                self._fold(mark.pid).add_mark(mark)
            for peak in snap.phase_peaks:
                self._fold(peak.pid).add_peak(peak)
            self._add_nvml_rows(snap)
            if self._folds or self._contexts:  # no probed process: no context to measure or forget
                self._contexts.add_snapshot(snap)
                self._contexts.prune(self._folds)

    def _add_nvml_rows(self, snap: Snapshot) -> None:
        """The NVML peak of every listed PID (probed or not: a probe may start later), and
        each probed PID's fold. One loop with its lookups bound once: it runs for every
        process at every poll, mostly with no probed process at all."""
        nvml, folds = self._nvml, self._folds
        peak_of = nvml.get
        for proc in snap.processes:
            used = proc.used_memory_bytes
            if used is None:
                continue
            pid = proc.pid
            previous = peak_of(pid)
            if previous is None:
                nvml[pid] = used
                while len(nvml) > MAX_NVML_PIDS:
                    nvml.popitem(last=False)
            elif used > previous:
                nvml[pid] = used
            if folds:
                fold = folds.get(pid)
                if fold is not None and (fold.peak_nvml is None or used > fold.peak_nvml):
                    fold.add_nvml(used)
                    self._changes[pid] = self._changes.get(pid, 0) + 1

    # -- reading -------------------------------------------------------------------------

    def summary(self, pid: int | None) -> ProbedSummary | None:
        """``pid``'s figures so far, or None when it is not a probed process."""
        with self._lock:
            fold = self._folds.get(pid) if pid is not None else None
            if fold is None:
                return None
            return ProbedSummary(fold.record(), self._infos.get(pid), self._contexts.context(pid),
                                 (self._epoch, self._changes.get(pid, 0)))

    def infos(self) -> dict[int, ProbeInfo]:
        """PID -> its last ProbeInfo (a copy)."""
        with self._lock:
            return dict(self._infos)

    def sampled_pids(self) -> list[int]:
        """PIDs with at least one probe sample, sorted."""
        with self._lock:
            return sorted(pid for pid, fold in self._folds.items() if fold.sample_count)

    def device(self, pid: int) -> str | None:
        """The device of ``pid``'s last probe sample (``cuda:0``, ``cpu``), or None."""
        with self._lock:
            fold = self._folds.get(pid)
            return None if fold is None else fold.device

    def nvml_peak(self, pid: int) -> int | None:
        """The highest NVML used memory (bytes) seen for ``pid`` in one row, probed or not;
        None when NVML never gave a figure for it."""
        with self._lock:
            return self._nvml.get(pid)

    def context(self, pid: int) -> int | None:
        """``pid``'s measured CUDA context in bytes, or None (see ContextMeter)."""
        with self._lock:
            return self._contexts.context(pid)

    def size(self) -> int:
        """Items held (probed processes, their steps and recent marks, NVML peaks): what a
        copy costs, roughly 100 bytes each."""
        with self._lock:
            return len(self._folds) + len(self._nvml) + sum(
                len(fold.steps) + len(fold.recent_marks) for fold in self._folds.values())

    # -- going back ------------------------------------------------------------------------

    def copy(self) -> ProbedProcesses:
        """An independent copy of the state now."""
        with self._lock:
            other = ProbedProcesses()
            other._folds = OrderedDict((pid, fold.copy()) for pid, fold in self._folds.items())
            other._infos = dict(self._infos)
            other._nvml = OrderedDict(self._nvml)
            other._contexts = self._contexts.copy()
            other._changes = dict(self._changes)
            return other

    def restore(self, saved: ProbedProcesses | None) -> None:
        """Become a copy of ``saved`` (None: the state before any record), in place, so that
        whoever holds this object sees the restored state."""
        source = saved.copy() if saved is not None else ProbedProcesses()
        with self._lock:
            self._folds, self._infos, self._nvml = source._folds, source._infos, source._nvml
            self._contexts, self._changes = source._contexts, source._changes
            self._epoch += 1
