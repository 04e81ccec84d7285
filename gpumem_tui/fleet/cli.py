"""``gpumem-tui fleet --prometheus URL [--once [--json]] [--interval S] [--timeout S]``.

With ``--once`` one refresh is printed (a text table, or ``--json``: a list of host objects,
see :meth:`gpumem_tui.fleet.query.HostRow.to_json`) and the command exits; otherwise the
Textual fleet screen opens. Exit codes: 0 printed / screen closed; 1 Prometheus could not be
read with ``--once`` (one stderr line saying what answered); 2 bad arguments.
"""

from __future__ import annotations

import argparse
import json
import sys

from gpumem_tui.cli_support import InputError, OneLineParser, positive_seconds
from gpumem_tui.fleet.query import FleetPoller, HostRow, PrometheusClient, PrometheusError
from gpumem_tui.units import format_bytes

PROG = "gpumem-tui fleet"


def _parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=PROG, description="GPU memory of many hosts, read from Prometheus "
                      "(gpumem-tui exporter and/or NVIDIA dcgm-exporter metrics).")
    p.add_argument("--prometheus", required=True, metavar="URL", help="Prometheus base URL, e.g. http://127.0.0.1:9090")
    p.add_argument("--once", action="store_true", help="print the host table once and exit")
    p.add_argument("--json", action="store_true", help="with --once: JSON (bytes, utilization 0-1)")
    p.add_argument("--interval", type=positive_seconds, default=5.0, metavar="S", help="seconds between refreshes (default 5)")
    p.add_argument("--timeout", type=positive_seconds, default=5.0, metavar="S", help="seconds per query (default 5)")
    return p


def host_line(h: HostRow) -> str:
    """One text row: instance, GPUs, used/total (binary units), utilisation, biggest process."""
    used = "-" if h.used_bytes is None else format_bytes(int(h.used_bytes))
    total = "-" if h.total_bytes is None else format_bytes(int(h.total_bytes))
    util = "-" if h.utilization is None else f"{h.utilization * 100:.0f}%"
    big = h.biggest_process
    biggest = "-" if big is None else f"{big.pid} {big.command[:30]} {format_bytes(int(big.used_bytes))}"
    return f"{h.instance:<24} {len(h.gpus):>4} {used:>10} / {total:<10} {util:>5}  {biggest}"


def main(argv: list[str]) -> int:
    """Run the fleet view or print it once; see the module docstring for exit codes."""
    try:
        args = _parser().parse_args(argv)
        if args.json and not args.once:
            raise InputError("--json needs --once")
        client = PrometheusClient(args.prometheus, timeout=args.timeout)
    except (InputError, PrometheusError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    poller = FleetPoller(client, interval=args.interval)
    if not args.once:
        from gpumem_tui.fleet.screen import FleetApp

        FleetApp(poller).run()
        return 0
    state = poller.refresh()
    if state.notice is not None:
        print(f"{PROG}: {state.notice.split(' (showing')[0]}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps([h.to_json() for h in state.hosts], indent=1))
    else:
        print(f"{'INSTANCE':<24} {'GPUS':>4} {'USED':>10} / {'TOTAL':<10} {'UTIL':>5}  BIGGEST PROCESS")
        for h in state.hosts:
            print(host_line(h))
    return 0
