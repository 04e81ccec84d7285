"""``gpumem-tui serve [--host 127.0.0.1] [--port 8000] [--max-sessions 4] [--allow-host NAME]
[--allow-signals [--allow-remote-signals]] [-- DASHBOARD ARGS]``.

The dashboard in a browser through textual-serve (https://github.com/Textualize/textual-serve):
each browser session starts ``gpumem-tui dashboard`` on this machine and streams it over a
websocket. The served dashboard is ``--readonly`` (no keys that send signals) unless
``--allow-signals`` is given.

Access (rules in :mod:`gpumem_tui.remote.serve_access`, applied in :mod:`gpumem_tui.remote.serve_server`):

* A random token per start is printed on stdout with the URL, as Jupyter does
  (``http://127.0.0.1:8000/?token=...``); the page, the websocket and downloads need it (as
  ``?token=`` or the HttpOnly, SameSite=Strict cookie the page sets).
* Requests whose ``Host`` is not this server (DNS rebinding), or whose ``Origin`` is another
  site (a foreign page opening the websocket), are refused with 403 before any dashboard starts.
  On loopback only ``127.0.0.1``, ``localhost`` and ``[::1]`` with the port are accepted; on
  0.0.0.0 also this machine's host name and addresses; ``--allow-host NAME`` adds a name.
* At most ``--max-sessions`` dashboards run (default 4); one more gets a "limit reached" page or
  message and no dashboard. Terminal sizes are clamped to 20x5..500x200 cells.
* Each dashboard runs in its own process group and ends within 5 s of its socket closing
  (quit, SIGTERM, SIGKILL); all end when serve ends (SIGINT/SIGTERM), and on Linux the kernel
  kills them should serve itself be killed (PR_SET_PDEATHSIG).

Loopback by default; any other ``--host`` prints a one-line warning, and ``--allow-signals`` off
loopback is refused unless ``--allow-remote-signals`` says it is meant. The page's URLs follow
the (allowed) address the browser used, so ``--host 0.0.0.0`` works from another machine.
Exit codes: 0 stopped; 2 bad arguments or the port cannot be bound (one line).
"""

from __future__ import annotations

import argparse
import shlex
import socket
import sys

from gpumem_tui.support.cli_support import InputError, OneLineParser, positive_int
from gpumem_tui.remote.serve_access import HostRule, canonical_host, is_loopback, is_wildcard, new_token
from gpumem_tui.support.text import print_error

PROG = "gpumem-tui serve"


def _parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=PROG, description="Serve the dashboard to a web browser (textual-serve).",
                      epilog="Arguments after -- go to the dashboard, e.g. -- --interval 2. The URL printed on "
                             "stdout carries the token the page needs.")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1, loopback)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument("--max-sessions", type=positive_int, default=4,
                   help="browser sessions (dashboards) at once (default 4)")
    p.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                   help="also accept this name in the Host header (e.g. a DNS alias of this machine); repeatable")
    p.add_argument("--allow-signals", action="store_true",
                   help="let the browser view send signals to processes (default: the dashboard runs --readonly)")
    p.add_argument("--allow-remote-signals", action="store_true",
                   help="confirm --allow-signals on a non-loopback --host (anyone with the token may kill processes)")
    return p


def url_host(host: str) -> str:
    """``host`` as it goes in a URL: an IPv6 literal in brackets (RFC 3986 section 3.2.2)."""
    return f"[{host}]" if ":" in host else host


def dashboard_argv(dashboard_args: list[str], allow_signals: bool) -> list[str]:
    """The command textual-serve runs per browser session (``--readonly`` unless allowed)."""
    argv = [sys.executable, "-m", "gpumem_tui", "dashboard", *dashboard_args]
    if not allow_signals and "--readonly" not in dashboard_args:
        argv.append("--readonly")
    return argv


def token_urls(host: str, port: int, token: str) -> list[str]:
    """The URLs to print: the bound address, or on 0.0.0.0 / :: this machine's name and loopback."""
    hosts = [socket.gethostname(), "127.0.0.1"] if is_wildcard(host) else [host]
    return [f"http://{url_host(h)}:{port}/?token={token}" for h in hosts]


def _check(args: argparse.Namespace) -> list[str]:
    """Validates the parsed arguments; returns the canonical ``--allow-host`` names.
    Raises InputError with a one-line message."""
    if not 0 < args.port < 65536:
        raise InputError(f"--port must be 1-65535, got {args.port}")
    if not args.host.strip():
        raise InputError("--host must not be empty (0.0.0.0 listens on every IPv4 interface)")
    if canonical_host(args.host.strip("[]")) is None:
        raise InputError(f"--host must be a host name or IP address, got {args.host!r}")
    names = []
    for name in args.allow_host:
        canonical = canonical_host(name.strip("[]"))
        if canonical is None:
            raise InputError(f"--allow-host must be a host name or IP address (no port), got {name!r}")
        names.append(canonical)
    if args.allow_remote_signals and not args.allow_signals:
        raise InputError("--allow-remote-signals only confirms --allow-signals, which is not given")
    if args.allow_signals and not is_loopback(args.host) and not args.allow_remote_signals:
        raise InputError(f"--allow-signals on {args.host} (not loopback) lets anyone who reaches the port with "
                         "the token signal processes; add --allow-remote-signals if that is meant")
    return names


def main(argv: list[str]) -> int:
    """Serve until SIGINT/SIGTERM; see the module docstring for exit codes."""
    argv = list(argv)
    dashboard_args: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, dashboard_args = argv[:cut], argv[cut + 1:]
    try:
        args = _parser().parse_args(argv)
        allowed_names = _check(args)
    except InputError as exc:
        print_error(PROG, exc)
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
        print_error(PROG, f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}")
        return 2
    if not is_loopback(args.host):
        print(f"{PROG}: warning: serving on {args.host}, not loopback: anyone who reaches this port with the "
              f"token sees every GPU process{'' if not args.allow_signals else ' and can signal them'}",
              file=sys.stderr)
    from gpumem_tui.remote.serve_server import GuardedServer  # textual-serve and aiohttp: only when serving

    command = dashboard_argv(dashboard_args, args.allow_signals)
    token = new_token()
    server = GuardedServer(command, host=args.host, port=args.port,
                           public_url=f"http://{url_host(args.host)}:{args.port}",
                           hosts=HostRule.for_bind(args.host, args.port, allowed_names),
                           token=token, max_sessions=args.max_sessions)
    print(f"{PROG}: serving on {args.host}:{args.port}, at most {args.max_sessions} sessions; each runs: "
          f"{shlex.join(command)}", file=sys.stderr, flush=True)
    for url in token_urls(args.host, args.port, token):
        print(url, flush=True)
    try:
        server.serve()
    finally:
        server.kill_leftovers()
    return 0
