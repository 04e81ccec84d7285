"""``gpumem-tui fleet --prometheus URL [--once [--json]] [--interval S] [--timeout S] [--theme NAME]``.

``--once`` prints the host table of :func:`gpumem_tui.remote.fleet.read_fleet` (``--json`` for
scripts) and its notices (values shown as N/A, hosts down) on stderr; without it the
interactive screen of :mod:`gpumem_tui.ui.fleet_screen` opens, in the dashboard's theme (the
config file's ``theme`` and ``screenshot_dir`` apply, see :mod:`gpumem_tui.ui.config`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence

from gpumem_tui.remote.fleet import PrometheusClient, PrometheusError, down_notice, format_table, read_fleet
from gpumem_tui.support.text import print_error, printable


def main(argv: Sequence[str]) -> int:
    """``gpumem-tui fleet --prometheus URL [--once [--json]]``; returns the exit code.

    Exit codes: 0 printed (notices, if any, on stderr), 1 Prometheus could not be read (one
    line), 2 bad input.
    """
    from gpumem_tui.support.cli_support import InputError, OneLineParser, positive_seconds

    parser = OneLineParser(prog="gpumem-tui fleet", description="GPU memory of many hosts, read from Prometheus.")
    parser.add_argument("--prometheus", required=True, metavar="URL", help="the Prometheus server, e.g. http://127.0.0.1:9090")
    parser.add_argument("--once", action="store_true", help="print the host table once and exit")
    parser.add_argument("--json", action="store_true", help="with --once: the table as JSON (bytes, utilization 0-1)")
    parser.add_argument("--timeout", type=positive_seconds, default=5.0, metavar="S", help="seconds per query (default 5)")
    parser.add_argument("--interval", type=positive_seconds, default=5.0, metavar="S",
                        help="screen: seconds between refreshes (default 5; backs off after failures)")
    parser.add_argument("--theme", default=None, metavar="NAME", help="screen: theme name (default: the config file's, else dark)")
    try:
        args = parser.parse_args(list(argv))
        if args.json and not args.once:
            raise InputError("--json needs --once")
        client = PrometheusClient(args.prometheus, timeout=args.timeout)
    except (InputError, PrometheusError) as exc:
        print_error("gpumem-tui fleet", exc)
        return 2
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    if not args.once:
        return _screen(client, args.interval, args.theme)
    try:
        reading = read_fleet(client)
    except PrometheusError as exc:
        print_error("gpumem-tui fleet", exc, 400)
        return 1
    down = [r for r in reading.hosts if not r.up]
    for notice in [*reading.notices, *([down_notice(down, reading.read_at)] if down else [])]:
        print(f"gpumem-tui fleet: warning: {printable(notice, 400)}", file=sys.stderr)
    if args.json:
        print(json.dumps([r.to_json(reading.read_at) for r in reading.hosts], indent=2))
    else:
        print(format_table(reading.hosts, reading.read_at))
    return 0


def _screen(client: PrometheusClient, interval: float, theme: str | None) -> int:
    """Open the fleet screen in the configured theme; 2 for an unknown ``--theme``."""
    from gpumem_tui.ui.config import Config, ConfigError, load_config
    from gpumem_tui.ui.themes import DEFAULT_THEME, known_theme_names, load_themes

    try:
        config = load_config()
    except ConfigError as exc:  # only an explicit path raises; kept for safety
        print_error("gpumem-tui fleet", exc)
        config = Config()
    themes = load_themes()
    if theme is not None and theme not in known_theme_names(themes):
        print(f"gpumem-tui fleet: unknown theme {theme!r}; available: {', '.join(known_theme_names(themes))}",
              file=sys.stderr)
        return 2
    from gpumem_tui.ui.fleet_screen import FleetApp, FleetPoller

    FleetApp(FleetPoller(client, interval=interval), theme=theme or config.theme or DEFAULT_THEME, themes=themes,
             screenshot_dir=config.screenshot_dir, notices=config.notices).run()
    return 0
