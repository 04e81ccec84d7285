"""Per-process estimator state: one :class:`ProcessEstimate` per PID, owned by the core.

DESIGN.md rule 4: for each probed PID one value holds its setup (from its ProbeInfo), its
estimate and how to compare it; the estimator pane, the chart and ``gpumem-tui compare`` all
read that value, so they cannot disagree. The UI keeps a :class:`ProcessEstimates` registry
and only draws what it holds.

Where an estimate comes from (``ProcessEstimate.source``):

- ``"probe"``: built from the process's own :class:`ProbeInfo` by :func:`from_probe_info`
  (the same function ``compare`` uses), whatever was selected before;
- ``"user"``: the user set the estimate for this process in the estimator pane; it stays with
  that PID until the user changes it again or the process is gone.

A process with neither has no estimate, and nothing predicted is drawn for it.

Headless: imports neither Textual nor torch.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from gpumem_tui.analysis.probed_job import ProbedJob, read_probed_job
from gpumem_tui.analysis.comparison import (
    FIGURE_ALLOCATED,
    FIGURE_CPU_LIVE,
    ComparisonError,
    ComparisonResult,
    compare,
    compare_record,
    spec_from_probe_info,
)
from gpumem_tui.analysis.forecast import NO_LIMIT, forecast
from gpumem_tui.telemetry.measured_context import init_context
from gpumem_tui.telemetry.probed_state import ProbedProcesses, ProbedSummary
from gpumem_tui.telemetry.model import PhaseMark, PhasePeak, ProbeInfo, ProbeSample, ProcessSample, Snapshot
from gpumem_tui.support.text import printable

__all__ = [
    "SOURCE_PROBE",
    "SOURCE_USER",
    "NoPrediction",
    "ProcessEstimate",
    "ProcessEstimates",
    "compare_probed",
    "compare_process",
    "what_if_changes",
    "compare_snapshots",
    "compare_summary",
    "compare_trace",
    "compare_folded",
    "check_finite",
    "device_kind",
    "from_probe_info",
    "measured_only",
    "model_label",
]

SOURCE_PROBE = "probe"
SOURCE_USER = "user"

#: Raw config.json keys that fix a model's shape; a probed config whose values equal a bundled
#: catalogue config on every key both have (and on model_type) is that catalogue model.
_SHAPE_KEYS = (
    "hidden_size", "n_embd", "d_model", "num_hidden_layers", "n_layer", "num_attention_heads", "n_head",
    "num_key_value_heads", "intermediate_size", "n_inner", "ffn_dim", "vocab_size", "head_dim",
    "tie_word_embeddings", "num_local_experts", "num_experts",
)  # fmt: skip


@dataclass(frozen=True)
class ProcessEstimate:
    """The estimator's view of one process.

    Attributes:
        pid: the process.
        source: ``"probe"`` (from its ProbeInfo) or ``"user"`` (set in the estimator pane).
        label: names the model and the PID once, e.g. ``"llama-3.2-1b (probe, pid 1088)"``.
        architecture: the estimator's ModelArchitecture, or None when it could not be read.
        spec: the TrainingSpec (every field the probe published, keep-outputs included), or None.
        estimate: the estimator's Estimate for ``architecture`` + ``spec``, or None.
        problem: one line saying why ``estimate`` is None (or what of the setup was not
            usable), else None.
        info_key: identifies the ProbeInfo content it was built from (None for ``"user"``).
        model: the model's name alone (``"llama-3.2-1b"``), as the label gives it.
        what_if: for a ``"user"`` estimate of a probed PID, the settings that differ from the
            job's own (probe's) estimate, e.g. ``("batch 8 (job: 4)",)``; empty otherwise.
        plan: the parallel plan the probe read (``ParallelPlan``), or None for one device;
            ``estimate`` is then this rank's per-rank estimate and ``spec`` the job's spec
            before the plan's sharding (the form's fields).
    """

    pid: int
    source: str
    label: str
    architecture: Any = None
    spec: Any = None
    estimate: Any = None
    problem: str | None = None
    info_key: str | None = None
    model: str = ""
    what_if: tuple[str, ...] = ()
    plan: Any = None

    @property
    def is_what_if(self) -> bool:
        """True for the user's what-if on a probed process (not the job's own estimate)."""
        return self.source == SOURCE_USER and bool(self.what_if)


#: TrainingSpec field -> the estimator form's label for it: a what-if names its changes so.
SPEC_LABELS = {
    "device": "kernels", "mixed_precision": "fp32 master", "optimizer": "optim", "grad_ckpt": "ckpt",
    "attention": "attn", "zero": "ZeRO", "lora_rank": "LoRA r",
}  # fmt: skip
#: spec fields that are facts of the box, not settings of the job (never a what-if's change)
_NOT_SETTINGS = frozenset({"measured_context"})


def what_if_changes(job: ProcessEstimate, architecture: Any, spec: Any, model: str) -> tuple[str, ...]:
    """The settings of ``architecture`` + ``spec`` that differ from the job's estimate ``job``.

    One entry per differing setting, in the spec's field order after the model, each as
    ``"<form label> <what-if value> (job: <job's value>)"``, e.g. ``"batch 8 (job: 4)"``;
    ``model`` names the what-if's model. Empty when nothing differs or ``job`` has no spec.
    """
    import dataclasses

    changes: list[str] = []
    if job.architecture is not None and architecture is not None and architecture != job.architecture:
        changes.append(f"model {printable(model, limit=48)} (job: {job.model or 'probed model'})")
    if job.spec is None or spec is None or not dataclasses.is_dataclass(spec):
        return tuple(changes)
    for field in dataclasses.fields(spec):
        name = field.name
        if name in _NOT_SETTINGS:
            continue
        mine, theirs = getattr(spec, name, None), getattr(job.spec, name, None)
        if mine != theirs:
            changes.append(f"{SPEC_LABELS.get(name, name.replace('_', ' '))} {_value(mine)} (job: {_value(theirs)})")
    return tuple(changes)


def _value(value: object) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, (tuple, list)):
        return ",".join(map(str, value)) or "none"
    return printable(str(value), limit=32) if value is not None else "default"


def device_kind(device: object) -> str:
    """``"cuda:0"`` -> ``"cuda"``, ``"CPU"`` -> ``"cpu"`` (the kernel profile's name)."""
    return str(device).split(":", 1)[0].strip().lower()


def _info_key(info: ProbeInfo, device: str | None, measured_context: int | None = None) -> str:
    try:
        return json.dumps([info.model_config, list(info.setup), device, measured_context], sort_keys=True, default=repr)
    except (TypeError, ValueError):  # a config the probe sent that JSON cannot sort
        return repr((info.model_config, info.setup, device, measured_context))


@lru_cache(maxsize=1)
def _catalogue_configs() -> tuple[tuple[str, Mapping[str, Any]], ...]:
    from gpumem_tui.estimator.architecture import CATALOGUE_DIR, catalogue_names

    out = []
    for name in catalogue_names():
        try:
            config = json.loads((CATALOGUE_DIR / f"{name}.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(config, Mapping):
            out.append((name, config))
    return tuple(out)


def _catalogue_match(config: Mapping[str, Any]) -> str | None:
    """The bundled catalogue model whose shape ``config`` has, or None."""
    model_type = config.get("model_type")
    for name, known in _catalogue_configs():
        if known.get("model_type") != model_type:
            continue
        shared = [k for k in _SHAPE_KEYS if k in known and k in config]
        if len(shared) >= 3 and all(known[k] == config[k] for k in shared):
            return name
    return None


def model_label(info: ProbeInfo) -> str:
    """What to call the probed model, from what the probe published (never the PID).

    In order: the setup's ``model_name`` / ``model``; the bundled catalogue model whose shape
    the config has; the model class that ran (``model_class``); the config's ``model_type``;
    else "probed model". Printable and at most 48 characters.
    """
    setup = dict(info.setup)
    name: object = setup.get("model_name") or setup.get("model")
    config = info.model_config if isinstance(info.model_config, Mapping) else None
    if not name and config is not None:
        try:
            name = _catalogue_match(config)
        except Exception:  # noqa: BLE001 - a broken catalogue only costs the nicer name
            name = None
    if not name:
        name = setup.get("model_class") or (config or {}).get("model_type") or "probed model"
    return printable(str(name), limit=48)


def _forward_passes_no_cache(info: ProbeInfo) -> bool:
    """Whether the probed loop's training forward passes ``use_cache=False`` whatever the
    config says, by what the probe published: the setup's ``use_cache`` (false), or the
    built-in demo job's ``demo_model`` key (gpumem_tui/demo/job.py calls its model with
    ``use_cache=False``; traces recorded before it published ``use_cache`` carry only that).
    Without either, the config's ``use_cache`` and the recipe decide (estimator/components/kv_cache.py)."""
    setup = dict(info.setup)
    flag = setup.get("use_cache")
    if isinstance(flag, bool) or (isinstance(flag, str) and flag.strip().lower() in ("false", "true")):
        return str(flag).strip().lower() == "false"
    return setup.get("demo_model") in ("hf", "builtin")


def from_probe_info(info: ProbeInfo, device: str | None = None, measured_context: int | None = None) -> ProcessEstimate:
    """The estimate of a probed process, from its ProbeInfo only. Never raises.

    Args:
        info: what the probe published (model config and setup).
        device: where the probe measured (``"cpu"``, ``"cuda:0"``); it picks the kernel
            profile (and whether the CUDA context is counted), overriding the setup's device.
        measured_context: the process's CUDA context measured on this box (bytes, NVML used
            minus torch reserved: :class:`gpumem_tui.telemetry.measured_context.ContextMeter`), or
            None; on CUDA it replaces the profile's figure (through
            :func:`~gpumem_tui.telemetry.measured_context.init_context`).

    The job facts the probe read (rank, parallel layout, checkpoint flavour, quantized
    Linears, fp32 casts: :func:`gpumem_tui.analysis.probed_job.read_probed_job`) configure the
    spec; with a parallel layout ``estimate`` is this rank's per-rank estimate
    (:func:`gpumem_tui.estimator.parallel.per_rank.estimate_job`) and ``plan`` is set. What
    the probe could not see or that was not usable is appended to ``estimate.assumptions``.

    Returns:
        A ``"probe"`` ProcessEstimate; ``estimate`` is None and ``problem`` says why when the
        config or the setup cannot be used (see :func:`gpumem_tui.analysis.comparison.spec_from_probe_info`).
    """
    model = model_label(info)
    label = f"{model} (probe, pid {info.pid})"
    key = _info_key(info, device, measured_context)
    overrides = {"device": device_kind(device)} if device else {}
    try:
        job = read_probed_job(dict(info.setup))
    except (TypeError, ValueError):  # a setup that is not key/value pairs
        job = read_probed_job({})
    notes = list(job.assumptions)
    try:
        checked = replace(info, setup=tuple(job.setup.items()))
        try:
            arch, spec = spec_from_probe_info(checked, **{**job.spec_fields, **overrides})
        except ComparisonError as exc:
            if not job.spec_fields:
                raise
            arch, spec = spec_from_probe_info(checked, **overrides)  # what the probe read is the problem
            notes.append(f"the probe's recipe/parallel settings were not usable ({exc}); the setup's alone are used")
        if arch.use_cache and _forward_passes_no_cache(info):
            arch = replace(arch, use_cache=False)
        if measured_context is not None and spec.device == "cuda":
            spec = replace(spec, measured_context=init_context(measured_context, arch, spec))
    except ComparisonError as exc:
        return ProcessEstimate(info.pid, SOURCE_PROBE, label, problem=str(exc), info_key=key, model=model)
    except Exception as exc:  # noqa: BLE001 - data from another process must not raise here
        return ProcessEstimate(
            info.pid, SOURCE_PROBE, label, problem=f"pid {info.pid}: cannot read the probe's setup: {exc}",
            info_key=key, model=model,
        )
    try:
        est, plan = _rank_estimate(arch, spec, job, notes)
    except ValueError as exc:  # SpecError / ArchitectureError are ValueErrors
        return ProcessEstimate(
            info.pid, SOURCE_PROBE, label, arch, spec,
            problem=f"pid {info.pid}: the estimator rejected the probed setup: {exc}", info_key=key, model=model,
        )  # fmt: skip
    if notes:
        est = replace(est, assumptions=tuple(est.assumptions) + tuple(notes))
    return ProcessEstimate(info.pid, SOURCE_PROBE, label, arch, spec, est, info_key=key, model=model, plan=plan)


def _rank_estimate(arch: Any, spec: Any, job: ProbedJob, notes: list[str]) -> tuple[Any, Any]:
    """(this rank's Estimate, the plan used or None). With a parallel plan, the per-rank
    estimate of :func:`gpumem_tui.estimator.parallel.per_rank.estimate_job` for this rank's
    role (data-parallel ranks are alike; a pipeline's stage is not published, so its largest
    role); a plan the estimator rejects adds a note and falls back to one device's estimate.

    Raises:
        ValueError: the single-device estimate itself is rejected.
    """
    from gpumem_tui.estimator.estimate import estimate as run_estimate

    if job.plan is None:
        return run_estimate(arch, spec), None
    from gpumem_tui.analysis.probed_job import rank_estimate

    try:
        role = rank_estimate(arch, spec, job.plan)
    except ValueError as exc:
        notes.append(f"the probed {job.plan.kind} layout is not usable ({exc}): estimated as one device's memory")
        return run_estimate(arch, spec), None
    who = f"rank {job.rank} of {job.world_size}" if job.rank is not None and job.world_size else "one rank"
    notes.append(f"per-rank estimate for {who} ({role.role}), {job.plan.kind} as the probe read it")
    return role.estimate, job.plan


def compare_process(
    process: ProcessEstimate,
    samples: Sequence[ProbeSample],
    processes: Sequence[ProcessSample] = (),
    phase_marks: Sequence[PhaseMark] = (),
    published_params: object = None,
    phase_peaks: Sequence[PhasePeak] = (),
) -> ComparisonResult:
    """Predicted vs measured for one process, from its samples.

    Args:
        process: its estimate (``process.estimate`` must not be None).
        samples: the probe's samples of ``process.pid``.
        processes: NVML per-process samples (NVML used) of that process, optional.
        phase_marks: the probe's phase marks, to name the measured peak's phase.
        published_params: the probe's ``total_params``; a count that differs from the
            estimator's by more than 0.1 % adds a note (the config is not the model that ran).
        phase_peaks: the probe's per-phase high-water marks (any PIDs): part of the measured
            peak, and listed per step in the result.

    Raises:
        ComparisonError: no estimate (the message is ``process.problem``) or nothing measured.
    """
    if process.estimate is None:
        raise ComparisonError(process.problem or f"pid {process.pid}: no estimate")
    result = compare(
        process.estimate, samples, processes, pid=process.pid, phase_marks=phase_marks, phase_peaks=phase_peaks
    )
    return _with_process_notes(result, process, published_params)


class NoPrediction(ComparisonError):
    """A probed process was measured but has no estimate (e.g. the probe published no model
    config): the message is why; ``summary`` is what was measured, for :func:`measured_only`."""

    def __init__(self, message: str, summary: ProbedSummary) -> None:
        super().__init__(message)
        self.summary = summary


def compare_summary(process: ProcessEstimate, summary: ProbedSummary, limit_bytes: int | None = None,
                    no_limit: str = NO_LIMIT) -> ComparisonResult:
    """Predicted vs measured for one process from what was measured of it so far: what both
    the pane and ``gpumem-tui compare`` show (:mod:`gpumem_tui.telemetry.probed_state`).
    ``limit_bytes``: the time-to-OOM's limit (:func:`gpumem_tui.analysis.forecast.forecast`), or None
    (``no_limit``: the reason then).

    Raises:
        NoPrediction: no estimate (the message is ``process.problem``) but something measured.
        ComparisonError: nothing measured.
    """
    if process.estimate is None:
        raise NoPrediction(process.problem or f"pid {process.pid}: no estimate", summary)
    result = compare_record(process.estimate, summary.record, limit_bytes, no_limit)
    published = dict(summary.info.setup).get("total_params") if summary.info is not None else None
    return _with_process_notes(result, process, published)


def _with_process_notes(result: ComparisonResult, process: ProcessEstimate, published_params: object) -> ComparisonResult:
    """``result`` with the notes about the process's estimate: a parameter count that differs
    from the probe's, and a CUDA context measured for this process.

    The probe counts ``numel`` of every parameter of the model that ran: with peft LoRA that
    includes the adapters (the estimate's ``trainable_params``), and bitsandbytes / GPTQ / AWQ
    weights are packed (a 4-bit ``Params4bit`` holds two values per byte), so a quantized
    model's count says nothing about its architecture and is not compared."""
    spec = process.spec
    counted = getattr(process.estimate, "total_params", None)
    quantized = spec is not None and (getattr(spec, "task", None) == "qlora" or getattr(spec, "quant", "none") != "none")
    if isinstance(published_params, int) and published_params > 0 and isinstance(counted, int) and not quantized:
        what = "parameters"
        if getattr(spec, "task", None) == "lora":  # get_peft_model adds the adapters to model.parameters()
            counted += process.estimate.trainable_params
            what = "parameters with the LoRA adapters"
        if abs(counted - published_params) > 0.001 * published_params:
            note = (
                f"the estimator counts {counted:,} {what}, the probed model has {published_params:,}: "
                "the architecture read from its config differs from the model that ran"
            )
            result = replace(result, notes=(*result.notes, note))
    if spec is not None and getattr(spec, "measured_context", None) is not None and process.source == SOURCE_PROBE:
        context = process.estimate.components_bytes.get("cuda_context")
        if isinstance(context, int):
            note = (f"the predicted CUDA context ({context / 2**20:.0f} MiB) is the one measured for this process "
                    "(NVML used - torch reserved while reserved held still), not the profile's figure")
            result = replace(result, notes=(*result.notes, note))
    return result


# --------------------------------------------------------------------------------------------
# From snapshots / a trace file


def compare_snapshots(snapshots: Iterable[Snapshot], pid: int | None = None,
                      limit_bytes: int | None = None) -> ComparisonResult:
    """Estimate from the probe's published setup and compare with its measured samples.

    The snapshots are folded one at a time (:class:`~gpumem_tui.telemetry.probed_state.ProbedProcesses`),
    so an iterator over a long trace is read in bounded memory. The spec's ``device`` is taken
    from where the probe measured (cpu or cuda), so the prediction includes the CUDA context
    exactly when the measurement can.

    Args:
        snapshots: a recorded or live series; the last ``ProbeInfo`` of the process is used.
        pid: the probed process; default: the only one that published a ``ProbeInfo``.
        limit_bytes: the time-to-OOM's limit in the measured figure, or None.

    Raises:
        NoPrediction: the process was measured but has no estimate (inputs the estimator
            cannot use: one line, names the field); :func:`measured_only` reports it.
        ComparisonError: no probed process, several without ``pid``, no samples.
    """
    state = ProbedProcesses()  # the same state the dashboard keeps while it runs
    for snap in snapshots:
        state.add_snapshot(snap)
    return compare_probed(state, pid, limit_bytes)


def compare_probed(state: ProbedProcesses, pid: int | None = None,
                   limit_bytes: int | None = None) -> ComparisonResult:
    """:func:`compare_snapshots` on the state the snapshots were folded into.

    Raises:
        ComparisonError: as :func:`compare_snapshots`.
    """
    infos = state.infos()
    sampled = state.sampled_pids()
    probed = sorted(infos) or sampled
    if pid is None:
        if not probed:
            raise ComparisonError("no probed process in the trace (run the job with gpumem_tui.probe)")
        if len(probed) > 1:
            raise ComparisonError(f"several probed processes {probed}: choose one with --pid")
        pid = probed[0]
    info = infos.get(pid)
    if info is None:
        if pid not in sampled:
            listed = ", ".join(map(str, probed)) or "none"
            raise ComparisonError(f"pid {pid} is not in the trace (probed processes: {listed})")
        raise ComparisonError(f"pid {pid} published no model/setup information (ProbeInfo)")
    summary = state.summary(pid)
    if summary is None or not summary.record.sample_count:
        raise ComparisonError(f"no probe samples for pid {pid}: nothing measured to compare with")
    process = from_probe_info(info, device=summary.record.device, measured_context=summary.context)
    return compare_summary(process, summary, limit_bytes)


def measured_only(summary: ProbedSummary, problem: str, limit_bytes: int | None = None) -> dict[str, Any]:
    """What was measured of a process that has no prediction, in ``compare --json``'s keys:
    ``pid``, ``device``, ``measured_figure``, ``peak_measured_bytes`` (the samples' and the
    high-water marks' highest), ``samples``, ``steps``, the time-to-OOM's fields
    (:meth:`gpumem_tui.analysis.forecast.Forecast.to_json`), ``notes``, and ``no_prediction`` (why:
    ``problem``); ``predicted`` / ``measured`` / ``error_percent`` are empty."""
    record = summary.record
    kinds = record.device_kinds
    device = kinds[0] if len(kinds) == 1 else (record.device or "?")
    peak = max(record.peak_allocated or 0, record.highest_step or 0) if record.sample_count else None
    outlook = forecast(record.steps, limit_bytes)
    drift = outlook.drift
    notes = [] if drift is None else [f"the {drift.what} rises steadily: {drift.text()} (a leak?)"]
    return {
        "pid": record.pid, "device": device,
        "measured_figure": FIGURE_ALLOCATED if device == "cuda" else FIGURE_CPU_LIVE,
        "no_prediction": problem, "predicted": {}, "measured": {}, "error_percent": {},
        "peak_predicted_bytes": None, "peak_measured_bytes": peak, "samples": record.sample_count,
        "steps": [s.to_json() for s in record.steps], **outlook.to_json(), "notes": notes,
    }  # fmt: skip


def compare_trace(path: str | os.PathLike[str], pid: int | None = None, until: float | None = None,
                  limit_bytes: int | None = None) -> dict[str, Any]:
    """``gpumem-tui compare trace.jsonl --json``: the comparison of a recorded trace as JSON.

    The trace is streamed: indexed in one pass (:func:`gpumem_tui.telemetry.trace_file.scan_trace`),
    then read one record at a time, skipping what a replay skips (records out of time order,
    unreadable records). ``until``: only the records up to that many seconds after the first
    (what a replay at that position has passed). ``limit_bytes``: the time-to-OOM's limit.

    Returns :meth:`ComparisonResult.to_json` (or, for a process without a prediction,
    :func:`measured_only`) plus ``"trace_notices"`` (the reader's notices, e.g. a torn last
    line). All byte figures are ints; percentages are floats or null.

    Raises:
        TraceError: empty or non-JSON trace.
        ComparisonError: the trace has nothing measured to report (see :func:`compare_snapshots`).
        OSError: the file cannot be read.
    """
    from gpumem_tui.telemetry.trace_file import iter_snapshots, scan_trace

    scan = scan_trace(path)
    unreadable = [0, 0]  # records that failed to parse: how many, the first's line
    state = ProbedProcesses()  # the same state the dashboard keeps while it runs
    for snap in iter_snapshots(scan, until, unreadable):
        state.add_snapshot(snap)
    result = compare_folded(state, pid, limit_bytes)
    result["trace_notices"] = scan.notices_with_unreadable(*unreadable)
    check_finite(result)
    return result


def compare_folded(state: ProbedProcesses, pid: int | None = None, limit_bytes: int | None = None) -> dict[str, Any]:
    """:func:`compare_probed` as JSON (:meth:`ComparisonResult.to_json`), or
    :func:`measured_only` for a process measured without a prediction.

    Raises:
        ComparisonError: as :func:`compare_snapshots`.
    """
    try:
        return compare_probed(state, pid, limit_bytes).to_json()
    except NoPrediction as exc:
        return measured_only(exc.summary, str(exc), limit_bytes)


def check_finite(obj: Any) -> None:
    """JSON has no NaN/inf; a non-finite percentage would be a bug, not data."""
    if isinstance(obj, float) and not math.isfinite(obj):
        raise ComparisonError("internal error: non-finite number in the comparison")
    if isinstance(obj, dict):
        for value in obj.values():
            check_finite(value)
    elif isinstance(obj, list):
        for value in obj:
            check_finite(value)


def _with_box_context(user: ProcessEstimate, probed: ProcessEstimate) -> ProcessEstimate:
    """``user`` with the CUDA context measured for this process (``probed.spec``), when it
    lacks it or has an older figure. The context is a fact of the box, not a choice made in
    the pane: a user's estimate made before the context was measured must not keep the
    profile's figure while the probe's own estimate uses the measured one. Unchanged when
    there is nothing to carry or the estimator rejects the result."""
    context = getattr(probed.spec, "measured_context", None)
    spec = user.spec
    if (context is None or spec is None or user.architecture is None or getattr(spec, "device", None) != "cuda"
            or getattr(spec, "measured_context", None) == context):
        return user
    from gpumem_tui.estimator.estimate import estimate as run_estimate

    spec = replace(spec, measured_context=context)
    try:
        return replace(user, spec=spec, estimate=run_estimate(user.architecture, spec))
    except ValueError:  # SpecError / ArchitectureError: keep what the pane computed
        return user


def _labelled(user: ProcessEstimate, probed: ProcessEstimate | None) -> ProcessEstimate:
    """``user`` with its what-if changes against ``probed`` (the job's estimate) and its label."""
    changes = what_if_changes(probed, user.architecture, user.spec, user.model) if probed is not None else ()
    if changes:
        label = f"what-if on pid {user.pid}: {', '.join(changes)}"
        label = label if len(label) <= 120 else label[:119] + "…"
    else:
        label = f"{user.model or 'model'} (set by you, pid {user.pid})"
    return replace(user, what_if=changes, label=label)


class ProcessEstimates:
    """The registry of per-PID estimates that the dashboard keeps (one per PID).

    ``update_probe`` is called for every ProbeInfo seen; it rebuilds a ``"probe"`` estimate
    only when the ProbeInfo's content (or the measuring device) changed, and never replaces
    an estimate the user set. ``set_user`` records the pane's estimate for a PID.
    """

    def __init__(self) -> None:
        self._by_pid: dict[int, ProcessEstimate] = {}
        self._probed: dict[int, ProcessEstimate] = {}

    def get(self, pid: int | None) -> ProcessEstimate | None:
        """The PID's estimate (the user's if set, else the probe's), or None."""
        return None if pid is None else self._by_pid.get(pid)

    def probe_estimate(self, pid: int) -> ProcessEstimate | None:
        """The estimate built from the PID's ProbeInfo, even when the user set another."""
        return self._probed.get(pid)

    def update_probe(self, info: ProbeInfo, device: str | None = None,
                     measured_context: int | None = None) -> ProcessEstimate:
        """Record ``info`` (see the class docstring; ``measured_context`` as in
        :func:`from_probe_info`); returns the PID's current estimate."""
        key = _info_key(info, device, measured_context)
        current = self._probed.get(info.pid)
        if current is None or current.info_key != key:
            current = from_probe_info(info, device, measured_context)
            self._probed[info.pid] = current
            shown = self._by_pid.get(info.pid)
            if shown is None or shown.source != SOURCE_USER:
                self._by_pid[info.pid] = current
            else:
                self._by_pid[info.pid] = _labelled(_with_box_context(shown, current), current)
        return self._by_pid[info.pid]

    def set_user(self, pid: int, architecture: Any, spec: Any, estimate: Any, model: str) -> ProcessEstimate:
        """The user set this PID's estimate in the pane; ``model`` names the model chosen.

        On a probed PID it is a what-if: its ``what_if`` lists the settings that differ from
        the job's (:func:`what_if_changes`) and its label says so, e.g. ``"what-if on pid
        1088: batch 8 (job: 4)"``. Setting exactly the probe's own architecture and spec goes
        back to the probe's value; setting the estimate it already has changes nothing.
        """
        probed = self._probed.get(pid)
        if probed is not None and probed.estimate is not None and (probed.architecture, probed.spec) == (architecture, spec):
            self._by_pid[pid] = probed
            return probed
        current = self._by_pid.get(pid)
        if current is not None and current.source == SOURCE_USER and (current.architecture, current.spec) == (architecture, spec):
            return current
        value = ProcessEstimate(pid, SOURCE_USER, "", architecture, spec, estimate, model=printable(model, limit=48))
        if probed is not None:
            value = _with_box_context(value, probed)
        self._by_pid[pid] = value = _labelled(value, probed)
        return value

    def clear_user(self, pid: int) -> None:
        """Drop the user's estimate of ``pid`` (the probe's, if any, is shown again)."""
        if pid in self._probed:
            self._by_pid[pid] = self._probed[pid]
        else:
            self._by_pid.pop(pid, None)

    def keep_probes(self, probed: Iterable[int]) -> None:
        """Forget the probe's estimates of PIDs not in ``probed`` (a replay went back to before
        their ProbeInfo, or the state let an old PID go); an estimate the user set stays."""
        keep = set(probed)
        for pid in [p for p in self._probed if p not in keep]:
            del self._probed[pid]
            shown = self._by_pid.get(pid)
            if shown is not None and shown.source == SOURCE_PROBE:
                del self._by_pid[pid]

    def prune(self, alive: Iterable[int]) -> None:
        """Forget PIDs not in ``alive`` (a reused PID must not inherit an estimate)."""
        keep = set(alive)
        for table in (self._by_pid, self._probed):
            for pid in [p for p in table if p not in keep]:
                del table[pid]

    def pids(self) -> list[int]:
        """PIDs that have an estimate, sorted."""
        return sorted(self._by_pid)
