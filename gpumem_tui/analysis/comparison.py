"""Predicted vs measured memory, per component and peak vs peak, like with like.

Headless: imports neither Textual/Rich nor torch (the estimator and the trace reader are pure
Python and are imported lazily, so this module loads even where only part of the project is).

What is compared with what (ESTIMATOR.md, "Say which of the three a figure is comparable to"):

================  ==========================================================  =====================
measured figure   what it holds                                               predicted figure
================  ==========================================================  =====================
torch allocated   live tensors (``torch.cuda.max_memory_allocated``)          peak - CUDA context
                                                                              - allocator reserve
torch reserved    allocated + the caching allocator's cached free blocks      peak - CUDA context
NVML used         reserved + CUDA context (+ non-torch allocations),          peak
                  the per-process figure nvidia-smi shows
CPU live tensors  the probe's tracker on a CPU job (no context, no cache)     peak - CUDA context
                                                                              - allocator reserve
================  ==========================================================  =====================

Per component, the probe's categories are mapped onto the estimator's component names with
:data:`CATEGORY_COMPONENTS`. A category that holds several estimator components (a tracker
sees the logits as activations) is compared as one group row whose name joins the components
with ``+``; each member alone is then reported as not measured (``None``), never split by
guesswork. Components no torch figure contains (the CUDA context) are measured only as a
difference of two figures, and the row says which.

Errors are signed: ``error_bytes = predicted - measured`` and
``error_percent = 100 * (predicted - measured) / measured`` (None when measured is 0 or
unknown). Memory is in bytes everywhere.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpumem_tui.estimator.component_keys import COMPONENT_KEYS  # not .estimate: the formulas load on use
from gpumem_tui.analysis.memory_figures import (  # re-exported: the figure names
    FIGURE_ALLOCATED, FIGURE_CPU_LIVE, FIGURE_NVML_USED, FIGURE_RESERVED)
from gpumem_tui.telemetry.measured_record import MeasuredFold, MeasuredRecord, device_kind
from gpumem_tui.analysis.forecast import NO_LIMIT, Forecast, forecast
from gpumem_tui.telemetry.step_peaks import Drift, StepPeak
from gpumem_tui.telemetry.model import PhaseMark, PhasePeak, ProbeInfo, ProbeSample, ProcessSample

__all__ = [
    "ACTIVATIONS_WITHOUT_TEMPORARIES",
    "CATEGORY_COMPONENTS",
    "COMPONENTS",
    "ComparisonError",
    "ComparisonResult",
    "ComponentComparison",
    "FIGURE_ALLOCATED",
    "FIGURE_CPU_LIVE",
    "FIGURE_NVML_USED",
    "FIGURE_RESERVED",
    "PeakComparison",
    "compare",
    "compare_record",
    "percent_error",
    "short_label",
    "spec_from_probe_info",
]

#: The estimator's components, in the order the estimator reports them (ESTIMATOR.md).
COMPONENTS: tuple[str, ...] = COMPONENT_KEYS


#: Probe category -> the estimator components whose bytes that category holds
#: (``gpumem_tui.probe``: parameters, buffers, gradients and optimizer states are counted from
#: the model and optimizer; the rest of the live bytes is split by the probe's tensor tracker).
#: "activations" with a tracker: every tensor made in forward, so the logits, their fp32 upcast
#: and the loss's log-softmax are in it (estimator: logits_and_loss).
#: "temporaries": the rest (the optimizer step's intermediates, the logits' gradients ...).
#: Without a tracker the probe publishes no "temporaries" and its "activations" is allocated
#: minus the model states, temporaries included: see :data:`ACTIVATIONS_WITHOUT_TEMPORARIES`.
CATEGORY_COMPONENTS: dict[str, tuple[str, ...]] = {
    "parameters": ("parameters",),
    "gradients": ("gradients",),
    "optimizer_states": ("optimizer_states",),
    "optimizer_intermediates": ("optimizer_intermediates",),
    "activations": ("activations", "logits_and_loss"),
    "logits_and_loss": ("logits_and_loss",),
    "temporaries": ("optimizer_intermediates", "logits_and_loss"),
    "temp": ("optimizer_intermediates", "logits_and_loss"),
    "kv_cache": ("kv_cache",),
    # a CUDA phase peak's rest after what the probe could name (gpumem_tui.probe.peak_split)
    "activations_and_temporaries": ("activations", "optimizer_intermediates"),
}

#: What the probe's "activations" holds when it published no "temporaries" category.
ACTIVATIONS_WITHOUT_TEMPORARIES: tuple[str, ...] = ("activations", "logits_and_loss", "optimizer_intermediates")

_CONTEXT_PARTS = ("cuda_context", "allocator_reserve")


#: short names for narrow tables (the full names are the estimator's component names)
_SHORT = {
    "parameters": "params",
    "gradients": "grads",
    "optimizer_states": "opt states",
    "optimizer_intermediates": "opt temps",
    "activations": "activations",
    "logits_and_loss": "logits/loss",
    "kv_cache": "KV cache",
    "cuda_context": "CUDA ctx",
    "allocator_reserve": "alloc reserve",
}
_IN_GROUP = {"activations": "act", "logits_and_loss": "logits", "optimizer_intermediates": "temps"}


def short_label(name: str) -> str:
    """A component (``optimizer_states`` -> "opt states") or group
    (``activations+logits_and_loss+optimizer_intermediates`` -> "act+logits+temps") name,
    short enough for a 60-column table. Unknown names are returned with spaces for ``_``."""
    parts = name.split("+")
    if len(parts) == 1:
        return _SHORT.get(name, name.replace("_", " "))
    return "+".join(_IN_GROUP.get(p, _SHORT.get(p, p)) for p in parts)


class ComparisonError(ValueError):
    """The inputs cannot be compared (no probe samples, no model config, ...).

    The message is one line meant for the user (``compare`` prints it and exits with 2).
    """


def percent_error(predicted: int | float, measured: int | float | None) -> float | None:
    """Signed error of ``predicted`` in percent of ``measured``.

    0.0 when both are 0; None when measured is None, or 0 while predicted is not.
    """
    if measured is None:
        return None
    if measured == 0:
        return 0.0 if predicted == 0 else None
    return 100.0 * (predicted - measured) / measured


class _PredictedVsMeasured:
    """The error of a row that holds ``predicted_bytes`` and ``measured_bytes`` (None when not
    measured): shared by :class:`ComponentComparison` and :class:`PeakComparison`."""

    __slots__ = ()
    predicted_bytes: int
    measured_bytes: int | None

    @property
    def error_bytes(self) -> int | None:
        """predicted - measured, in bytes (None when not measured)."""
        return None if self.measured_bytes is None else self.predicted_bytes - self.measured_bytes

    @property
    def error_percent(self) -> float | None:
        """Signed error in percent of the measured bytes (:func:`percent_error`: None when not
        measured, or measured 0 while predicted is not)."""
        return percent_error(self.predicted_bytes, self.measured_bytes)


@dataclass(frozen=True, slots=True)
class ComponentComparison(_PredictedVsMeasured):
    """One row: a component (or a group of components one probe category holds).

    ``name`` is the component name, or the group's member names joined with ``+``;
    ``components`` lists the members. ``measured_bytes`` is None when the probe cannot
    give this component on its own; ``source`` then says why, otherwise which figure or
    category the number is.
    """

    name: str
    components: tuple[str, ...]
    predicted_bytes: int
    measured_bytes: int | None
    source: str

    @property
    def is_group(self) -> bool:
        """True when the row holds several estimator components."""
        return len(self.components) > 1


@dataclass(frozen=True, slots=True)
class PeakComparison(_PredictedVsMeasured):
    """Peak vs peak for one measured figure.

    ``predicted_bytes`` is the estimator's peak with exactly the parts that ``figure``
    contains (``predicted_scope`` says which were left out).
    """

    figure: str
    predicted_bytes: int
    measured_bytes: int | None
    predicted_scope: str


@dataclass(frozen=True, slots=True)
class ComparisonResult:
    """Predicted vs measured for one probed job.

    ``measured_figure`` is the figure the per-component categories and the headline peak
    (``peaks[0]``) are in: "torch allocated" on CUDA, "CPU live tensors" on the CPU.
    ``peaks`` holds one :class:`PeakComparison` per figure the trace has (CUDA: allocated,
    reserved when published, NVML used when NVML saw the process).
    """

    device: str
    pid: int | None
    measured_figure: str
    components: tuple[ComponentComparison, ...]
    peaks: tuple[PeakComparison, ...]
    predicted_components: tuple[tuple[str, int], ...]
    peak_phase: str | None = None
    sample_count: int = 0
    notes: tuple[str, ...] = ()
    measured_peak_phase: str | None = None
    components_sample_bytes: int | None = None
    steps: tuple[StepPeak, ...] = ()  # per-step high-water marks from the probe's peak records
    drift: Drift | None = None  # a steady rise of the per-step peak (a leak), or None
    forecast: Forecast | None = None  # the time-to-OOM (gpumem_tui.analysis.forecast), with its reasons

    @property
    def headline(self) -> PeakComparison:
        """The peak comparison in ``measured_figure``."""
        return self.peaks[0]

    def row(self, name: str) -> ComponentComparison | None:
        """The row named ``name`` (a component or a ``+`` group), or None."""
        for row in self.components:
            if row.name == name:
                return row
        return None

    def to_json(self) -> dict[str, Any]:
        """The ``gpumem-tui compare --json`` shape (issue 4), bytes as ints.

        Keys: ``predicted`` {component: bytes} (every estimator component, plus each group
        row), ``measured`` {component: bytes | null}, ``error_percent`` {component: float |
        null}, ``peak_predicted_bytes`` / ``peak_measured_bytes`` (in ``measured_figure``),
        and extras: ``measured_figure``, ``measured_source`` {row: what the number is},
        ``groups`` {group: [components]}, ``peaks`` (every figure), ``device``, ``pid``,
        ``peak_phase`` (predicted), ``measured_peak_phase`` (the probe's phase at the sample
        the components come from, or null), ``components_sample_bytes`` (that sample's live
        bytes), ``samples``, ``notes``, ``steps`` [{"step", "peak_bytes", "phase_peaks":
        {phase: bytes}, "left_bytes" (what the step left behind, when the probe said)}] (the
        probe's high-water marks; empty for traces of older probes) and the time-to-OOM's
        fields (:meth:`gpumem_tui.analysis.forecast.Forecast.to_json`: ``drift`` {"bytes_per_step",
        "over_steps", ...} or null, ``steps_to_limit``, ``seconds_to_limit``, their reasons).
        """
        predicted: dict[str, int] = dict(self.predicted_components)
        measured: dict[str, int | None] = {name: None for name in predicted}
        errors: dict[str, float | None] = {name: None for name in predicted}
        sources: dict[str, str] = {}
        groups: dict[str, list[str]] = {}
        for row in self.components:
            predicted[row.name] = row.predicted_bytes
            measured[row.name] = row.measured_bytes
            errors[row.name] = _round(row.error_percent)
            sources[row.name] = row.source
            if row.is_group:
                groups[row.name] = list(row.components)
        head = self.headline
        return {
            "predicted": predicted,
            "measured": measured,
            "error_percent": errors,
            "peak_predicted_bytes": head.predicted_bytes,
            "peak_measured_bytes": head.measured_bytes,
            "peak_error_percent": _round(head.error_percent),
            "measured_figure": self.measured_figure,
            "measured_source": sources,
            "groups": groups,
            "peaks": [
                {
                    "figure": p.figure,
                    "predicted_bytes": p.predicted_bytes,
                    "measured_bytes": p.measured_bytes,
                    "error_percent": _round(p.error_percent),
                    "predicted_scope": p.predicted_scope,
                }
                for p in self.peaks
            ],
            "device": self.device,
            "pid": self.pid,
            "peak_phase": self.peak_phase,
            "measured_peak_phase": self.measured_peak_phase,
            "components_sample_bytes": self.components_sample_bytes,
            "samples": self.sample_count,
            "notes": list(self.notes),
            "steps": [s.to_json() for s in self.steps],
            **(self.forecast or forecast(self.steps, None)).to_json(),
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


# --------------------------------------------------------------------------------------------
# Reading an estimate (the real Estimate, or its to_json() dict)


def _estimate_components(estimate: Any) -> dict[str, int]:
    comps = estimate.get("components_bytes") if isinstance(estimate, Mapping) else getattr(
        estimate, "components_bytes", None
    )
    if not isinstance(comps, Mapping):
        raise ComparisonError("the estimate has no components_bytes")
    out: dict[str, int] = {}
    for name in COMPONENTS:
        out[name] = int(comps.get(name, 0) or 0)
    for name, value in comps.items():  # components a later estimator adds stay visible
        if name not in out:
            out[str(name)] = int(value or 0)
    return out


def _estimate_field(estimate: Any, name: str) -> Any:
    if isinstance(estimate, Mapping):
        return estimate.get(name)
    return getattr(estimate, name, None)


# --------------------------------------------------------------------------------------------
# The comparison


def compare(
    estimate: Any,
    probes: Sequence[ProbeSample],
    processes: Sequence[ProcessSample] = (),
    *,
    pid: int | None = None,
    phase_marks: Sequence[PhaseMark] = (),
    phase_peaks: Sequence[PhasePeak] = (),
) -> ComparisonResult:
    """Compare an estimate with what a probe (and NVML) measured for one process.

    Args:
        estimate: an ``Estimate`` (or its ``to_json()`` dict): ``components_bytes`` is the
            breakdown at the predicted peak, ``peak_bytes`` the predicted peak (CUDA context
            and allocator reserve included when the spec's device is cuda).
        probes: the probe's samples of that process over time (any order). Samples of other
            PIDs are ignored when ``pid`` is given.
        processes: NVML per-process samples (``ProcessSample.used_memory_bytes``, NVML used)
            of the same process, optional; None figures are skipped.
        pid: the process to compare; default: the only PID in ``probes``.
        phase_marks: the probe's phase marks (any PIDs), to name the phase of the sample the
            components come from (``measured_peak_phase``).
        phase_peaks: the probe's per-phase high-water marks (any PIDs): the ``steps`` of the
            result, and part of the measured peak.

    Per component, the measured bytes are the probe's categories at the sample with the most
    live bytes (the measured peak), because the estimate's components are its breakdown at
    its peak. The headline peak is ``max(peak_allocated_bytes, allocated_bytes)`` over the
    samples and the per-phase high-water marks (torch allocated on CUDA, the tracker's live
    bytes on the CPU): with high-water marks it is the highest of them, exact whatever the
    sampling interval.

    Raises:
        ComparisonError: no probe samples for the process, several PIDs without ``pid``,
            samples from both cpu and cuda, or an estimate without components.
    """
    _estimate_components(estimate)  # an estimate without components is the first error
    samples = [p for p in probes if pid is None or p.pid == pid]
    if not samples:
        who = f" for pid {pid}" if pid is not None else ""
        raise ComparisonError(f"no probe samples{who}: nothing measured to compare with")
    pids = sorted({p.pid for p in samples})
    if len(pids) > 1:
        raise ComparisonError(f"probe samples from several processes {pids}: choose one pid")
    fold = MeasuredFold(pids[0])
    for sample in samples:
        fold.add_sample(sample)
    for mark in phase_marks:
        if mark.pid == fold.pid:
            fold.add_mark(mark)
    for peak in phase_peaks:
        if peak.pid == fold.pid:
            fold.add_peak(peak)
    for row in processes:
        if row.pid == fold.pid:
            fold.add_nvml(row.used_memory_bytes)
    return compare_record(estimate, fold.record())


def compare_record(estimate: Any, measured: MeasuredRecord, limit_bytes: int | None = None,
                   no_limit: str = NO_LIMIT) -> ComparisonResult:
    """:func:`compare` on what was measured of one process, folded in bounded memory
    (:class:`~gpumem_tui.telemetry.measured_record.MeasuredRecord`): the same figures as
    :func:`compare` on the samples, marks, high-water marks and NVML rows it was folded from.
    ``limit_bytes``: the time-to-OOM's limit in the measured figure (None: ``no_limit`` says why).

    Raises:
        ComparisonError: no probe samples, samples from both cpu and cuda, or an estimate
            without components.
    """
    predicted = _estimate_components(estimate)
    pid = measured.pid
    if not measured.sample_count or measured.peak_allocated is None:
        raise ComparisonError(f"no probe samples for pid {pid}: nothing measured to compare with")
    if len(measured.device_kinds) > 1:
        raise ComparisonError(f"pid {pid} has probe samples from several devices {list(measured.device_kinds)}")
    device = measured.device_kinds[0]
    on_cuda = device == "cuda"

    notes: list[str] = []
    context = predicted.get("cuda_context", 0)
    reserve = predicted.get("allocator_reserve", 0)
    peak_bytes = _estimate_field(estimate, "peak_bytes")
    if peak_bytes is None:
        peak_bytes = sum(predicted.values())
    peak_bytes = int(peak_bytes)
    est_device = _estimate_field(estimate, "device")
    if isinstance(est_device, str) and device_kind(est_device) != device:
        notes.append(
            f"the estimate models {est_device} kernels but the job ran on {device}: "
            f"estimate with device {device} to compare like with like"
        )
    if not on_cuda and (context or reserve):
        notes.append("the estimate's CUDA context and allocator reserve are left out (the job ran on the CPU)")

    outlook = forecast(measured.steps, limit_bytes, no_limit)
    drift = outlook.drift
    if drift is not None:
        notes.append(f"the {drift.what} rises steadily: {drift.text()} (a leak?)")
    if measured.steps_left_out:
        notes.append(f"the steps listed are the last {len(measured.steps)}; {measured.steps_left_out} earlier "
                     "steps are not listed (their high-water marks still count in the peak)")
    peak_allocated, peaks = _peaks(measured, peak_bytes, context, reserve, on_cuda, notes)
    rows, measured_phase, sample_bytes = _measured_components(predicted, measured, peak_allocated, notes)
    if on_cuda:
        rows += _cuda_difference_rows(predicted, peak_allocated, measured.peak_reserved, measured.peak_nvml)

    return ComparisonResult(
        device=device,
        pid=pid,
        measured_figure=peaks[0].figure,
        components=tuple(rows),
        peaks=tuple(peaks),
        predicted_components=tuple(predicted.items()),
        peak_phase=_estimate_field(estimate, "peak_phase"),
        sample_count=measured.sample_count,
        notes=tuple(notes),
        measured_peak_phase=measured_phase,
        components_sample_bytes=sample_bytes,
        steps=measured.steps,
        drift=drift,
        forecast=outlook,
    )


def _peaks(measured: MeasuredRecord, peak_bytes: int, context: int, reserve: int, on_cuda: bool,
           notes: list[str]) -> tuple[int, list[PeakComparison]]:
    """The measured peak in the headline figure (torch allocated / CPU live tensors: the
    samples' and the high-water marks' highest), and one PeakComparison per figure measured."""
    peak_allocated = measured.peak_allocated or 0
    if measured.highest_step is not None:
        peak_allocated = max(peak_allocated, measured.highest_step)
    peak_reserved, peak_nvml = measured.peak_reserved, measured.peak_nvml
    figure = FIGURE_ALLOCATED if on_cuda else FIGURE_CPU_LIVE
    live_peak = peak_bytes - context - reserve
    peaks = [PeakComparison(figure, live_peak, peak_allocated, "without CUDA context and allocator reserve")]
    if on_cuda:
        if peak_reserved is not None:
            peaks.append(
                PeakComparison(FIGURE_RESERVED, peak_bytes - context, peak_reserved, "without CUDA context")
            )
        else:
            notes.append("the probe published no torch reserved figure")
        if peak_nvml is not None:
            peaks.append(PeakComparison(FIGURE_NVML_USED, peak_bytes, peak_nvml, "everything"))
        else:
            notes.append("NVML gave no per-process used figure for this process")
    elif peak_nvml is not None:
        notes.append("NVML lists this CPU job on a GPU: its NVML figure is not compared")
    return peak_allocated, peaks


def _measured_components(predicted: Mapping[str, int], measured: MeasuredRecord, peak_allocated: int,
                         notes: list[str]) -> tuple[list[ComponentComparison], str | None, int | None]:
    """Component rows from the split at the measured peak: the probe's split of the highest
    high-water mark when it is the peak, else the sample with the most live bytes; with the
    probe's phase there and that split's live bytes."""
    split_peak = measured.split_peak
    if split_peak is not None and split_peak.peak_bytes < peak_allocated:
        split_peak = None  # a split of a lower mark than the measured peak is not the peak's
    at_peak = measured.at_peak
    if split_peak is not None:  # the probe's split of the highest high-water mark (CUDA)
        split_sample = ProbeSample(time=split_peak.end, pid=measured.pid, device=split_peak.device,
                                   allocated_bytes=split_peak.peak_bytes, categories=split_peak.categories)
        if at_peak is None or _split_key(split_sample) > _split_key(at_peak):
            at_peak = split_sample
        notes.append(
            f"components are the probe's split of the peak (step {split_peak.step}, "
            f"{split_peak.phase.value}): parameters, optimizer states and gradients counted from the "
            "model and optimizer (gradients in backward to within one parameter's), logits and loss "
            "buffers from the model output and the loss's graph; activations and temporaries are not "
            "split from each other"
        )
    rows = _component_rows(predicted, at_peak, notes)
    if at_peak is None:
        return rows, None, None
    measured_phase = None
    sample_bytes = sum(v for _, v in at_peak.categories)
    if split_peak is not None and at_peak.time == split_peak.end:
        measured_phase = split_peak.phase.value
    elif measured.mark_at_peak is not None and at_peak is measured.at_peak:
        measured_phase = str(getattr(measured.mark_at_peak.phase, "value", measured.mark_at_peak.phase))
    if sample_bytes < peak_allocated:
        notes.append(
            f"components are from the sample with the most live bytes ({_mib(sample_bytes)}"
            + (f", in {measured_phase}" if measured_phase else "")
            + f"); the peak itself ({_mib(peak_allocated)}) fell between samples"
        )
    return rows, measured_phase, sample_bytes


def _split_key(sample: ProbeSample) -> tuple[int, float]:
    return sum(v for _, v in sample.categories), sample.time


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def _component_rows(
    predicted: Mapping[str, int],
    at_peak: ProbeSample | None,
    notes: list[str],
) -> list[ComponentComparison]:
    """Rows from the probe's categories at its peak sample ``at_peak`` (the sample with the
    most live bytes among those with categories); unmapped components get None."""
    measured_parts: dict[str, int] = {}
    if at_peak is not None:
        for category, value in at_peak.categories:
            measured_parts[category] = measured_parts.get(category, 0) + int(value)
    else:
        notes.append("the probe published no per-category split: components are not measured")

    unknown = sorted(c for c in measured_parts if c not in CATEGORY_COMPONENTS)
    if unknown:
        notes.append(f"probe categories not compared (no estimator component): {', '.join(unknown)}")

    # Group categories whose component sets overlap (union-find over components).
    groups: list[tuple[set[str], set[str]]] = []  # (categories, components)
    lumped = "temporaries" not in measured_parts and "temp" not in measured_parts
    for category in measured_parts:
        comps = CATEGORY_COMPONENTS.get(category)
        if category == "activations" and lumped:
            comps = ACTIVATIONS_WITHOUT_TEMPORARIES
        if comps is None:
            continue
        cats, members = {category}, set(comps)
        for group in [g for g in groups if g[1] & members]:
            groups.remove(group)
            cats |= group[0]
            members |= group[1]
        groups.append((cats, members))

    rows: list[ComponentComparison] = []
    covered: set[str] = set()
    # Group names list activations first: "activations+logits_and_loss+optimizer_intermediates".
    order = {name: i for i, name in enumerate(COMPONENTS)}
    order["optimizer_intermediates"] = order["logits_and_loss"] + 0.5
    for cats, members in sorted(groups, key=lambda g: min(order.get(c, 99) for c in g[1])):
        names = tuple(sorted(members, key=lambda c: order.get(c, 99)))
        covered |= members
        cat_text = ", ".join(f"'{c}'" for c in sorted(cats))
        plural = "ies" if len(cats) > 1 else "y"
        rows.append(
            ComponentComparison(
                name="+".join(names),
                components=names,
                predicted_bytes=sum(predicted.get(c, 0) for c in names),
                measured_bytes=sum(measured_parts[c] for c in cats),
                source=f"probe categor{plural} {cat_text} at the measured peak",
            )
        )
        if len(names) > 1:
            for member in names:
                rows.append(
                    ComponentComparison(
                        name=member,
                        components=(member,),
                        predicted_bytes=predicted.get(member, 0),
                        measured_bytes=None,
                        source=f"not split by the probe: measured only as {'+'.join(names)}",
                    )
                )
    for name in predicted:
        if name in covered or name in _CONTEXT_PARTS:
            continue
        rows.append(
            ComponentComparison(
                name=name,
                components=(name,),
                predicted_bytes=predicted[name],
                measured_bytes=None,
                source="no probe category holds it",
            )
        )
    return rows


def _cuda_difference_rows(
    predicted: Mapping[str, int],
    peak_allocated: int,
    peak_reserved: int | None,
    peak_nvml: int | None,
) -> list[ComponentComparison]:
    """CUDA context and allocator reserve, measured only as differences of two figures."""
    reserve_measured = None if peak_reserved is None else peak_reserved - peak_allocated
    if peak_nvml is not None and peak_reserved is not None:
        context_measured: int | None = peak_nvml - peak_reserved
        context_source = (
            "NVML used - torch reserved (peaks); includes memory allocated outside torch"
        )
    else:
        context_measured = None
        context_source = "needs both NVML used and torch reserved: not measured"
    return [
        ComponentComparison(
            name="cuda_context",
            components=("cuda_context",),
            predicted_bytes=predicted.get("cuda_context", 0),
            measured_bytes=context_measured,
            source=context_source,
        ),
        ComponentComparison(
            name="allocator_reserve",
            components=("allocator_reserve",),
            predicted_bytes=predicted.get("allocator_reserve", 0),
            measured_bytes=reserve_measured,
            source=(
                "torch reserved - torch allocated (peaks)"
                if reserve_measured is not None
                else "the probe published no torch reserved figure: not measured"
            ),
        ),
    ]


# --------------------------------------------------------------------------------------------
# Estimator inputs from a probe

# Probe setup key -> TrainingSpec field.
_SETUP_ALIASES = {
    "batch_size": "batch",
    "micro_batch": "batch",
    "micro_batch_size": "batch",
    "seq_len": "seq",
    "seq_length": "seq",
    "sequence_length": "seq",
    "gradient_checkpointing": "grad_ckpt",
    "checkpointing": "grad_ckpt",
    "attn_implementation": "attention",
    "zero_stage": "zero",
    "lora_r": "lora_rank",
    "amp": "mixed_precision",
}
_DTYPES = {
    "fp32": "fp32", "float32": "fp32", "float": "fp32", "f32": "fp32",
    "bf16": "bf16", "bfloat16": "bf16",
    "fp16": "fp16", "float16": "fp16", "half": "fp16", "f16": "fp16",
}  # fmt: skip
_OPTIMIZERS = {
    "adamw": "adamw", "adam": "adam", "sgd": "sgd", "sgd-momentum": "sgd-momentum",
    "sgd_momentum": "sgd-momentum", "adafactor": "adafactor", "adamw-8bit": "adamw-8bit",
    "adamw8bit": "adamw-8bit", "adamw_8bit": "adamw-8bit", "paged_adamw_8bit": "adamw-8bit",
}  # fmt: skip
_ATTENTION = {"eager": "eager", "sdpa": "sdpa", "flash": "flash", "flash_attention_2": "flash"}


def _norm_dtype(value: object) -> object:
    text = str(value).lower().removeprefix("torch.")
    return _DTYPES.get(text, value)


def _norm_optimizer(value: object, setup: Mapping[str, object]) -> object:
    text = str(value).strip().lower()
    text = text.rsplit(".", 1)[-1]  # "torch.optim.adamw.AdamW" -> "adamw"
    name = _OPTIMIZERS.get(text, value)
    if name == "sgd":
        try:
            if float(setup.get("momentum", 0) or 0) > 0:
                return "sgd-momentum"
        except (TypeError, ValueError):
            pass
    return name


def _norm_grad_ckpt(value: object) -> object:
    if value is True:
        return "full"
    if value is False or value is None:
        return "none"
    return value


def _norm_device(value: object) -> object:
    return device_kind(str(value))


def _head_from_class(model_class: object) -> str | None:
    """The estimator's head kind for a transformers model class name, or None if unknown."""
    if not isinstance(model_class, str):
        return None
    if model_class.endswith("ForSequenceClassification"):
        return "classification"
    if model_class.endswith("ForMaskedLM"):
        return "mlm"
    if model_class.endswith(("ForCausalLM", "LMHeadModel")):
        return "lm"
    if model_class.endswith("Model") and not model_class.endswith("PreTrainedModel"):
        return "none"
    return None


def spec_from_probe_info(info: ProbeInfo, **overrides: object) -> tuple[Any, Any]:
    """Estimator inputs ``(ModelArchitecture, TrainingSpec)`` from what a probe published.

    The architecture comes from ``info.model_config`` (the Hugging Face config dict) via
    ``architecture_from_config``; without one, from a catalogue name or config path in the
    setup's ``model`` key; the setup's ``model_class`` (e.g. ``BertModel``,
    ``GPT2LMHeadModel``) picks the head the estimator counts. The spec's fields come from
    ``info.setup`` (aliases such as
    ``batch_size``/``seq_len`` accepted; dtypes like ``torch.bfloat16`` and optimizer class
    names like ``AdamW`` normalised); keys the spec does not have are ignored.
    ``overrides`` (TrainingSpec field -> value) win over the setup, e.g. ``device="cpu"``.

    Raises:
        ComparisonError: no model config and no model name, a config the estimator cannot
            read (the message names the field), or a setup the spec rejects (the message
            names the field) -- always one line.
    """
    from gpumem_tui.estimator.architecture import (  # pure Python; lazy so this loads alone
        ArchitectureError,
        architecture_from_config,
        load_architecture,
    )
    from gpumem_tui.estimator.spec import SpecError, TrainingSpec

    setup: dict[str, object] = {}
    for key, value in info.setup:
        setup[_SETUP_ALIASES.get(str(key), str(key))] = value
    name = str(setup.get("model_name") or setup.get("model") or f"pid {info.pid}")
    try:
        if info.model_config is not None:
            if not isinstance(info.model_config, Mapping):
                raise ComparisonError(f"pid {info.pid}: the probe's model config is not a JSON object")
            arch = architecture_from_config(dict(info.model_config), name=name)
        elif setup.get("model"):
            arch = load_architecture(str(setup["model"]))
        else:
            raise ComparisonError(
                f"pid {info.pid}: the probe published no model config (pass config= to attach)"
            )
    except ArchitectureError as exc:
        raise ComparisonError(f"pid {info.pid}: cannot read the probed model config: {exc}") from None

    head = _head_from_class(setup.get("model_class"))
    if head is not None and head != getattr(arch, "head", head):
        try:  # the class that ran decides the head (a config may list another architecture)
            arch = arch.with_head(head, getattr(arch, "num_labels", 2))
        except (ArchitectureError, AttributeError):
            pass

    if "dtype" in setup:
        setup["dtype"] = _norm_dtype(setup["dtype"])
    if "kv_dtype" in setup:
        setup["kv_dtype"] = _norm_dtype(setup["kv_dtype"])
    if "optimizer" in setup:
        setup["optimizer"] = _norm_optimizer(setup["optimizer"], setup)
    if "grad_ckpt" in setup:
        setup["grad_ckpt"] = _norm_grad_ckpt(setup["grad_ckpt"])
    if "attention" in setup:
        setup["attention"] = _ATTENTION.get(str(setup["attention"]).lower(), setup["attention"])
    if "device" in setup:
        setup["device"] = _norm_device(setup["device"])
    setup.update(overrides)

    fields = {f.name for f in dataclasses.fields(TrainingSpec)}
    kwargs = {k: v for k, v in setup.items() if k in fields}
    for required in ("batch", "seq"):
        if required not in kwargs:
            raise ComparisonError(f"pid {info.pid}: the probe did not publish '{required}'")
    try:
        spec = TrainingSpec(**kwargs)
    except SpecError as exc:
        field = getattr(exc, "field", None)
        where = f" ({field})" if field else ""
        raise ComparisonError(f"pid {info.pid}: the probed setup{where} is not usable: {exc}") from None
    except (TypeError, ValueError) as exc:
        raise ComparisonError(f"pid {info.pid}: the probed setup is not usable: {exc}") from None
    return arch, spec
