"""Who may drive ``gpumem-tui serve``: the Host names it answers to, the same-origin rule, the
start token, and the terminal sizes a browser may ask for.

Pure functions and small value classes; :mod:`gpumem_tui.remote.serve_server` applies them to aiohttp
requests. Everything here reads values that come from the browser (headers, query strings,
websocket messages): they are parsed strictly and anything unexpected is refused, not repaired.

Why each rule exists (the attacks are from the issue that introduced them):

* Host -- DNS rebinding: a name the attacker controls is made to resolve to 127.0.0.1, so the
  attacker's page becomes "same origin" with the server. The browser still sends the attacker's
  name in ``Host``, so only names that really denote this server are accepted
  (https://en.wikipedia.org/wiki/DNS_rebinding, "Protection").
* Origin -- cross-site websockets: browsers let any page open ``ws://127.0.0.1:PORT/ws`` and
  send its own ``Origin``; a websocket server must check it (RFC 6455 section 10.2).
* Token -- a secret printed on stdout at start, as Jupyter does, required for the page and the
  websocket (as ``?token=`` or the cookie the page sets), so that reaching the port is not enough.
"""

from __future__ import annotations

import hmac
import ipaddress
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass

from yarl import URL

from gpumem_tui.remote.own_host import LOOPBACK_NAMES, host_names, interface_addresses

#: Bytes of randomness in the start token (``secrets.token_urlsafe``: 43 URL-safe characters).
TOKEN_BYTES = 32

#: Terminal sizes in cells. The dashboard's memory and CPU grow with the cell count (20000 x
#: 20000 took it to 4.3 GB in the issue); 500 x 200 is beyond any real screen at a readable font.
MIN_WIDTH, MAX_WIDTH, DEFAULT_WIDTH = 20, 500, 80
MIN_HEIGHT, MAX_HEIGHT, DEFAULT_HEIGHT = 5, 200, 24

# A Host header: a DNS name or IPv4 address, or a bracketed IPv6 literal, with an optional port.
_HOST = re.compile(r"(?:(?P<name>[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?)|\[(?P<v6>[0-9A-Fa-f:.]+)\])"
                   r"(?::(?P<port>[0-9]{1,5}))?")


@dataclass(frozen=True)
class HostPort:
    """A parsed ``Host`` (or Origin authority): ``host`` lower case, an IP address in its
    canonical text (IPv6 without brackets); ``port`` as sent, None when absent (port 80)."""

    host: str
    port: int | None

    @property
    def effective_port(self) -> int:
        """The port an ``http://`` URL without one means (RFC 9110 section 4.2.1)."""
        return 80 if self.port is None else self.port


def canonical_host(name: str) -> str | None:
    """``name`` (a DNS name, an IPv4 address, or an IPv6 address without brackets) in the form
    used for comparisons: lower case, IP addresses as ``ipaddress`` writes them; None when it is
    neither a plain DNS name nor an IP address."""
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        pass
    match = _HOST.fullmatch(name)
    if match is None or match["name"] is None or match["port"] is not None:
        return None
    return name.lower()


def parse_host(value: str | None) -> HostPort | None:
    """A ``Host`` header value as :class:`HostPort`; None when missing or malformed."""
    match = _HOST.fullmatch(value or "")
    if match is None:
        return None
    port = int(match["port"]) if match["port"] else None
    if port is not None and not 0 < port < 65536:
        return None
    if match["v6"] is not None:
        try:
            return HostPort(str(ipaddress.IPv6Address(match["v6"])), port)
        except ValueError:
            return None
    host = canonical_host(match["name"])
    return None if host is None else HostPort(host, port)


def origin_matches(origin: str | None, host: HostPort) -> bool:
    """True when the ``Origin`` header names the same ``http`` origin as ``host``, or is absent.

    Browsers send ``Origin`` on every websocket handshake and every cross-origin request
    (RFC 6455 section 4.1 item 8; Fetch standard, "origin header"); a top-level navigation GET
    carries none. So a missing Origin is not a cross-site browser request; one that is present
    must be exactly ``http://HOST[:PORT]`` of this request (``null`` and any other scheme fail).
    """
    if origin is None:
        return True
    try:
        url = URL(origin)
    except ValueError:
        return False
    if url.scheme != "http" or url.raw_host is None or url.user is not None or url.path not in ("", "/") \
            or url.query_string or url.fragment:
        return False
    origin_host = canonical_host(url.raw_host.strip("[]"))
    return origin_host == host.host and url.port == host.effective_port


def new_token() -> str:
    """A fresh start token (``secrets.token_urlsafe``, :data:`TOKEN_BYTES` random bytes)."""
    return secrets.token_urlsafe(TOKEN_BYTES)


def token_matches(given: str | None, token: str) -> bool:
    """``given == token`` in constant time (``hmac.compare_digest``); False when missing."""
    if not given:
        return False
    return hmac.compare_digest(given.encode("utf-8", "replace"), token.encode("utf-8"))


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback IP addresses (127.0.0.0/8, ::1)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_wildcard(host: str) -> bool:
    """True for the any-address (0.0.0.0, ::): listening on every interface."""
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False


def _own_names() -> set[str]:
    """This machine's host name, its FQDN and every interface address, canonical."""
    return {c for c in map(canonical_host, host_names() | interface_addresses()) if c is not None}


@dataclass(frozen=True)
class HostRule:
    """The ``Host`` values this server answers to: one of ``names`` with the served ``port``.

    Use :meth:`for_bind` to build one from ``--host`` and ``--allow-host``.
    """

    names: frozenset[str]
    port: int

    @classmethod
    def for_bind(cls, bind_host: str, port: int, extra_names: Iterable[str] = ()) -> HostRule:
        """The names a server listening on ``bind_host`` answers to, plus ``extra_names``.

        Loopback: only ``localhost``, ``127.0.0.1``, ``[::1]`` (and the bound address), so no
        outside name can be rebound onto it. The any-address: also this machine's own host
        name, FQDN and interface addresses. Any other address or name: that one. ``extra_names``
        must already be canonical (see :func:`canonical_host`).
        Raises ValueError when ``bind_host`` is not a host name or address.
        """
        bound = canonical_host(bind_host.strip("[]"))
        if bound is None:
            raise ValueError(f"not a host name or address: {bind_host!r}")
        names = {bound, *extra_names}
        if is_loopback(bound) or is_wildcard(bound):
            names |= LOOPBACK_NAMES
        if is_wildcard(bound):
            names |= _own_names()
            names.discard(bound)  # 0.0.0.0 is where it listens, not a name a browser may use
        return cls(frozenset(names), port)

    def allows(self, host: HostPort | None) -> bool:
        """True when ``host`` (a parsed Host header) names this server on its port."""
        return host is not None and host.host in self.names and host.effective_port == self.port


def terminal_size(width: object, height: object) -> tuple[int, int] | None:
    """``(width, height)`` in cells, each clamped into its ``MIN_*``..``MAX_*`` range.

    Accepts ints (a websocket ``resize`` message) or strings of 1-9 decimal digits (the
    ``?width=&height=`` query); None (missing) gives the default. Returns None when either is something else
    (a float, a bool, text that is not a whole number): the caller refuses it.
    """
    w = _cells(width, DEFAULT_WIDTH, MIN_WIDTH, MAX_WIDTH)
    h = _cells(height, DEFAULT_HEIGHT, MIN_HEIGHT, MAX_HEIGHT)
    return None if w is None or h is None else (w, h)


def _cells(value: object, default: int, low: int, high: int) -> int | None:
    if value is None:
        return default
    if isinstance(value, str) and re.fullmatch(r"[0-9]{1,9}", value):
        value = int(value)
    if type(value) is not int:  # bool is an int subclass: not a size
        return None
    return min(max(value, low), high)
