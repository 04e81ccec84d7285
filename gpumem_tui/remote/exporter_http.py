"""The exporter's HTTP server: the metrics WSGI app behind a Host check, a read timeout, a
connection deadline and a cap on concurrent connections (issue: DNS rebinding and unbounded
connections).

The exposition itself is the WSGI app it is given (the exporter's is
:class:`gpumem_tui.remote.exporter_text.MetricsApp`; prometheus_client's ``make_wsgi_app(registry)``
works the same), served by prometheus_client's ``ThreadingWSGIServer`` (one thread per
connection, as ``start_http_server`` does); this module only adds the limits around it.

- **Host** (defence against DNS rebinding: a page in a browser on this machine that makes its
  own name resolve to 127.0.0.1 may send requests here, but its ``Host`` header still carries
  its own name): a request is answered only when its ``Host`` names this server as allowed by
  :class:`HostPolicy`; any other, or none, gets ``403 Forbidden``. Prometheus sends the target's
  ``host:port`` as ``Host`` (RFC 9110 section 7.2 requires the header in HTTP/1.1).
- **Timeouts**: each read from a client waits at most ``read_timeout`` seconds
  (``socketserver.StreamRequestHandler.timeout``), and a connection is shut down
  ``connection_seconds`` after it was accepted, whatever it sends (a client that trickles one
  byte at a time cannot hold a thread for longer).
- **Cap**: at most ``max_connections`` connections are served at once; one more is answered
  ``503 Service Unavailable`` and closed at once by the accepting thread (not queued).
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from gpumem_tui.remote.own_host import LOOPBACK_NAMES, host_names, interface_addresses

#: Seconds one read from a client may wait (a client that sends nothing is dropped after it).
READ_TIMEOUT = 5.0
#: Seconds a connection may last in all (Prometheus' default scrape timeout is 10 s).
CONNECTION_SECONDS = 15.0
#: Connections served at once (one Prometheus scrapes one connection at a time).
MAX_CONNECTIONS = 16


__all__ = ["CONNECTION_SECONDS", "MAX_CONNECTIONS", "READ_TIMEOUT", "HostPolicy", "host_name", "serve_metrics"]


def host_name(header: str | None) -> str | None:
    """The name in a ``Host`` header, without its port, lower-cased, without a trailing dot
    (``"[::1]:9835"`` -> ``"::1"``, ``"LocalHost.:80"`` -> ``"localhost"``); None for a
    header that is missing or not ``host[:port]`` (RFC 9110 section 7.2, RFC 3986 section 3.2.2)."""
    if header is None:
        return None
    text = header.strip().lower()
    if text.startswith("["):  # an IPv6 literal
        inside, bracket, rest = text[1:].partition("]")
        if not bracket or (rest and not (rest.startswith(":") and rest[1:].isdigit())):
            return None
        return inside or None
    name, colon, port = text.partition(":")
    if colon and not port.isdigit():
        return None  # "a:b:c", an unbracketed IPv6 address, or a bad port
    name = name.rstrip(".")
    return name or None


@dataclass
class HostPolicy:
    """Which ``Host`` names a request may carry.

    Bound to loopback (``remote=False``): ``localhost``, ``127.0.0.1``, ``::1`` and the listen
    address itself. With ``--allow-remote`` (``remote=True``) also: this machine's host name
    (``socket.gethostname()`` and ``socket.getfqdn()``), any IP address of one of its
    interfaces (looked up again when an unknown address arrives, so a new interface counts),
    and the names given with ``--allow-host`` (for a DNS alias or a reverse proxy's name).
    ``extra`` names are allowed in both cases.
    """

    listen_host: str
    remote: bool = False
    extra: Iterable[str] = ()
    addresses: Callable[[], set[str]] = interface_addresses
    _names: set[str] = field(init=False, default_factory=set)
    _known_addresses: set[str] = field(init=False, default_factory=set)

    def __post_init__(self) -> None:
        self._names = set(LOOPBACK_NAMES) | {self.listen_host.lower()}
        self._names |= {host_name(name) or "" for name in self.extra} - {""}
        if self.remote:
            self._names |= {name.lower().rstrip(".") for name in host_names()}
            self._known_addresses = self.addresses()

    def allows(self, header: str | None) -> bool:
        """True when a request with this ``Host`` header (None: no header) may be answered."""
        name = host_name(header)
        if name is None:
            return False
        if name in self._names:
            return True
        if not self.remote:
            return False
        try:
            address = str(ipaddress.ip_address(name))
        except ValueError:
            return False  # a name we were not told about: what DNS rebinding sends
        if address not in self._known_addresses:
            self._known_addresses = self.addresses()
        return address in self._known_addresses


def _guarded(app: Callable, policy: HostPolicy) -> Callable:
    """``app`` answering only requests whose Host ``policy`` allows (else 403)."""

    def guarded_app(environ, start_response):  # noqa: ANN001, ANN202 - the WSGI signature
        if not policy.allows(environ.get("HTTP_HOST")):
            body = b"403 Forbidden: this Host is not allowed (see gpumem-tui exporter --allow-host)\n"
            start_response("403 Forbidden", [("Content-Type", "text/plain; charset=utf-8"),
                                             ("Content-Length", str(len(body)))])
            return [body]
        return app(environ, start_response)

    return guarded_app


def _server_class(max_connections: int, connection_seconds: float):  # noqa: ANN202 - a server class
    from prometheus_client.exposition import ThreadingWSGIServer

    class LimitedServer(ThreadingWSGIServer):
        """prometheus_client's thread-per-connection server with a cap and a deadline."""

        def __init__(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003 - socketserver's
            self._slots = threading.BoundedSemaphore(max_connections)
            self._open: dict[socket.socket, float] = {}  # connection -> when it must end
            self._open_lock = threading.Lock()
            super().__init__(*args, **kwargs)

        def process_request(self, request, client_address) -> None:  # noqa: ANN001
            if not self._slots.acquire(blocking=False):
                _refuse_busy(request)
                self.shutdown_request(request)
                return
            with self._open_lock:
                self._open[request] = time.monotonic() + connection_seconds
            try:
                super().process_request(request, client_address)
            except BaseException:  # the thread did not start: give the place back
                self._release(request)
                raise

        def process_request_thread(self, request, client_address) -> None:  # noqa: ANN001
            try:
                super().process_request_thread(request, client_address)
            finally:
                self._release(request)

        def _release(self, request: socket.socket) -> None:
            with self._open_lock:
                if self._open.pop(request, None) is not None:
                    self._slots.release()

        def service_actions(self) -> None:
            # Called by serve_forever about every poll_interval: end connections past their deadline
            # (shutdown wakes the thread blocked reading it; that thread then closes it).
            now = time.monotonic()
            with self._open_lock:
                late = [sock for sock, deadline in self._open.items() if deadline <= now]
            for sock in late:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

        def handle_error(self, request, client_address) -> None:  # noqa: ANN001
            pass  # a client that timed out or hung up is not worth a traceback on stderr

    return LimitedServer


def _refuse_busy(request: socket.socket) -> None:
    try:
        request.settimeout(1.0)
        request.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
    except OSError:
        pass


def serve_metrics(host: str, port: int, app: Callable, policy: HostPolicy, *,
                  read_timeout: float = READ_TIMEOUT, connection_seconds: float = CONNECTION_SECONDS,
                  max_connections: int = MAX_CONNECTIONS):  # noqa: ANN201 - (server, thread)
    """Serve the WSGI ``app`` on ``host:port`` in a daemon thread; returns ``(server, thread)``
    (``server.shutdown()`` stops it; ``port`` 0 picks a free one: ``server.server_address``).

    Raises:
        OSError: the address cannot be bound (in use, not an address of this machine).
    """
    from wsgiref.simple_server import WSGIRequestHandler, make_server

    class Handler(WSGIRequestHandler):
        timeout = read_timeout  # StreamRequestHandler sets it on the socket: each read waits at most this

        def log_message(self, format, *args) -> None:  # noqa: A002, ANN001, ANN002 - http.server's
            pass  # no access log on stderr (as prometheus_client's own server)

    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
    server_class = type("MetricsServer", (_server_class(max_connections, connection_seconds),),
                        {"address_family": family})
    server = make_server(host, port, _guarded(app, policy), server_class, handler_class=Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.5},
                              name="gpumem-tui-exporter-http", daemon=True)
    thread.start()
    return server, thread
