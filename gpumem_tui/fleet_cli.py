"""``gpumem-tui fleet --prometheus URL [--once [--json]] [--interval S] [--timeout S]``.

``--once`` prints the host table of :func:`gpumem_tui.fleet.fleet_rows` (``--json`` for
scripts); without it the interactive screen of :mod:`gpumem_tui.fleet_screen` opens.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from gpumem_tui.fleet import PrometheusClient, PrometheusError, fleet_rows, format_table

def main(argv: Sequence[str]) -> int:
    """``gpumem-tui fleet --prometheus URL [--once [--json]]``; returns the exit code.

    Without ``--once`` the interactive screen opens (:mod:`gpumem_tui.fleet_screen`).

    Exit codes: 0 printed, 1 Prometheus could not be read (one line), 2 bad input.
    """
    import sys

    from gpumem_tui.cli_support import InputError, OneLineParser, positive_seconds

    parser = OneLineParser(prog="gpumem-tui fleet", description="GPU memory of many hosts, read from Prometheus.")
    parser.add_argument("--prometheus", required=True, metavar="URL", help="the Prometheus server, e.g. http://127.0.0.1:9090")
    parser.add_argument("--once", action="store_true", help="print the host table once and exit")
    parser.add_argument("--json", action="store_true", help="with --once: the table as JSON (bytes, utilization 0-1)")
    parser.add_argument("--timeout", type=positive_seconds, default=5.0, metavar="S", help="seconds per query (default 5)")
    parser.add_argument("--interval", type=positive_seconds, default=5.0, metavar="S",
                        help="screen: seconds between refreshes (default 5; backs off after failures)")
    try:
        args = parser.parse_args(list(argv))
        if args.json and not args.once:
            raise InputError("--json needs --once")
        client = PrometheusClient(args.prometheus, timeout=args.timeout)
    except (InputError, PrometheusError) as exc:
        print(f"gpumem-tui fleet: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    if not args.once:
        from gpumem_tui.fleet_screen import FleetApp, FleetPoller

        FleetApp(FleetPoller(client, interval=args.interval)).run()
        return 0
    try:
        rows = fleet_rows(client)
    except PrometheusError as exc:
        print(f"gpumem-tui fleet: {exc}", file=sys.stderr)
        return 1
    print(json.dumps([r.to_json() for r in rows], indent=2) if args.json else format_table(rows))
    return 0
