"""``gpumem-tui exporter``: serve the dashboard's telemetry as Prometheus metrics.

    gpumem-tui exporter [--listen 127.0.0.1:9835] [--interval S] [--probe-dir DIR] [--allow-remote]

A poll thread reads :class:`~gpumem_tui.telemetry.live.LiveSource` every ``--interval``
seconds into an :class:`~gpumem_tui.exporter.metrics.ExporterState`; prometheus_client's
HTTP server (``start_http_server``) serves ``/metrics`` from it. Without an NVIDIA driver it
still serves (``gpumem_exporter_nvml_up 0``) and says so in one stderr line.

Exit codes: 0 stopped by SIGINT/SIGTERM; 2 bad arguments, a non-loopback address without
``--allow-remote``, or the port cannot be bound (one line, e.g. already in use).
"""

from __future__ import annotations

import argparse
import ipaddress
import signal
import sys
import threading
import time

from gpumem_tui.cli_support import InputError, OneLineParser, positive_seconds

PROG = "gpumem-tui exporter"
DEFAULT_LISTEN = "127.0.0.1:9835"


def parse_listen(text: str) -> tuple[str, int]:
    """``"HOST:PORT"`` / ``"[V6]:PORT"`` -> (host, port). Raises ValueError with a one-line reason."""
    host, sep, port_text = text.rpartition(":")
    if not sep or not host:
        raise ValueError(f"--listen {text!r}: expected HOST:PORT, e.g. {DEFAULT_LISTEN}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"--listen {text!r}: port {port_text!r} is not a number") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"--listen {text!r}: port must be 0-65535")
    return host, port


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback IP literals (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog=PROG,
        description="Serve GPU, per-process and probe memory as Prometheus metrics on /metrics.",
        epilog="Only loopback addresses are bound unless --allow-remote is given: the metrics name "
               "users and command lines, so exposing them on the network must be asked for explicitly.",
    )
    p.add_argument("--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT",
                   help=f"address to serve /metrics on (default {DEFAULT_LISTEN}; loopback only "
                        "unless --allow-remote)")
    p.add_argument("--allow-remote", action="store_true",
                   help="allow a non-loopback --listen address (e.g. 0.0.0.0:9835)")
    p.add_argument("--interval", type=positive_seconds,
                   default=2.0, metavar="S", help="seconds between telemetry polls (default 2)")
    p.add_argument("--probe-dir", default=None, metavar="DIR",
                   help="where probe streams are read (default: the dashboard's probe directory)")
    return p


class Poller:
    """Polls ``source`` into ``state`` every ``interval`` seconds on a daemon thread."""

    def __init__(self, source, state, interval: float) -> None:
        self._source, self._state, self._interval = source, state, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpumem-exporter-poll", daemon=True)

    def poll_once(self) -> None:
        """One poll; a raising source is counted, the previous data kept."""
        start = time.perf_counter()
        try:
            snap = self._source.poll()
        except Exception:
            self._state.poll_failed()
            return
        self._state.update(snap, time.perf_counter() - start)

    def start(self) -> None:
        """Start the thread (the first poll happens at once)."""
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.poll_once()
            self._stop.wait(self._interval)

    def stop(self) -> None:
        """Stop the thread and wait for it."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)


def main(argv: list[str]) -> int:
    """Run the exporter until SIGINT/SIGTERM; see the module docstring for exit codes."""
    try:
        args = _parser().parse_args(argv)
    except InputError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    try:
        host, port = parse_listen(args.listen)
    except ValueError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    if not is_loopback(host) and not args.allow_remote:
        print(f"{PROG}: {host} is not a loopback address; add --allow-remote to serve metrics "
              "(users, command lines) on the network", file=sys.stderr)
        return 2

    from prometheus_client import CollectorRegistry, start_http_server

    from gpumem_tui.exporter.metrics import ExporterState
    from gpumem_tui.telemetry.live import LiveSource

    state = ExporterState()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(state)
    try:
        server, server_thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        print(f"{PROG}: cannot listen on {args.listen}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    source = LiveSource(probe_dir=args.probe_dir)
    if not source.nvml_available:
        print(f"{PROG}: no NVIDIA driver ({source.nvml_error}); serving host and probe data, "
              "gpumem_exporter_nvml_up 0", file=sys.stderr)
    bound = server.server_address
    print(f"{PROG}: serving http://{args.listen.rpartition(':')[0]}:{bound[1]}/metrics", file=sys.stderr, flush=True)
    poller = Poller(source, state, args.interval)
    stopped = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopped.set())
    poller.start()
    try:
        stopped.wait()
    finally:
        poller.stop()
        server.shutdown()
        server.server_close()
        source.close()
    return 0
