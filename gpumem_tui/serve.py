"""``gpumem-tui serve [--host 127.0.0.1] [--port 8000] [--allow-signals] [-- DASHBOARD ARGS]``.

The dashboard in a browser through textual-serve (https://github.com/Textualize/textual-serve):
each browser session starts ``gpumem-tui dashboard`` in a pseudo-terminal on this machine and
streams it over a websocket. The served dashboard is ``--readonly`` (no keys that send signals)
unless ``--allow-signals`` is given, since anyone who can open the page can press its keys.

Loopback by default; any other ``--host`` prints a one-line warning (the page is not
authenticated). The page's URLs follow the address the browser used (see ``page_server``), so
``--host 0.0.0.0`` works from another machine. Exit codes: 0 stopped; 2 bad arguments or the port cannot be bound (one line).
"""

from __future__ import annotations

import argparse
import ipaddress
import re
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


def url_host(host: str) -> str:
    """``host`` as it goes in a URL: an IPv6 literal in brackets (RFC 3986 section 3.2.2)."""
    return f"[{host}]" if ":" in host else host


# A Host header we put back into the page: a DNS name or IPv4 address, or a bracketed IPv6
# literal, with an optional port; anything else (it comes from the client) is not used.
_HOST_HEADER = re.compile(r"(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?")


def page_server(command: str, host: str, port: int):
    """A textual-serve ``Server`` whose page sends the browser back to the address it came in on.

    textual-serve writes absolute URLs into the page (its script, styles and the websocket
    ``ws://HOST:PORT/ws``) from ``--host``; served on 0.0.0.0 a remote browser would be told to
    connect to 0.0.0.0, i.e. to itself. Here each page takes them from the request's Host
    header instead (falling back to ``--host`` when that header is missing or malformed).
    Source: textual_serve/server.py ``Server.handle_index`` (textual-serve 1.1), which reads
    ``self.public_url`` without awaiting in between, so setting it per request is safe.
    """
    from textual_serve.server import Server

    fallback = f"http://{url_host(host)}:{port}"

    class _SameOriginServer(Server):
        async def handle_index(self, request):  # type: ignore[override]
            asked = request.headers.get("Host", "")
            self.public_url = f"http://{asked}" if _HOST_HEADER.fullmatch(asked) else fallback
            return await super().handle_index(request)

    return _SameOriginServer(command, host=host, port=port, title="gpumem-tui", public_url=fallback)


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
    command = dashboard_command(dashboard_args, args.allow_signals)
    print(f"{PROG}: http://{url_host(args.host)}:{args.port}/ runs: {command}", file=sys.stderr, flush=True)
    page_server(command, args.host, args.port).serve()
    return 0
