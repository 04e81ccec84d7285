"""What a probe (and NVML) measured of one process, folded sample by sample in bounded memory.

Headless: pure Python over :mod:`gpumem_tui.telemetry.model` records (no Textual, no torch).
``compare`` and the dashboard's comparison pane read a :class:`MeasuredRecord`, so neither
keeps the samples themselves: a :class:`MeasuredFold` takes each probe sample, phase mark,
phase high-water mark and NVML reading as it comes and keeps only what the comparison reads
(:func:`gpumem_tui.analysis.comparison.compare_record`):

- the peaks: torch allocated (``max(allocated, peak_allocated)`` of each sample, and the
  highest phase high-water mark), torch reserved, NVML used;
- the sample with the most live bytes among those with a per-category split (ties: the
  later time, then the first seen), and the probe's phase at its time (the last mark at or
  before it; marks are kept for the last :data:`RECENT_MARKS` only, to find it when the
  sample changes);
- the highest phase high-water mark that carries a split (ties: the later end, then the
  first seen);
- per step, the highest mark of each phase (:class:`~gpumem_tui.telemetry.step_peaks.StepPeak`), for
  the last :data:`MAX_STEPS` steps begun (older ones are counted, and their peaks still
  count in the peak).

Memory is bounded per process whatever the trace's length. Bytes throughout.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from gpumem_tui.telemetry.step_peaks import StepPeak
from gpumem_tui.telemetry.model import Phase, PhaseMark, PhasePeak, ProbeSample

#: Steps kept per process (the dashboard keeps the same number of phase marks per process).
MAX_STEPS = 4096
#: Phase marks kept to name the phase of a new highest sample.
RECENT_MARKS = 64


def device_kind(device: str) -> str:
    """``"cuda"`` for any CUDA device string (``cuda:1``), else the device in lower case."""
    return "cuda" if str(device).lower().startswith("cuda") else str(device).lower()


@dataclass(frozen=True, slots=True)
class MeasuredRecord:
    """One process's measured figures (see the module docstring); bytes.

    ``peak_allocated`` is None only without samples; ``device`` is the last sample's device
    string and ``device_kinds`` every kind seen (``cuda``, ``cpu``); ``steps`` in step order;
    ``steps_left_out`` steps begun before those (not listed); ``highest_step`` the highest
    step peak of all steps, listed or not.
    """

    pid: int
    sample_count: int = 0
    device: str | None = None
    device_kinds: tuple[str, ...] = ()
    peak_allocated: int | None = None
    peak_reserved: int | None = None
    peak_nvml: int | None = None
    at_peak: ProbeSample | None = None
    mark_at_peak: PhaseMark | None = None
    split_peak: PhasePeak | None = None
    steps: tuple[StepPeak, ...] = ()
    steps_left_out: int = 0
    highest_step: int | None = None


def _split_total(sample: ProbeSample) -> int:
    return sum(v for _, v in sample.categories)


def _merge_step(old: StepPeak | None, peak: PhasePeak) -> StepPeak:
    """``old`` with ``peak`` folded in: each phase keeps its highest mark (a re-sent record),
    ``steps`` the most folded, ``left_bytes`` the last optimizer step's end figure."""
    phases = dict(old.phase_peaks) if old is not None else {}
    name = peak.phase.value
    phases[name] = max(phases.get(name, 0), peak.peak_bytes)
    folded = max(old.steps if old is not None else 1, peak.steps)
    left = old.left_bytes if old is not None else None
    if peak.phase is Phase.OPTIMIZER_STEP and peak.end_bytes is not None:
        left = peak.end_bytes
    end = peak.end if old is None or old.end is None else max(old.end, peak.end)
    return StepPeak(peak.step, max(phases.values()), tuple(phases.items()), folded, left, end)


class MeasuredFold:
    """Folds one process's measurements into a :class:`MeasuredRecord` (module docstring).

    Feed the process's own records only, in the order they were measured; :meth:`record`
    gives the figures so far. :meth:`copy` is cheap (step values are shared, immutable).
    """

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.sample_count = 0
        self.device: str | None = None
        self.kinds: set[str] = set()
        self.peak_allocated: int | None = None
        self.peak_reserved: int | None = None
        self.peak_nvml: int | None = None
        self.at_peak: ProbeSample | None = None
        self.mark_at_peak: PhaseMark | None = None
        self.recent_marks: deque[PhaseMark] = deque(maxlen=RECENT_MARKS)
        self.split_peak: PhasePeak | None = None
        self.steps: dict[int, StepPeak] = {}
        self.steps_left_out = 0
        self.highest_step: int | None = None

    def add_sample(self, sample: ProbeSample) -> None:
        """A probe sample of this process."""
        self.sample_count += 1
        self.device = sample.device
        self.kinds.add(device_kind(sample.device))
        value = max(sample.allocated_bytes, sample.peak_allocated_bytes or 0)
        self.peak_allocated = value if self.peak_allocated is None else max(self.peak_allocated, value)
        if sample.reserved_bytes is not None:
            self.peak_reserved = max(self.peak_reserved or 0, sample.reserved_bytes)
        if sample.categories and (self.at_peak is None or (_split_total(sample), sample.time)
                                  > (_split_total(self.at_peak), self.at_peak.time)):
            self.at_peak = sample
            self.mark_at_peak = None
            for mark in self.recent_marks:
                self._consider_mark(mark)

    def add_mark(self, mark: PhaseMark) -> None:
        """A phase mark of this process."""
        self.recent_marks.append(mark)
        self._consider_mark(mark)

    def _consider_mark(self, mark: PhaseMark) -> None:
        # the last mark at or before the sample: the phase the probe was in when it took it
        if self.at_peak is not None and mark.time <= self.at_peak.time and (
                self.mark_at_peak is None or mark.time >= self.mark_at_peak.time):
            self.mark_at_peak = mark

    def add_peak(self, peak: PhasePeak) -> None:
        """A phase high-water mark of this process."""
        if peak.categories and (self.split_peak is None
                                or (peak.peak_bytes, peak.end) > (self.split_peak.peak_bytes, self.split_peak.end)):
            self.split_peak = peak
        self.highest_step = peak.peak_bytes if self.highest_step is None else max(self.highest_step, peak.peak_bytes)
        self.steps[peak.step] = _merge_step(self.steps.get(peak.step), peak)
        if len(self.steps) > MAX_STEPS:  # the step begun longest ago goes
            del self.steps[next(iter(self.steps))]
            self.steps_left_out += 1

    def add_nvml(self, used_bytes: int | None) -> None:
        """NVML's "used" of this process on one GPU (None: not read)."""
        if used_bytes is not None:
            self.peak_nvml = used_bytes if self.peak_nvml is None else max(self.peak_nvml, used_bytes)

    def record(self) -> MeasuredRecord:
        """The figures so far."""
        return MeasuredRecord(
            pid=self.pid, sample_count=self.sample_count, device=self.device,
            device_kinds=tuple(sorted(self.kinds)), peak_allocated=self.peak_allocated,
            peak_reserved=self.peak_reserved, peak_nvml=self.peak_nvml, at_peak=self.at_peak,
            mark_at_peak=self.mark_at_peak, split_peak=self.split_peak,
            steps=tuple(sorted(self.steps.values(), key=lambda s: s.step)),
            steps_left_out=self.steps_left_out, highest_step=self.highest_step,
        )

    def copy(self) -> MeasuredFold:
        """An independent copy (for a replay's checkpoints)."""
        other = MeasuredFold.__new__(MeasuredFold)
        other.__dict__.update(self.__dict__)
        other.kinds = set(self.kinds)
        other.recent_marks = deque(self.recent_marks, maxlen=RECENT_MARKS)
        other.steps = dict(self.steps)
        return other
