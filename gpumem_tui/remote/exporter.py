"""``gpumem-tui exporter``: the dashboard's telemetry as Prometheus metrics on ``/metrics``.

    gpumem-tui exporter [--listen 127.0.0.1:9835] [--interval S] [--probe-dir DIR] [--allow-remote]
                        [--allow-host NAME ...]

The main loop polls the same telemetry source as the dashboard
(:class:`gpumem_tui.telemetry.live.LiveSource`: NVML, host details, probe streams) every
``--interval`` seconds and keeps what it saw in an :class:`ExporterState`; a scrape only reads
that state (the HTTP server of :mod:`gpumem_tui.remote.exporter_http`: the text exposition of
:mod:`gpumem_tui.remote.exporter_text`, encoded once per poll, behind a Host check, timeouts and a
connection cap, answered in its own threads), so a slow NVML call never makes a scrape wait. Metrics (bytes, hertz, watts, degrees Celsius, ratios 0-1;
the GPU and process series are listed in :mod:`gpumem_tui.remote.exporter_series`, beside
dcgm-exporter's names in ``docs/exporter.md``):

- per GPU (labels ``gpu``, ``uuid``, ``name``): memory used / total / free, utilization,
  memory utilization, temperature, power and power limit, clocks, fan, PCIe and NVLink
  throughput, MIG mode; a figure NVML could not read is left out (never a made-up 0);
- per process (labels ``gpu``, ``uuid``, ``pid``, ``user``, ``command`` cut to
  :data:`COMMAND_LIMIT` characters, MIG ``gpu_instance`` / ``compute_instance``): NVML used
  memory, SM and memory-bandwidth utilization; per PID host CPU (ratio of a core) and RSS;
  only the processes of the last poll, so ended processes drop out and the label set stays
  bounded;
- for probed processes (labels ``pid``): ``gpumem_probe_measured_peak_bytes`` (the highest
  torch allocated / live-tensor figure the probe reported, high-water marks included),
  ``gpumem_probe_predicted_peak_bytes`` (the estimator's peak for the probe's own setup, the
  same :class:`~gpumem_tui.analysis.process_estimate.ProcessEstimate` the dashboard draws: NVML-used
  scope on CUDA), ``gpumem_probe_prediction_available`` (1 / 0: 0 when the probe published no
  model config or a setup the estimator cannot use), ``gpumem_probe_step``, and
  ``gpumem_probe_phase{phase="backward"} 1``; when its per-step peak rises steadily,
  ``gpumem_probe_drift_bytes_per_step`` and ``gpumem_process_seconds_to_oom`` (labels ``gpu``,
  ``uuid``, ``pid``): the seconds until it reaches the GPU's free memory + its own
  (:mod:`gpumem_tui.analysis.forecast`; each left out when there is no such figure);
- ``gpumem_exporter_nvml_up`` (0 without a driver: the exporter still serves),
  ``gpumem_exporter_poll_duration_seconds`` (its own last good poll) and
  ``gpumem_exporter_poll_errors_total`` (polls that raised: the series above keep the last good
  poll's data, and the exporter goes on polling).

Binding to anything but loopback needs ``--allow-remote``: the metrics name users and commands.
A request is answered only when its ``Host`` header names this server (DNS rebinding: a web
page cannot read the metrics through a name of its own that resolves to 127.0.0.1):
``localhost``, ``127.0.0.1``, ``[::1]`` or the listen address, with or without the port; with
``--allow-remote`` also this machine's host name and IP addresses; and any name given with
``--allow-host`` (a DNS alias, a reverse proxy). Any other gets 403. Each connection may wait
at most 5 s per read and last 15 s; at most 16 are served at once, more get 503.
Exit codes: 0 on Ctrl-C / SIGTERM, 2 bad input or a port that cannot be bound (one line).
"""

from __future__ import annotations

import argparse
import ipaddress
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpumem_tui.support.cli_support import InputError, OneLineParser, positive_seconds
from gpumem_tui.remote.exporter_http import HostPolicy, host_name, serve_metrics
from gpumem_tui.remote.exporter_series import (
    COMMAND_LIMIT,
    gpu_families,
    forecast_families,
    forecasts,
    probe_families,
    process_families,
)
from gpumem_tui.remote.exporter_text import MetricsApp, TextEncoder
from gpumem_tui.telemetry.probed_state import ProbedProcesses
from gpumem_tui.analysis.process_estimate import ProcessEstimates
from gpumem_tui.telemetry.model import PhaseMark, Snapshot
from gpumem_tui.support.text import print_error

PROG = "gpumem-tui exporter"
DEFAULT_LISTEN = "127.0.0.1:9835"

__all__ = ["COMMAND_LIMIT", "ExporterState", "build_registry", "exposition", "main", "metric_families", "parse_listen",
           "poll_into", "state_app"]


@dataclass
class _Probed:
    """What the exporter keeps of one probed process between polls."""

    device: str | None = None
    measured_peak_bytes: int = 0
    last_mark: PhaseMark | None = None


@dataclass
class ExporterState:
    """The last poll, as scrapes read it. ``update`` is called by the polling loop only.

    ``probed`` keeps, per probed PID, the highest memory its probe reported and its latest
    phase mark; a PID leaves it when it is neither in the poll's processes nor in its probe
    data (so ended jobs drop out of the metrics).
    """

    snapshot: Snapshot | None = None
    poll_seconds: float | None = None
    poll_errors: int = 0
    last_poll_error: str | None = None
    probed: dict[int, _Probed] = field(default_factory=dict)
    estimates: ProcessEstimates = field(default_factory=ProcessEstimates)
    # per probed PID what was measured so far (per-step peaks: the time-to-OOM), the same
    # bounded state the dashboard and compare keep (DESIGN.md rule 4)
    measured: ProbedProcesses = field(default_factory=ProbedProcesses)
    generation: int = 0  # counts updates and failed polls: the served bytes change only with it
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def update(self, snap: Snapshot, poll_seconds: float) -> None:
        """Take one Snapshot (the poll took ``poll_seconds``)."""
        with self.lock:
            for sample in snap.probes:
                kept = self.probed.setdefault(sample.pid, _Probed())
                kept.device = sample.device
                kept.measured_peak_bytes = max(
                    kept.measured_peak_bytes, sample.allocated_bytes, sample.peak_allocated_bytes or 0
                )
            for peak in snap.phase_peaks:
                kept = self.probed.setdefault(peak.pid, _Probed())
                kept.measured_peak_bytes = max(kept.measured_peak_bytes, peak.peak_bytes)
            for mark in snap.phase_marks:
                kept = self.probed.setdefault(mark.pid, _Probed())
                if kept.last_mark is None or mark.time >= kept.last_mark.time:
                    kept.last_mark = mark
            for info in snap.probe_infos:
                self.probed.setdefault(info.pid, _Probed())
                self.estimates.update_probe(info, self.probed[info.pid].device)
            present = {p.pid for p in snap.processes} | {p.pid for p in snap.probes} | {
                i.pid for i in snap.probe_infos
            }
            for pid in [pid for pid in self.probed if pid not in present]:
                del self.probed[pid]
            self.estimates.prune(self.probed)
            self.measured.add_snapshot(snap)
            self.snapshot = snap
            self.poll_seconds = poll_seconds
            self.generation += 1

    def poll_failed(self, error: str) -> None:
        """Count a poll that raised (``error``: its one-line text); the last good data stays."""
        with self.lock:
            self.poll_errors += 1
            self.last_poll_error = error
            self.generation += 1


def poll_into(source, state: ExporterState) -> str | None:  # noqa: ANN001 - anything with .poll() -> Snapshot
    """One poll of ``source`` (a :class:`~gpumem_tui.telemetry.live.LiveSource`) into ``state``.

    Returns None, or the one-line error of a poll that raised: then ``state`` keeps the last
    good poll's data and counts the error, so one bad reading never stops the exporter.
    """
    started = time.monotonic()
    try:
        snap = source.poll()
        state.update(snap, time.monotonic() - started)
    except Exception as exc:  # noqa: BLE001 - any failure of one poll; the next one may succeed
        error = " ".join(f"{type(exc).__name__}: {exc}".split())
        state.poll_failed(error)
        return error
    return None


def metric_families(state: ExporterState) -> Iterator[object]:
    """The prometheus_client metric families of ``state`` now (read under its lock at the first
    ``next``); what every encoder of the exporter writes."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    with state.lock:
        snap, poll_seconds, poll_errors = state.snapshot, state.poll_seconds, state.poll_errors
        probed = {pid: (kept.measured_peak_bytes, kept.last_mark, state.estimates.get(pid))
                  for pid, kept in state.probed.items()}
        outlooks = forecasts(snap, state.measured, sorted(probed)) if snap is not None else []
    up = GaugeMetricFamily("gpumem_exporter_nvml_up", "1 when NVML answered the last poll, else 0")
    up.add_metric([], 0.0 if snap is None or snap.nvml_error else 1.0)
    yield up
    duration = GaugeMetricFamily("gpumem_exporter_poll_duration_seconds", "Wall time of the exporter's last poll")
    if poll_seconds is not None:
        duration.add_metric([], poll_seconds)
    yield duration
    errors = CounterMetricFamily("gpumem_exporter_poll_errors", "Polls that raised (the last good data is served)")
    errors.add_metric([], float(poll_errors))
    yield errors
    if snap is None:
        return
    yield from gpu_families(snap)
    yield from process_families(snap)
    yield from probe_families(probed)
    yield from forecast_families(outlooks)


def exposition(state: ExporterState) -> bytes:
    """The ``/metrics`` body for ``state`` now (text format 0.0.4, as :class:`~gpumem_tui.remote.exporter_text.MetricsApp` serves it)."""
    return TextEncoder().encode(metric_families(state))


def state_app(state: ExporterState) -> MetricsApp:
    """The WSGI app serving ``state``: encoded once per poll, whoever scrapes."""
    return MetricsApp(lambda: (state.generation, metric_families(state)))


def build_registry(state: ExporterState):  # noqa: ANN201 - prometheus_client's CollectorRegistry
    """A prometheus_client registry whose only collector reads ``state`` (no process metrics):
    the same families as :func:`exposition`, for prometheus_client's own encoders."""
    from prometheus_client.registry import CollectorRegistry

    class _StateCollector:
        def collect(self) -> Iterator[object]:
            return metric_families(state)

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_StateCollector())
    return registry


def parse_listen(text: str, allow_remote: bool) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) -> (host, port).

    Raises:
        InputError: not HOST:PORT, a port outside 1-65535, or a non-loopback host without
            ``allow_remote``.
    """
    host, sep, port_text = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise InputError(f"--listen wants HOST:PORT (e.g. {DEFAULT_LISTEN}), got {text!r}")
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        raise InputError(f"--listen: {host!r} is not an IP address (or localhost)") from None
    if not loopback and not allow_remote:
        raise InputError(
            f"--listen {text}: not a loopback address; the metrics name users and commands, "
            "so serving them beyond this machine needs --allow-remote"
        )
    return host, int(port_text)


def _host_argument(text: str) -> str:
    """An ``--allow-host`` value: a host name or address, without scheme, path or spaces."""
    name = host_name(text)
    if name is None or not all(c.isalnum() or c in "-._:" for c in name):
        raise argparse.ArgumentTypeError(f"not a host name: {text!r}")
    return name


def _parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=PROG, description="Serve GPU, process and probe memory as Prometheus metrics on /metrics.")
    p.add_argument("--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT",
                   help=f"address to serve on (default {DEFAULT_LISTEN}: loopback only; "
                   "any other address needs --allow-remote)")
    p.add_argument("--allow-remote", action="store_true",
                   help="allow a non-loopback --listen address (the metrics name users and commands)")
    p.add_argument("--allow-host", action="append", default=[], type=_host_argument, metavar="NAME",
                   help="also answer requests whose Host header is NAME (a DNS alias or a reverse proxy's "
                   "name; repeatable). Other hosts than localhost, 127.0.0.1, [::1] (and, with "
                   "--allow-remote, this machine's names and addresses) get 403")
    p.add_argument("--interval", type=positive_seconds, default=5.0, metavar="S",
                   help="seconds between polls of NVML and the probe streams (default 5)")
    p.add_argument("--probe-dir", type=Path, default=None, metavar="DIR", help="where probe streams are read")
    return p


def main(argv: Sequence[str]) -> int:
    """Entry point of ``gpumem-tui exporter``; returns the exit code."""
    try:
        args = _parser().parse_args(list(argv))
        host, port = parse_listen(args.listen, args.allow_remote)
    except InputError as exc:
        print_error(PROG, exc)
        return 2
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    try:
        import prometheus_client  # noqa: F401 - checked here for a one-line error
    except ImportError as exc:
        print(f"{PROG}: prometheus_client is not installed ({exc})", file=sys.stderr)
        return 2
    from gpumem_tui.telemetry.live import LiveSource
    from gpumem_tui.telemetry.nvml import NvmlSource

    state = ExporterState()
    try:
        policy = HostPolicy(host, remote=args.allow_remote, extra=args.allow_host)
        app = state_app(state)
        server, _thread = serve_metrics(host, port, app, policy)
    except OSError as exc:
        print_error(PROG, f"cannot listen on {host}:{port}: {exc.strerror or exc}")
        return 2
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    # extended: the exporter also serves clocks, fan, PCIe / NVLink throughput and MIG mode
    source = LiveSource(args.probe_dir, nvml=NvmlSource(extended=True))
    print(f"{PROG}: serving http://{host}:{port}/metrics every {args.interval:g} s", file=sys.stderr, flush=True)
    reported: str | None = None
    try:
        while not stop.is_set():
            started = time.monotonic()
            error = poll_into(source, state)
            app.prepare()  # encode for the next scrape now, not while it waits
            if error is not None and error != reported:  # one line per new kind of failure, not per poll
                print_error(PROG, f"poll failed (serving the last good data): {error}")
            reported = error
            stop.wait(max(0.0, args.interval - (time.monotonic() - started)))
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
        source.close()
    return 0
