"""What ``compare --plot`` draws, gathered from a trace's snapshots in one pass, in bounded memory.

For one probed process: its measured curve, its per-step envelope and the predicted peak of
each phase over the spans where that phase ran, all in ONE figure, the probe's own
(:mod:`gpumem_tui.analysis.comparison`'s table): ``torch allocated`` on CUDA
(``ProbeSample.allocated_bytes`` = ``torch.cuda.memory_allocated``; ``PhasePeak.peak_bytes`` =
``torch.cuda.max_memory_allocated`` within the phase) or ``CPU live tensors`` on the CPU (the
probe's tracker). The prediction comparable with it is a phase's live bytes without the CUDA
context and the allocator reserve.

The envelope is the probe's per-step high-water marks (``PhasePeak``, as ``compare`` reads
them) when the trace has them; for older probes, the highest sample between one step's first
phase mark and the next step's. Phase spans come from the same records. Snapshots are consumed
as they come (a list or a stream): the curve is kept reduced (:func:`.compare_plot.reduce_curve`),
at most about :data:`MAX_SPANS` steps are kept (neighbours merged pairwise beyond that) and at
most ``3 x MAX_SPANS`` phase spans (beyond that each phase's level is drawn across the plot).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from gpumem_tui.analysis.comparison import FIGURE_ALLOCATED, FIGURE_CPU_LIVE
from gpumem_tui.telemetry.measured_context import ContextMeter
from gpumem_tui.plots.compare_plot import Level, reduce_curve
from gpumem_tui.telemetry.model import PhaseMark, ProbeInfo, ProbeSample, Snapshot

MAX_SPANS = 4096  # steps (and 3x phase spans) kept; a plot shows far fewer
_NOT_ALLOCATED = ("cuda_context", "allocator_reserve")  # in no torch-allocated figure


@dataclass
class TraceSeries:
    """The plot's inputs for ``pid``: ``curve`` [(epoch s, bytes)] in ``figure``; ``steps``
    (per-step peak over its span), named ``steps_label`` for the legend; ``phases`` (predicted peak
    per phase, over its spans, or across the plot); ``title`` (model and pid, untrusted
    text: the plot makes it printable); ``notes`` (why something is missing)."""

    pid: int
    figure: str = FIGURE_ALLOCATED
    curve: list[tuple[float, int]] = field(default_factory=list)
    steps: list[Level] = field(default_factory=list)
    phases: list[Level] = field(default_factory=list)
    steps_label: str = "per-step peak"
    title: str = ""
    notes: list[str] = field(default_factory=list)


class _Steps:
    """Per-step spans and peaks in the order they come, bounded: past ``2 * MAX_SPANS`` steps,
    neighbours are merged pairwise (the higher value over both spans)."""

    def __init__(self) -> None:
        self.items: list[list] = []  # [last step number in it, label, start, end, value]

    def update(self, step: int, start: float, end: float, value: int) -> None:
        """Widen the current step's span and raise its value, or start a new step."""
        if self.items and self.items[-1][0] == step:
            last = self.items[-1]
            last[2], last[3], last[4] = min(last[2], start), max(last[3], end), max(last[4], value)
            return
        self.items.append([step, str(step), start, end, value])
        if len(self.items) > 2 * MAX_SPANS:
            self.items = [a if b is None else [b[0], f"{a[1]}-{b[1]}", a[2], b[3], max(a[4], b[4])]
                          for a, b in zip(self.items[0::2], [*self.items[1::2], None])]

    def levels(self) -> list[Level]:
        """The steps with a value, at most MAX_SPANS of them."""
        return _merge_pairs([Level(int(v), label, start, end) for _, label, start, end, v in self.items if v > 0])


class _Gatherer:
    """The fold over snapshots (one process); :meth:`finish` makes the :class:`TraceSeries`."""

    def __init__(self, pid: int, buckets: int) -> None:
        self.pid, self.buckets = pid, buckets
        self.curve: list[tuple[float, int]] = []
        self.device: str | None = None
        self.info: ProbeInfo | None = None
        self.contexts = ContextMeter()
        self.peak_steps, self.mark_steps = _Steps(), _Steps()  # from high-water marks / from phase marks
        self.peak_spans: list[tuple[str, float, float]] = []  # (phase, start, end)
        self.mark_spans: list[tuple[str, float, float]] = []
        self.open_mark: tuple[str, float] | None = None  # the phase running since (from marks)
        self.too_many = False  # more phase spans than a plot can show: levels across the plot

    def add(self, snap: Snapshot) -> None:
        self.contexts.add_snapshot(snap)
        for info in snap.probe_infos:
            if info.pid == self.pid:
                self.info = info
        events: list[tuple[float, int, ProbeSample | PhaseMark]] = [
            (m.time, 0, m) for m in snap.phase_marks if m.pid == self.pid]
        events += [(s.time, 1, s) for s in snap.probes if s.pid == self.pid]
        for _t, _kind, event in sorted(events, key=lambda e: (e[0], e[1])):
            if isinstance(event, PhaseMark):
                self._mark(event)
            else:
                self._sample(event)
        for peak in snap.phase_peaks:
            if peak.pid == self.pid:
                self.peak_steps.update(peak.step, peak.start, peak.end, peak.peak_bytes)
                self._span(self.peak_spans, (peak.phase.value, peak.start, peak.end))

    def _span(self, spans: list[tuple[str, float, float]], span: tuple[str, float, float]) -> None:
        if self.too_many:
            return
        spans.append(span)
        if len(spans) > 3 * MAX_SPANS:
            self.too_many = True
            self.peak_spans, self.mark_spans = [], []

    def _mark(self, mark: PhaseMark) -> None:
        if self.open_mark is not None:
            self._span(self.mark_spans, (*self.open_mark, mark.time))
        self.open_mark = (mark.phase.value, mark.time)
        self.mark_steps.update(mark.step, mark.time, mark.time, 0)

    def _sample(self, sample: ProbeSample) -> None:
        self.device = sample.device
        self.curve.append((sample.time, sample.allocated_bytes))
        if len(self.curve) > 8 * self.buckets:
            self.curve = reduce_curve(self.curve, 2 * self.buckets)
        if self.mark_steps.items:  # the highest sample of the step the marks say is running
            last = self.mark_steps.items[-1]
            last[3], last[4] = max(last[3], sample.time), max(last[4], sample.allocated_bytes)

    def finish(self) -> TraceSeries:
        on_cpu = (self.device or "cuda").startswith("cpu")
        series = TraceSeries(self.pid, FIGURE_CPU_LIVE if on_cpu else FIGURE_ALLOCATED, self.curve)
        if self.peak_steps.items:
            series.steps_label = "per-step peak"  # the probe's high-water marks, as compare reads them
            series.steps, spans = self.peak_steps.levels(), self.peak_spans
        else:
            series.steps_label = "per-step highest sample"  # an older probe: no high-water marks
            if self.open_mark is not None and self.curve:
                self._span(self.mark_spans, (*self.open_mark, max(self.curve[-1][0], self.open_mark[1])))
            series.steps, spans = self.mark_steps.levels(), self.mark_spans
        series.phases = self._predicted(spans, series)
        return series

    def _predicted(self, spans: list[tuple[str, float, float]], series: TraceSeries) -> list[Level]:
        if self.info is None:
            series.notes.append(f"pid {self.pid} published no model/setup information: no prediction drawn")
            return []
        from gpumem_tui.analysis.process_estimate import from_probe_info  # the estimator: only when plotting

        process = from_probe_info(self.info, device=self.device, measured_context=self.contexts.context(self.pid))
        series.title = process.label
        if process.estimate is None:
            series.notes.append(f"no prediction drawn: {process.problem}")
            return []
        predicted = {p.name: sum(v for k, v in p.components.items() if k not in _NOT_ALLOCATED)
                     for p in process.estimate.phases}
        if self.too_many or not spans:
            return [Level(value, name) for name, value in predicted.items()]
        return [Level(predicted[phase], phase, start, end) for phase, start, end in spans if phase in predicted]


def _merge_pairs(levels: list[Level]) -> list[Level]:
    """Neighbours merged pairwise (the higher value over both spans) until at most MAX_SPANS."""
    while len(levels) > MAX_SPANS:
        pairs = zip(levels[0::2], [*levels[1::2], None])
        levels = [a if b is None else Level(max(a.value_bytes, b.value_bytes), f"{a.label}-{b.label}", a.start, b.end)
                  for a, b in pairs]
    return levels


def gather(snapshots: Iterable[Snapshot], pid: int, buckets: int = 1000) -> TraceSeries:
    """One pass over ``snapshots`` (a list or a stream): the plot's inputs for ``pid``.

    ``buckets``: the curve is kept to about ``2 x buckets`` points (lowest and highest of
    each time bucket). Never raises on odd data: a process without samples has an empty
    curve (the plot then refuses: nothing to draw), one without ProbeInfo no prediction.
    """
    gatherer = _Gatherer(pid, buckets)
    for snap in snapshots:
        gatherer.add(snap)
    return gatherer.finish()
