"""Per-step high-water marks of a probed job, and a steady rise of them (a leak).

Headless: pure Python over :class:`~gpumem_tui.telemetry.model.PhasePeak` records (no Textual,
no torch). Used by ``compare`` (the ``steps`` field of ``--json``), the chart's envelope and the
process table's drift flag, so all of them read the same figures.

Memory is in bytes: the probe's figure (torch allocated on CUDA, the tracker's live tensor
bytes on the CPU).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gpumem_tui.telemetry.model import Phase, PhasePeak

# Steps left out of the drift fit: the first step creates the optimizer states and the
# second is the first with gradients and states alive from the start, so both are lower than
# the steady state by design, not by a leak.
WARMUP_STEPS = 2
MIN_DRIFT_STEPS = 8  # fewer steps than this after the warm-up: no verdict
MIN_FIT = 0.8  # R^2 of the straight line: a steady rise, not one jump or noise
MIN_RISE_BYTES = 1 << 20  # total rise over the fitted steps: at least 1 MiB ...
MIN_RISE_FRACTION = 0.005  # ... and 0.5 % of the highest peak
FIT_WINDOW = 256  # the last steps fitted: the recent rate is the one that runs out the memory


@dataclass(frozen=True, slots=True)
class StepPeak:
    """One training step's high-water mark: ``peak_bytes`` = the highest of ``phase_peaks``
    (phase name -> bytes). ``steps`` > 1 when the probe folded fast steps into this record.
    ``left_bytes``: the memory the step left behind (the probe's figure at the end of its
    optimizer step), None when the probe did not report it. ``end``: when the step's last
    phase ended (epoch seconds; the forecast's seconds per step), None when not known."""

    step: int
    peak_bytes: int
    phase_peaks: tuple[tuple[str, int], ...]
    steps: int = 1
    left_bytes: int | None = None
    end: float | None = None  # epoch seconds the step's last phase ended (None: not known)

    def to_json(self) -> dict[str, object]:
        """``{"step", "peak_bytes", "phase_peaks": {phase: bytes}}`` (+ ``"steps"`` when folded,
        ``"left_bytes"`` when known)."""
        out: dict[str, object] = {"step": self.step, "peak_bytes": self.peak_bytes,
                                  "phase_peaks": dict(self.phase_peaks)}
        if self.steps > 1:
            out["steps"] = self.steps
        if self.left_bytes is not None:
            out["left_bytes"] = self.left_bytes
        return out


@dataclass(frozen=True, slots=True)
class Drift:
    """A steady rise of per-step memory: ``bytes_per_step`` (least-squares slope) over
    ``steps`` steps (``first_step``..``last_step``), with ``fit`` its R^2."""

    bytes_per_step: float
    steps: int
    first_step: int
    last_step: int
    fit: float
    what: str = "per-step peak"

    def text(self) -> str:
        """``"+12 MiB per step over 40 steps"`` (binary MiB)."""
        mib = self.bytes_per_step / (1 << 20)
        figure = f"{mib:.1f}" if abs(mib) < 10 else f"{mib:.0f}"
        return f"+{figure} MiB per step over {self.steps} steps"


def step_peaks(peaks: Iterable[PhasePeak], pid: int | None = None) -> list[StepPeak]:
    """Group phase high-water marks by step (step order); a phase seen twice in one step
    (a re-sent record) keeps its highest value. ``pid`` filters when given."""
    by_step: dict[int, dict[str, int]] = {}
    folded: dict[int, int] = {}
    left: dict[int, int] = {}
    ends: dict[int, float] = {}
    for p in peaks:
        if pid is not None and p.pid != pid:
            continue
        phases = by_step.setdefault(p.step, {})
        name = p.phase.value
        phases[name] = max(phases.get(name, 0), p.peak_bytes)
        folded[p.step] = max(folded.get(p.step, 1), p.steps)
        ends[p.step] = max(ends.get(p.step, p.end), p.end)
        if p.phase is Phase.OPTIMIZER_STEP and p.end_bytes is not None:
            left[p.step] = p.end_bytes
    return [
        StepPeak(step, max(phases.values()), tuple(phases.items()), folded[step], left.get(step),
                 ends.get(step))
        for step, phases in sorted(by_step.items())
    ]


def step_drift(steps: Sequence[StepPeak]) -> Drift | None:
    """A leak's sign in ``steps``: a steady rise of the per-step peak, else of the memory left
    after each step (:func:`detect_drift` on each). The second catches a leak that the peak
    hides in its noise (tensors kept across steps are a larger share of what a step leaves
    than of its peak)."""
    return step_drift_fit(steps)[0]


def step_drift_fit(steps: Sequence[StepPeak]) -> tuple[Drift | None, str | None]:
    """:func:`step_drift` with the reason there is none: ``(drift, None)`` or ``(None,
    reason)``; the reason is the per-step peak's (:func:`fit_drift`)."""
    drift, reason = fit_drift([(s.step, s.peak_bytes) for s in steps])
    if drift is None:
        left = [(s.step, s.left_bytes) for s in steps if s.left_bytes is not None]
        drift = fit_drift(left, what="memory left after each step")[0]
    return drift, None if drift is not None else reason


def detect_drift(series: Sequence[tuple[int, int]], what: str = "per-step peak") -> Drift | None:
    """A steady rise in ``(step, bytes)`` pairs, or None (:func:`fit_drift` without its reason)."""
    return fit_drift(series, what)[0]


def fit_drift(series: Sequence[tuple[int, int]], what: str = "per-step peak") -> tuple[Drift | None, str | None]:
    """A steady rise in ``(step, bytes)`` pairs: ``(Drift, None)``, or ``(None, reason)`` with
    one of "too few steps (5 of 8 needed)", "no drift", "fit too poor (R² 0.31)", "rise too
    small (0.2 MiB over 18 steps)".

    Method: ordinary least squares through the last :data:`FIT_WINDOW` points after
    :data:`WARMUP_STEPS` (at least :data:`MIN_DRIFT_STEPS` of them): slope ``b = Sxy / Sxx``,
    goodness of fit the coefficient of determination, for a straight line the squared
    correlation ``R² = Sxy² / (Sxx·Syy)`` (NIST/SEMATECH e-Handbook of Statistical Methods,
    section 4.1.4.1 "Linear least squares regression"). A rise is flagged when the line
    explains the points (R² >= :data:`MIN_FIT`: a poor fit is R² below 0.8, e.g. one jump or
    noise) and rises over them by at least :data:`MIN_RISE_BYTES` and
    :data:`MIN_RISE_FRACTION` of the highest value. A flat series (R² undefined) is no drift.
    """
    points = sorted(series)
    if points and points[0][0] <= 0:  # step 0 is the probe's init phase, not training
        points = [p for p in points if p[0] > 0]
    points = points[WARMUP_STEPS:][-FIT_WINDOW:]
    n = len(points)
    if n < MIN_DRIFT_STEPS:
        return None, f"too few steps ({n} of {MIN_DRIFT_STEPS} needed after {WARMUP_STEPS} warm-up steps)"
    xs = [float(s) for s, _ in points]
    ys = [float(b) for _, b in points]
    mean_x, mean_y = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mean_x) ** 2 for x in xs)
    syy = sum((y - mean_y) ** 2 for y in ys)
    if sxx == 0 or syy == 0:
        return None, "no drift"
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys))
    slope = sxy / sxx
    fit = sxy * sxy / (sxx * syy)
    rise = slope * (xs[-1] - xs[0])
    if slope <= 0:
        return None, "no drift"
    if fit < MIN_FIT:
        return None, f"fit too poor (R² {fit:.2f})"
    if rise < max(MIN_RISE_BYTES, MIN_RISE_FRACTION * max(ys)):
        return None, f"rise too small ({rise / (1 << 20):.1f} MiB over {n} steps)"
    return Drift(slope, n, int(xs[0]), int(xs[-1]), fit, what), None


__all__ = ["Drift", "StepPeak", "detect_drift", "fit_drift", "step_drift", "step_drift_fit", "step_peaks"]
