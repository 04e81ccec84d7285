"""The estimator / comparison side pane: the estimator form and predicted-vs-measured.

Kept apart from app.py so the dashboard still runs (without the pane) if the estimator widgets
cannot be imported. The app describes what is selected in a :class:`PaneSelection` and calls
:func:`push`; this module never imports the app. What is pushed:

- the selected GPU's total memory and the CUDA context measured on it ->
  ``EstimatorPanel.set_gpu_total`` (only when they change);
- the selected PID and its :class:`~gpumem_tui.analysis.process_estimate.ProcessEstimate` ->
  ``EstimatorPanel.show_process`` (the form shows that process's own estimate);
- the job's own estimate (from its probe) + what was measured of the process so far (a
  :class:`~gpumem_tui.telemetry.probed_state.ProbedSummary`) -> ``ComparisonView``, computed by
  :func:`gpumem_tui.analysis.process_estimate.compare_summary`, the code ``gpumem-tui compare`` runs. A
  user's what-if on a probed PID is not scored against the measurement (its settings are not
  the job's): the view shows it on a line of its own, with what differs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpumem_tui.telemetry.probed_state import ProbedSummary

if TYPE_CHECKING:  # the dashboard imports this module at start-up; the estimator loads on use
    from gpumem_tui.analysis.process_estimate import ProcessEstimate

NO_ESTIMATE_HINT = "attach gpumem_tui.probe to the job, or set its estimate in the Estimator tab (e)"


@dataclass(frozen=True)
class PaneSelection:
    """What the pane shows: the selected GPU and process, and that process's data.

    ``gpu_total`` is in bytes (None: no GPU). ``job`` is the estimate built from the process's
    probe (None: not probed; equal to ``process`` unless the user set a what-if). ``measured``
    is what was measured of the process so far (its probe's samples, marks and high-water
    marks, NVML used, its setup), None when it is not probed. ``gpu_context`` is the CUDA context
    after initialisation measured on the selected GPU from a probed job there (bytes, see
    :mod:`gpumem_tui.telemetry.measured_context`), or None. ``limit_bytes``: what the process's torch
    allocated may reach on its GPU now (:func:`gpumem_tui.analysis.forecast.snapshot_limit`), or None.
    """

    gpu: int | None = None
    gpu_total: int | None = None
    gpu_label: str | None = None
    pid: int | None = None
    process: ProcessEstimate | None = None
    job: ProcessEstimate | None = None
    measured: ProbedSummary | None = None
    gpu_context: int | None = None
    limit_bytes: int | None = None  # the time-to-OOM's limit: the GPU's free + the process's own


@dataclass
class PaneState:
    """What was last pushed to the pane, so each push happens only on a change."""

    gpu: tuple[int | None, int | None, int | None] | None = None
    comparison_key: tuple[Any, ...] | None = None
    last_error: str | None = field(default=None)


def available() -> bool:
    """True when the panel widgets import."""
    try:
        from gpumem_tui.ui import comparison_view, estimator_panel  # noqa: F401
    except ImportError:
        return False
    return True


def build() -> Any:
    """The side pane widget (id ``side``), or None when the panel widgets are not available."""
    if not available():
        return None
    from textual.widgets import TabbedContent, TabPane

    from gpumem_tui.ui.comparison_view import ComparisonView
    from gpumem_tui.ui.estimator_panel import EstimatorPanel
    from gpumem_tui.ui.plain_lines import KeptVertical

    class SidePane(KeptVertical):
        """Tabs: the estimator form and the predicted-vs-measured table."""

        def compose(self):  # noqa: ANN202
            with TabbedContent(id="side-tabs"):
                with TabPane("Estimator", id="tab-estimator"):
                    yield EstimatorPanel(id="estimator")
                with TabPane("Predicted vs measured", id="tab-comparison"):
                    yield ComparisonView(id="comparison")

    return SidePane(id="side")


def push(screen: Any, state: PaneState, selection: PaneSelection) -> str | None:
    """Show ``selection`` in the pane mounted on ``screen``; never raises.

    Returns:
        None, or a one-line error (new since the last push) for the app to show once.
    """
    try:
        _push(screen, state, selection)
    except Exception as exc:  # noqa: BLE001 -- the pane must not take the dashboard down
        message = f"estimator pane: {type(exc).__name__}: {exc}"
        if state.last_error != message:
            state.last_error = message
            return message
    return None


def _push(screen: Any, state: PaneState, sel: PaneSelection) -> None:
    from gpumem_tui.ui.comparison_view import ComparisonView
    from gpumem_tui.ui.estimator_panel import EstimatorPanel

    try:
        panel = screen.query_one(EstimatorPanel)
    except Exception:  # noqa: BLE001 -- not composed yet
        return
    if state.gpu != (sel.gpu, sel.gpu_total, sel.gpu_context):
        state.gpu = (sel.gpu, sel.gpu_total, sel.gpu_context)
        label = f"GPU {sel.gpu}" + (f" {sel.gpu_label}" if sel.gpu_label else "") if sel.gpu is not None else None
        panel.set_gpu_total(sel.gpu_total, label, measured_context=sel.gpu_context)
    panel.show_process(sel.pid, sel.process, sel.job)
    try:
        view = screen.query_one(ComparisonView)
    except Exception:  # noqa: BLE001 -- its tab is composed after the form's (EstimatorPanel.on_mount)
        return
    _update_comparison(view, state, sel)


def _update_comparison(view: Any, state: PaneState, sel: PaneSelection) -> None:
    from gpumem_tui.analysis.comparison import ComparisonError
    from gpumem_tui.analysis.forecast import NO_LIVE_LIMIT
    from gpumem_tui.analysis.process_estimate import NoPrediction, compare_summary

    pid, shown, measured = sel.pid, sel.process, sel.measured
    # The measurement is compared with the job's own estimate; a what-if is shown beside it.
    process = sel.job if shown is not None and shown.is_what_if and sel.job is not None else shown
    what_if = shown if process is not shown else None
    if pid is None or measured is None or not measured.record.sample_count:
        key: tuple[Any, ...] = ("none", pid)
        message = "select a process that runs gpumem_tui.probe to compare"
    elif process is None:
        key = ("noest", pid, measured.version, sel.limit_bytes)
        message = _measured_only_text(measured, f"PID {pid} has no estimate: {NO_ESTIMATE_HINT}", sel.limit_bytes)
    else:
        key = ("cmp", pid, id(process), id(what_if), measured.version, sel.limit_bytes)
        message = None
    if state.comparison_key == key:
        return
    state.comparison_key = key
    if message is not None or process is None or measured is None:
        view.update_comparison(None, message)
        return
    try:
        result = compare_summary(process, measured, sel.limit_bytes, NO_LIVE_LIMIT)
    except NoPrediction as exc:
        view.update_comparison(None, _measured_only_text(measured, f"no prediction: {exc}", sel.limit_bytes),
                               what_if=what_if_line(what_if, process))
        return
    except ComparisonError as exc:
        view.update_comparison(None, str(exc), what_if=what_if_line(what_if, process))
        return
    except Exception as exc:  # noqa: BLE001 -- a comparison bug must not kill the dashboard
        view.update_comparison(None, f"comparison failed: {type(exc).__name__}: {exc}")
        return
    view.update_comparison(result, title=process.label, what_if=what_if_line(what_if, process))


def what_if_line(what_if: ProcessEstimate | None, job: ProcessEstimate) -> str | None:
    """One line for the user's what-if beside the job's comparison, or None without one:
    what differs, its predicted peak and the job's (never an error against the measurement:
    the measured job ran with the job's settings)."""
    if what_if is None:
        return None
    from gpumem_tui.ui.memory_bar import estimate_peak
    from gpumem_tui.support.units import format_bytes

    changes = ", ".join(what_if.what_if)
    if what_if.estimate is None or job.estimate is None:
        return f"what-if {changes}: no estimate (press p for the job's)"
    mine, theirs = estimate_peak(what_if.estimate), estimate_peak(job.estimate)
    return (f"what-if {changes}: predicted peak {format_bytes(mine, precision=2)} vs "
            f"{format_bytes(theirs, precision=2)} with the job's settings (not compared with the "
            "measurement: the job ran with its own) · p: back to the job's estimate")


def _measured_only_text(measured: ProbedSummary, why: str, limit: int | None) -> str:
    """Why there is no prediction, then what was measured: the peak and the time-to-OOM."""
    from gpumem_tui.analysis.forecast import NO_LIVE_LIMIT, forecast
    from gpumem_tui.support.units import format_bytes

    record = measured.record
    peak = max(record.peak_allocated or 0, record.highest_step or 0)
    lines = [why, f"measured peak {format_bytes(peak)} over {record.sample_count} samples"]
    if record.steps:
        lines.append(f"time-to-OOM: {forecast(record.steps, limit, NO_LIVE_LIMIT).text()}")
    return "\n".join(lines)


def predicted_bands(kind: str, ident: int, process: ProcessEstimate | None) -> tuple[list[Any], str | None]:
    """The chart's predicted bands (gpumem_tui.ui.memory_bar.bands_from_estimate) for its
    target (``kind`` "proc" or "gpu", ``ident`` its PID or GPU index; ``process`` the PID's
    estimate) and the legend's note about them.

    Only a process's own estimate is drawn (its probe's, or the one the user set for it);
    a GPU holds other jobs too, so its chart shows none rather than one job's.
    """
    from gpumem_tui.ui.memory_bar import bands_from_estimate

    if kind != "proc":
        return [], "select a process to see its predicted bands"
    if process is None:
        return [], f"none for PID {ident}: {NO_ESTIMATE_HINT}"
    if process.estimate is None:
        return [], f"none, {process.problem or f'{process.label}: no estimate'}"
    return bands_from_estimate(process.estimate), process.label
