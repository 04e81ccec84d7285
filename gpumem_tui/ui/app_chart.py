"""What the dashboard's chart shows (mixed into :class:`gpumem_tui.ui.app.GpuMemApp`).

The chart follows a target, ``("gpu", index)`` or ``("proc", pid)``: a GPU's NVML used, or a
process's curves (torch allocated / reserved from its probe, NVML used), with its phase marks
and high-water marks and the predicted bands of its estimate
(:func:`gpumem_tui.ui.side_pane.predicted_bands`). Also the lookups the status line and the
side pane share: the charted PID, the selected GPU, a GPU's total and name.
"""

from __future__ import annotations

from gpumem_tui.support.text import printable
from gpumem_tui.telemetry.model import PhaseMark, Snapshot
from gpumem_tui.ui.memory_chart import Band, CurveSpec


class DashboardChart:
    """The chart of :class:`gpumem_tui.ui.app.GpuMemApp` (a mixin: it uses the app's widgets,
    history and per-PID stores)."""

    def _init_chart_state(self, chart_window: float) -> None:
        """Nothing charted yet; ``chart_window`` seconds of history once there is."""
        self.chart_target: tuple[str, int] | None = None
        self.chart_window = chart_window
        self.bands: list[Band] = []  # the predicted bands drawn now (of the charted process)
        self._charted_target: tuple[str, int] | None = None
        self._charted_time = 0.0
        self._highlighted_key: str | None = None  # the table row that chose the target

    def device_total(self, index: int | None) -> int | None:
        """Total memory (bytes) of GPU ``index`` in the latest snapshot, or None."""
        if self.snapshot is None or index is None:
            return None
        for dev in self.snapshot.devices:
            if dev.index == index:
                return dev.memory_total_bytes
        return None

    def device_name(self, index: int | None) -> str | None:
        """Printable name of GPU ``index``, or None."""
        if self.snapshot is None or index is None:
            return None
        for dev in self.snapshot.devices:
            if dev.index == index and dev.name:
                return printable(dev.name, 40)
        return None

    def chart_pid(self) -> int | None:
        """PID the chart shows, else the selected process's PID."""
        if self.chart_target and self.chart_target[0] == "proc":
            return self.chart_target[1]
        proc = self.table.selected
        return proc.pid if proc is not None else None

    def selected_gpu(self) -> int | None:
        """The GPU the chart/estimator refer to: the selected process's, else the panel's."""
        table = self.table
        proc = table.selected
        if self.chart_target and self.chart_target[0] == "gpu":
            return self.chart_target[1]
        if proc is not None and proc.device_index is not None:
            return proc.device_index
        return self.device_panel.selected_index

    def _update_chart(self, throttle: bool = False) -> None:
        chart = self.chart
        snap = self.snapshot
        target = self.chart_target
        if throttle and snap is not None and target == self._charted_target:
            # A new sample moves the curve by less than one character cell until
            # seconds_per_cell have passed: redrawing sooner costs CPU and shows nothing new.
            # Once samples stop coming (a finished or paused replay repeats its last one) the
            # skipped ones are drawn, so the curve does not end short of the newest sample.
            settled = snap.time == self._previous_snapshot_time and self._charted_time < snap.time
            if snap.time - self._charted_time < chart.seconds_per_cell() and not settled:
                return
        self._charted_target = target
        self._charted_time = snap.time if snap is not None else 0.0
        chart.set_message(None)
        if snap is None or target is None:
            chart.set_series([], None)
            chart.set_message("no process matches the filter · esc clears" if self.filter_hides_all
                              else "no GPU or process selected")
            chart.replot()
            return
        kind, ident = target
        curves: list[CurveSpec] = []
        marks: list[PhaseMark] = []
        total: int | None = None
        if kind == "gpu":
            curves.append(CurveSpec("NVML used", self.history.points(("gpu", ident)), "curve-measured"))
            total = self.device_total(ident)
            chart.set_title(f"GPU {ident}: memory used (NVML)")
        else:
            proc = next((p for p in snap.processes if p.pid == ident), None)
            device = self.probe_devices.get(ident)
            probe_alloc = self.history.points(("probe", ident, "allocated"))
            if probe_alloc:
                label = "torch allocated" if device and device.startswith("cuda") else "live tensors (CPU tracker)"
                curves.append(CurveSpec(label, probe_alloc, "curve-measured"))
                reserved = self.history.points(("probe", ident, "reserved"))
                if reserved:
                    curves.append(CurveSpec("torch reserved", reserved, "curve-reserved"))
            nvml = self.history.points(("proc", ident))
            if nvml:
                curves.append(CurveSpec("NVML used", nvml, "curve-measured" if not probe_alloc else "curve-nvml"))
            if proc is not None:
                total = self.device_total(proc.device_index)
            marks = list(self.phase_marks.get(ident, ()))
            # a title has no room for printable's "(N bytes)" note: cut with an ellipsis only
            name = printable((proc.command if proc else None) or "", 4096)
            name = name if len(name) <= 60 else name[:59] + "…"
            where = f"GPU {proc.device_index}" if proc is not None and proc.device_index is not None else "host"
            chart.set_title(f"PID {ident} ({where}) {name}".rstrip())
            if not curves:
                chart.set_message(self._no_curve_reason(ident, snap))
        chart.set_series(curves, snap.time)
        chart.set_total(total, "GPU total")
        chart.set_phase_marks(marks)
        chart.set_phase_peaks(self.phase_peaks.get(ident, ()) if kind == "proc" else ())
        process = self.process_estimates.get(ident) if kind == "proc" else None
        from gpumem_tui.ui.side_pane import predicted_bands  # on first use: not in the first frame

        self.bands, note = predicted_bands(kind, ident, process)
        chart.set_bands(self.bands, note)  # replots

    @staticmethod
    def _no_curve_reason(pid: int, snap: Snapshot) -> str:
        """Why PID ``pid`` has no curve: no NVML at all, or NVML gives no figure for it."""
        if snap.nvml_error:
            return f"no NVML ({printable(snap.nvml_error, 40)}): no GPU memory to chart for PID {pid}"
        return f"PID {pid}: no memory figure to chart (NVML reports none for it)"
