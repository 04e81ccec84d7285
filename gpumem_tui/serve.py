"""``gpumem-tui serve [--host 127.0.0.1] [--port 8000] [--allow-signals] [-- DASHBOARD ARGS]``.

The dashboard in a browser through textual-serve (https://github.com/Textualize/textual-serve):
each browser session starts ``gpumem-tui dashboard`` in a pseudo-terminal on this machine and
streams it over a websocket. The served dashboard is ``--readonly`` (no keys that send signals)
unless ``--allow-signals`` is given, since anyone who can open the page can press its keys.

Loopback by default; any other ``--host`` prints a one-line warning (the page is not
authenticated). Exit codes: 0 stopped; 2 bad arguments or the port cannot be bound (one line).
"""

from __future__ import annotations

import argparse
import ipaddress
import shlex
import socket
import sys

from gpumem_tui.cli_support import InputError, OneLineParser

PROG = "gpumem-tui serve"


def _parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=PROG, description="Serve the dashboard to a web browser (textual-serve).",
                      epilog="Arguments after -- go to the dashboard, e.g. -- --interval 2. Binding to a "
                             "non-loopback --host exposes an unauthenticated page: a warning is printed.")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1, loopback)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument("--allow-signals", action="store_true",
                   help="let the browser view send signals to processes (default: the dashboard runs --readonly)")
    return p


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def dashboard_command(dashboard_args: list[str], allow_signals: bool) -> str:
    """The shell command textual-serve runs per browser session (``--readonly`` unless allowed)."""
    argv = [sys.executable, "-m", "gpumem_tui", "dashboard", *dashboard_args]
    if not allow_signals and "--readonly" not in dashboard_args:
        argv.append("--readonly")
    return shlex.join(argv)


def main(argv: list[str]) -> int:
    """Serve until SIGINT/SIGTERM; see the module docstring for exit codes."""
    argv = list(argv)
    dashboard_args: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, dashboard_args = argv[:cut], argv[cut + 1:]
    try:
        args = _parser().parse_args(argv)
        if not 0 < args.port < 65536:
            raise InputError(f"--port must be 1-65535, got {args.port}")
        if not args.host.strip():
            raise InputError("--host must not be empty (0.0.0.0 listens on every IPv4 interface)")
    except InputError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    # bind once ourselves so that a port in use is one line, not aiohttp's traceback
    try:
        family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
        with socket.socket(family) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((args.host, args.port))
    except OSError as exc:
        print(f"{PROG}: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    if not _is_loopback(args.host):
        print(f"{PROG}: warning: serving on {args.host}, not loopback: anyone who reaches this port sees "
              f"every GPU process{'' if not args.allow_signals else ' and can signal them'}", file=sys.stderr)
    from textual_serve.server import Server

    command = dashboard_command(dashboard_args, args.allow_signals)
    print(f"{PROG}: http://{args.host}:{args.port}/ runs: {command}", file=sys.stderr, flush=True)
    Server(command, host=args.host, port=args.port, title="gpumem-tui").serve()
    return 0
