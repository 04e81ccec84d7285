"""The estimator / comparison side pane: mounts the panel helper's widgets and wires them.

Kept apart from app.py so the dashboard still runs (without the pane) if the estimator widgets
cannot be imported. Wiring, all driven from the app's handlers:

- the selected GPU's total memory -> ``EstimatorPanel.set_gpu_total`` (only when it changes);
- a probed process, when it becomes the selection (or first publishes its ProbeInfo) ->
  ``EstimatorPanel.apply_probe_info`` once, so the user can override the form afterwards;
- ``EstimatorPanel.EstimateChanged`` -> the chart's predicted bands (handled in app.py);
- the estimate + the selected probed process's samples -> ``ComparisonView``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpumem_tui.ui.app import GpuMemApp


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
    from textual.containers import Vertical
    from textual.widgets import TabbedContent, TabPane

    from gpumem_tui.ui.comparison_view import ComparisonView
    from gpumem_tui.ui.estimator_panel import EstimatorPanel

    class SidePane(Vertical):
        """Tabs: the estimator form and the predicted-vs-measured table."""

        def compose(self):  # noqa: ANN202
            with TabbedContent(id="side-tabs"):
                with TabPane("Estimator", id="tab-estimator"):
                    yield EstimatorPanel(id="estimator")
                with TabPane("Predicted vs measured", id="tab-comparison"):
                    yield ComparisonView(id="comparison")

    return SidePane(id="side")


class PaneState:
    """What was last pushed to the pane, so each push happens only on a change."""

    def __init__(self) -> None:
        self.gpu: tuple[int | None, int | None] | None = None
        self.probe_applied: set[tuple[int, int]] = set()  # (pid, id of the ProbeInfo content)
        self.comparison_key: tuple[Any, ...] | None = None
        self.last_error: str | None = None


def _state(app: GpuMemApp) -> PaneState:
    state = getattr(app, "_pane_state", None)
    if state is None:
        state = PaneState()
        app._pane_state = state  # type: ignore[attr-defined]
    return state


def on_snapshot(app: GpuMemApp) -> None:
    """Push the current selection to the pane (no-op without it); never raises."""
    if not app.has_side_pane:
        return
    try:
        _push(app)
    except Exception as exc:  # noqa: BLE001 -- the pane must not take the dashboard down
        message = f"estimator pane: {type(exc).__name__}: {exc}"
        state = _state(app)
        if state.last_error != message:
            state.last_error = message
            app.notify(message, title="Estimator", severity="error", markup=False)


def _push(app: GpuMemApp) -> None:
    from gpumem_tui.ui.comparison_view import ComparisonView
    from gpumem_tui.ui.estimator_panel import EstimatorPanel

    base = app.screen_stack[0]
    try:
        panel = base.query_one(EstimatorPanel)
        view = base.query_one(ComparisonView)
    except Exception:  # noqa: BLE001 -- not mounted yet
        return
    state = _state(app)
    gpu = app.selected_gpu()
    total = app.device_total(gpu)
    if state.gpu != (gpu, total):
        state.gpu = (gpu, total)
        name = app.device_name(gpu)
        label = f"GPU {gpu}" + (f" {name}" if name else "") if gpu is not None else None
        panel.set_gpu_total(total, label)
    pid = app.chart_pid()
    if pid is not None:
        info = app.probe_infos.get(pid)
        if info is not None:
            key = (pid, hash(repr((info.model_config, info.setup))))
            if key not in state.probe_applied:
                state.probe_applied.add(key)
                problem = panel.apply_probe_info(info, device=app.probe_devices.get(pid))
                if problem:
                    app.notify(problem, title=f"Estimator (PID {pid})", severity="warning", markup=False)
    update_comparison(app, panel, view, pid)


def update_comparison(app: GpuMemApp, panel: Any, view: Any, pid: int | None) -> None:
    """Recompute predicted vs measured for ``pid`` with the panel's current estimate."""
    state = _state(app)
    if pid is None or not app.probe_samples.get(pid):
        key: tuple[Any, ...] = ("none", pid)
        if state.comparison_key != key:
            state.comparison_key = key
            view.update_comparison(None, "select a process that runs gpumem_tui.probe to compare")
        return
    if panel.estimate is None:
        key = ("noest", pid)
        if state.comparison_key != key:
            state.comparison_key = key
            view.update_comparison(None, "the estimator has no valid estimate yet")
        return
    samples = app.probe_samples[pid]
    peaks = list(app.phase_peaks.get(pid, ()))  # the probe's high-water marks: part of the peak
    key = ("cmp", pid, id(panel.estimate), len(samples), samples[-1].time, len(peaks))
    if state.comparison_key == key:
        return
    state.comparison_key = key
    from gpumem_tui.comparison import ComparisonError, compare

    processes = [p for p in app.snapshot.processes if p.pid == pid] if app.snapshot else []
    try:
        result = compare(panel.estimate, list(samples), processes, pid=pid,
                         phase_marks=list(app.phase_marks.get(pid, ())), phase_peaks=peaks)
    except ComparisonError as exc:
        view.update_comparison(None, str(exc))
        return
    except Exception as exc:  # noqa: BLE001 -- a comparison bug must not kill the dashboard
        view.update_comparison(None, f"comparison failed: {type(exc).__name__}: {exc}")
        return
    view.update_comparison(result)
