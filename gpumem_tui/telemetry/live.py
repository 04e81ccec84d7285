"""The live telemetry source: NVML + psutil + probe streams merged into one Snapshot per poll.

- With NVML: every GPU and every process on it (compute, graphics, MPS), each enriched with
  host details; processes that run the project's probe but hold no GPU memory (CPU jobs)
  are added as ``ProcessType.HOST`` rows so they can be selected.
- Without NVML (no driver, no library): ``Snapshot.nvml_error`` carries the NVML error text,
  ``devices`` is empty, and the host processes this user can see (plus every probed PID) are
  listed as HOST rows -- at most ``host_limit``, the largest RSS first.

Headless: imports psutil, pynvml (lazily, in :class:`NvmlSource`) and the probe reader;
never Textual or torch.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from gpumem_tui.telemetry.host import HostEnricher
from gpumem_tui.telemetry.model import ProcessSample, ProcessStatus, ProcessType, Snapshot
from gpumem_tui.telemetry.nvml import NvmlSource


class LiveSource:
    """TelemetrySource for this machine. ``poll()`` blocks for I/O and never raises for data.

    Args:
        probe_dir: where probe streams are read (default: the probe reader's default
            directory, ``$GPUMEM_TUI_PROBE_DIR`` or the user cache dir).
        nvml: an :class:`NvmlSource` (tests); default creates one (imports pynvml, nvmlInit).
        host: a :class:`HostEnricher` (tests); default detects containers itself.
        host_limit: most host rows listed without NVML.
        host_scan_seconds: how often the list of host PIDs is rebuilt without NVML (the rows
            themselves are refreshed every poll).
        probes: False disables the probe reader.
        probe_source: an object with ``poll() -> ProbeReading`` and ``close()`` to use
            instead of the default ``ProbeSource`` (tests, replays).
    """

    def __init__(self, probe_dir: Path | str | None = None, *, nvml: NvmlSource | None = None,
                 host: HostEnricher | None = None, host_limit: int = 200, host_scan_seconds: float = 2.0,
                 probes: bool = True, probe_source: Any = None) -> None:
        self._nvml = nvml if nvml is not None else NvmlSource()
        self._host = host if host is not None else HostEnricher()
        self._host_limit = host_limit
        self._host_scan_seconds = host_scan_seconds
        self._host_pids: list[int] = []
        self._host_scan_at = float("-inf")
        self._probe: Any = None
        self._notices: list[str] = []
        if probe_source is not None:
            self._probe = probe_source
        elif probes:
            try:
                from gpumem_tui.telemetry.probe_source import ProbeSource
            except ImportError as exc:  # the probe reader is optional for the rest to work
                self._notices.append(f"probe streams are not read: {exc}")
            else:
                try:
                    self._probe = ProbeSource(probe_dir) if probe_dir is not None else ProbeSource()
                except Exception as exc:
                    self._notices.append(f"probe streams are not read: {type(exc).__name__}: {exc}")

    @property
    def nvml_available(self) -> bool:
        """True when NVML initialised (there is a driver and at least the library)."""
        return self._nvml.available

    @property
    def nvml_error(self) -> str | None:
        """The NVML init error text, or None."""
        return self._nvml.error

    def poll(self) -> Snapshot:
        """One merged reading of NVML, host and probes. Never raises for data it reads."""
        now = time.time()
        notices = self._notices
        self._notices = []
        reading = self._nvml.poll()
        notices.extend(reading.notices)

        probes, infos, marks, peaks = (), (), (), ()
        if self._probe is not None:
            try:
                pr = self._probe.poll()
                probes, infos, marks = pr.probes, pr.probe_infos, pr.phase_marks
                peaks = getattr(pr, "phase_peaks", ())  # a reader of older probes has none
                notices.extend(pr.notices)
            except Exception as exc:  # a reader bug must not stop GPU monitoring
                notices.append(f"probe streams could not be read: {type(exc).__name__}: {exc}")
        probed = {p.pid for p in probes} | {i.pid for i in infos if not i.ended}

        if reading.error is None:
            processes = self._host.enrich(reading.processes, from_nvml=True)
            on_gpu = {p.pid for p in processes}
            extra = [ProcessSample(pid=pid, device_index=None, type=ProcessType.HOST)
                     for pid in sorted(probed - on_gpu)]
            if extra:
                processes += [p for p in self._host.enrich(extra, from_nvml=False)
                              if p.status is not ProcessStatus.EXITED]
        else:
            processes = self._host_rows(probed)
        notices.extend(self._host.take_notices())
        return Snapshot(
            time=now,
            driver_version=reading.driver_version,
            cuda_driver_version=reading.cuda_driver_version,
            nvml_error=reading.error,
            devices=reading.devices,
            processes=tuple(processes),
            probes=tuple(probes),
            probe_infos=tuple(infos),
            phase_marks=tuple(marks),
            phase_peaks=tuple(peaks),
            notices=tuple(notices),
        )

    def _host_rows(self, probed: set[int]) -> list[ProcessSample]:
        mono = time.monotonic()
        if mono - self._host_scan_at >= self._host_scan_seconds:
            self._host_scan_at = mono
            rows = self._host.host_processes(extra_pids=probed, limit=self._host_limit)
            self._host_pids = [r.pid for r in rows]
            return rows
        pids = list(dict.fromkeys([*sorted(probed), *self._host_pids]))
        rows = self._host.enrich([ProcessSample(pid=p, device_index=None, type=ProcessType.HOST) for p in pids],
                                 from_nvml=False)
        return [r for r in rows if r.status is not ProcessStatus.EXITED][: max(self._host_limit, len(probed))]

    def close(self) -> None:
        """Release NVML and the probe reader."""
        self._nvml.close()
        if self._probe is not None:
            try:
                self._probe.close()
            except Exception:
                pass
