"""textual-serve, guarded: who may connect, how many dashboards, and that every one ends.

Two small subclasses of textual-serve 1.1 (https://github.com/Textualize/textual-serve):

* :class:`DashboardSession` (of ``app_service.AppService``): starts the dashboard from an argv
  list (no shell) in its own process group, clamps resize messages, bounds the wait for room
  in the dashboard's input pipe, and ends the whole group within :data:`END_WITHIN_S` seconds
  of the socket closing (quit, then SIGTERM, then SIGKILL).
* :class:`GuardedServer` (of ``server.Server``): checks Host, Origin and the start token on
  every request (:mod:`gpumem_tui.remote.serve_access`), caps concurrent sessions, points the page
  at the address the browser used, and ends every dashboard when serve stops.

What is overridden, and why, is listed at each method with the textual-serve function it
replaces; nothing else of textual-serve changes.
"""

from __future__ import annotations

import asyncio
import html
import logging
import os
import shlex
import signal
import sys
from collections.abc import Sequence

from aiohttp import WSCloseCode, web
from textual_serve.app_service import AppService
from textual_serve.server import Server

from gpumem_tui.remote.serve_access import HostRule, origin_matches, parse_host, terminal_size, token_matches

log = logging.getLogger("gpumem-tui.serve")

#: Seconds a dashboard gets to quit when asked (Textual's web driver "quit" packet), then to
#: end after SIGTERM to its process group, before SIGKILL; the sum stays under END_WITHIN_S.
QUIT_GRACE_S = 1.5
TERM_GRACE_S = 1.5
END_WITHIN_S = 5.0

#: Paths that need the start token; /static serves textual-serve's own files (script, CSS).
TOKEN_PATHS = ("/", "/ws")
TOKEN_PREFIXES = ("/download/",)

#: The websocket close code for "the server is full, try later" (RFC 6455 section 7.4, IANA 1013).
TRY_AGAIN_LATER = WSCloseCode.TRY_AGAIN_LATER


# Run before the dashboard (Linux): prctl(PR_SET_PDEATHSIG = 1, SIGKILL) makes the kernel kill it
# when serve dies without ending it (SIGKILL, a crash), and survives the exec (prctl(2)). The
# parent is checked after the call, as serve may have died before it. argv: SERVE_PID ARGV...
_PARENT_DEATH_LAUNCHER = (
    "import ctypes, os, signal, sys\n"
    "if ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL) != 0: sys.exit('prctl failed')\n"
    "if os.getppid() != int(sys.argv[1]): sys.exit(1)\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


def with_parent_death_signal(argv: Sequence[str]) -> list[str]:
    """``argv`` run through :data:`_PARENT_DEATH_LAUNCHER` on Linux (elsewhere unchanged): the
    same process (it execs), killed by the kernel if serve dies first. ``argv[0]`` must be a path."""
    if not sys.platform.startswith("linux"):
        return list(argv)
    return [sys.executable, "-I", "-S", "-c", _PARENT_DEATH_LAUNCHER, str(os.getpid()), *argv]


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass  # already gone


class DashboardSession(AppService):
    """One browser session's dashboard process (a ``textual_serve.app_service.AppService``).

    ``argv`` is the dashboard's command line. ``live_groups`` is the server's set of process
    group ids still to be ended: the session adds its group when it starts the process and
    removes it once the group has been killed.
    """

    def __init__(self, argv: Sequence[str], live_groups: set[int], **kwargs) -> None:
        super().__init__(shlex.join(argv), **kwargs)
        self.argv = list(argv)
        self.live_groups = live_groups
        self._ending: asyncio.Task[None] | None = None

    async def _open_app_process(self, width: int = 80, height: int = 24) -> asyncio.subprocess.Process:
        """Overrides ``AppService._open_app_process``, which runs the command through a shell
        in serve's own process group: here it is exec'd directly as the leader of a new session
        (``start_new_session``), so that one ``killpg`` ends it and anything it started, and a
        Ctrl+C in serve's terminal reaches serve alone (serve then ends the dashboards); and
        the kernel ends it should serve die without doing so (:func:`with_parent_death_signal`)."""
        environment = self._build_environment(width=width, height=height)
        self._process = process = await asyncio.create_subprocess_exec(
            *with_parent_death_signal(self.argv), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=environment, start_new_session=True)
        self.live_groups.add(process.pid)
        assert process.stdin is not None
        self._stdin = process.stdin
        return process

    #: Seconds a write to the dashboard's input may wait for room in the pipe (64 KiB on Linux)
    #: before the session ends: a dashboard that stops reading would otherwise hold the message
    #: loop, and a closed socket would go unnoticed.
    input_stall_s = 10.0

    async def send_bytes(self, data: bytes) -> bool:
        """Overrides ``AppService.send_bytes`` (keys), whose drain waits without limit."""
        return await self._bounded(super().send_bytes(data))

    async def send_meta(self, data: dict[str, str | None | int | bool]) -> bool:
        """Overrides ``AppService.send_meta`` (resize, focus, quit), whose drain waits without limit."""
        return await self._bounded(super().send_meta(data))

    async def _bounded(self, write) -> bool:
        try:
            return await asyncio.wait_for(write, self.input_stall_s)
        except asyncio.TimeoutError:
            raise ConnectionError(f"the dashboard has not read its input for {self.input_stall_s:g} s") from None

    async def set_terminal_size(self, width: object, height: object) -> None:  # type: ignore[override]
        """Overrides ``AppService.set_terminal_size``, which forwards the browser's numbers as
        they come: here they are clamped (``serve_access.terminal_size``) and non-numbers ignored."""
        size = terminal_size(width, height)
        if size is not None:
            await super().set_terminal_size(*size)

    async def stop(self) -> None:
        """Overrides ``AppService.stop``, which asks the app to quit and then waits for it
        without limit (a busy dashboard never ended). Here the process group ends within
        :data:`END_WITHIN_S`; safe to call more than once and from several tasks."""
        if self._process is None:
            return
        if self._ending is None:
            self._ending = asyncio.ensure_future(self._end())
        await asyncio.shield(self._ending)  # a cancelled caller must not stop the ending half-way

    async def _end(self) -> None:
        process = self._process
        assert process is not None
        await self._download_manager.cancel_app_downloads(app_service_id=self.app_service_id)
        try:
            await asyncio.wait_for(self._quit(process), QUIT_GRACE_S)
        except (asyncio.TimeoutError, OSError):  # busy, or its stdin is full or closed
            _signal_group(process.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), TERM_GRACE_S)
            except asyncio.TimeoutError:  # it ignores or blocks SIGTERM
                _signal_group(process.pid, signal.SIGKILL)
                await process.wait()
        # Whatever the dashboard itself started is still in the group. Linux does not reuse a
        # process id while it names a live process group, so this reaches only that group.
        _signal_group(process.pid, signal.SIGKILL)
        self.live_groups.discard(process.pid)
        if self._task is not None:
            task, self._task = self._task, None
            try:
                await asyncio.wait_for(task, TERM_GRACE_S)  # it ends at the output's end of file
            except asyncio.TimeoutError:
                pass

    async def _quit(self, process: asyncio.subprocess.Process) -> None:
        """Asks the dashboard to quit (Textual's web driver "quit" packet) and waits for it."""
        if process.returncode is None:
            await self.send_meta({"type": "quit"})
        await process.wait()


def _page(status: int, title: str, text: str) -> web.Response:
    """A minimal HTML page (the refusals a browser user sees); ``text`` is escaped."""
    body = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>gpumem-tui: {html.escape(title)}</title>"
            f"</head><body><h1>{html.escape(title)}</h1><p>{html.escape(text)}</p></body></html>")
    return web.Response(status=status, text=body, content_type="text/html", headers=_PAGE_HEADERS)


# The page may not be framed by another site, nor leak its URL (with the token) as a Referer.
_PAGE_HEADERS = {"X-Frame-Options": "DENY", "Content-Security-Policy": "frame-ancestors 'none'",
                 "Referrer-Policy": "no-referrer", "Cache-Control": "no-store"}


class GuardedServer(Server):
    """A textual-serve ``Server`` for ``dashboard_argv`` that only its token holder can use.

    ``hosts``: the Host values accepted (:class:`~gpumem_tui.remote.serve_access.HostRule`);
    ``token``: the start token; ``max_sessions``: dashboards running at once (>= 1).
    ``live_groups`` holds the process groups of dashboards not yet ended, for a last sweep
    (:meth:`kill_leftovers`) after the event loop has stopped.
    """

    def __init__(self, dashboard_argv: Sequence[str], *, host: str, port: int, public_url: str,
                 hosts: HostRule, token: str, max_sessions: int) -> None:
        super().__init__(shlex.join(dashboard_argv), host=host, port=port, title="gpumem-tui",
                         public_url=public_url)
        self.dashboard_argv = list(dashboard_argv)
        self.hosts = hosts
        self.token = token
        self.max_sessions = max_sessions
        self.cookie_name = f"gpumem_tui_token_{port}"  # cookies are per host, not per port
        self.sessions: dict[DashboardSession, web.WebSocketResponse] = {}
        self.starting = 0  # websockets admitted whose session is not in `sessions` yet
        self.live_groups: set[int] = set()

    def initialize_logging(self) -> None:
        """Overrides ``Server.initialize_logging`` only to quiet aiohttp's access log: its
        request lines would write every ``?token=`` into the log."""
        super().initialize_logging()
        logging.getLogger("aiohttp.access").setLevel(logging.WARNING)

    async def on_startup(self, app: web.Application) -> None:
        """Overrides ``Server.on_startup``, which prints textual-serve's logo and URL on stdout:
        serve's stdout holds only its own URL lines (with the token)."""

    async def on_shutdown(self, app: web.Application) -> None:
        """Overrides ``Server.on_shutdown`` (empty): closes every session's websocket and ends
        every dashboard before aiohttp cancels the handlers."""
        closing = [websocket.close(code=WSCloseCode.GOING_AWAY, message=b"gpumem-tui serve is stopping")
                   for websocket in self.sessions.values()]
        await asyncio.gather(*closing, *(session.stop() for session in self.sessions), return_exceptions=True)

    def kill_leftovers(self) -> None:
        """SIGKILL every dashboard group not yet ended (after the loop stopped abnormally)."""
        for pgid in list(self.live_groups):
            _signal_group(pgid, signal.SIGKILL)
        self.live_groups.clear()

    async def _make_app(self) -> web.Application:
        """Overrides ``Server._make_app`` to put :meth:`_guard` in front of every route."""
        app = await super()._make_app()

        @web.middleware
        async def guard(request: web.Request, handler) -> web.StreamResponse:
            return await self._guard(request, handler)

        app.middlewares.append(guard)
        return app

    async def _guard(self, request: web.Request, handler) -> web.StreamResponse:
        """Refuses (403) a request whose Host or Origin is not this server, and a request for
        the page, the websocket or a download without the token; nothing starts before this."""
        host = parse_host(request.headers.get("Host"))
        if not self.hosts.allows(host):
            return _page(403, "Host not allowed",
                         f"This server does not answer to the host {request.headers.get('Host', '')!r}. Open "
                         f"the URL gpumem-tui serve printed, or start it with --allow-host NAME.")
        if not origin_matches(request.headers.get("Origin"), host):
            return _page(403, "Cross-origin request refused", "Only this server's own page may use it.")
        needs_token = request.path in TOKEN_PATHS or request.path.startswith(TOKEN_PREFIXES)
        from_query = request.query.get("token")
        if needs_token and not (token_matches(from_query, self.token)
                                or token_matches(request.cookies.get(self.cookie_name), self.token)):
            return _page(403, "Token required",
                         "Open the URL with ?token=... that gpumem-tui serve printed when it started.")
        response = await handler(request)
        if request.path == "/" and token_matches(from_query, self.token) and not response.prepared:
            # later requests (the websocket, Restart) carry the cookie instead of the query
            response.set_cookie(self.cookie_name, self.token, httponly=True, samesite="Strict", path="/")
        return response

    async def handle_index(self, request: web.Request) -> web.StreamResponse:
        """Overrides ``Server.handle_index``: refuses the page when the sessions are all taken,
        and writes the page's absolute URLs (script, websocket) for the address the browser used
        instead of ``--host`` (0.0.0.0 would send a remote browser to itself). The Host header
        has passed :meth:`_guard`. ``handle_index`` reads ``public_url`` without awaiting in
        between, so setting it per request is safe."""
        if self._full():
            return self._full_page()
        self.public_url = f"http://{request.headers['Host']}"
        response = await super().handle_index(request)
        response.headers.update(_PAGE_HEADERS)
        return response

    async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:
        """Overrides ``Server.handle_websocket``: the terminal size is clamped (non-numbers are
        refused, 400), a session over ``max_sessions`` gets a message and no dashboard, the
        dashboard is a :class:`DashboardSession`, and it ends when the socket closes."""
        size = terminal_size(request.query.get("width"), request.query.get("height"))
        if size is None:
            raise web.HTTPBadRequest(text="width and height must be whole numbers of cells")
        websocket = web.WebSocketResponse(heartbeat=15)
        if self._full():
            await websocket.prepare(request)
            await websocket.send_bytes(self._full_message().encode())
            await websocket.close(code=TRY_AGAIN_LATER, message=b"session limit reached")
            return websocket
        self.starting += 1  # counted before the first await: the cap holds under concurrency
        session: DashboardSession | None = None
        try:
            await websocket.prepare(request)
            session = DashboardSession(self.dashboard_argv, self.live_groups, write_bytes=websocket.send_bytes,
                                       write_str=websocket.send_str, close=websocket.close,
                                       download_manager=self.download_manager, debug=self.debug)
            self.sessions[session] = websocket
            self.starting -= 1
            await session.start(*size)
            await self._process_messages(websocket, session)
        except asyncio.CancelledError:
            await websocket.close()
        except Exception as error:  # a malformed message ends this session, never the server
            log.warning("session ended: %s: %s", type(error).__name__, error)
        finally:
            if session is None:
                self.starting -= 1
            else:
                try:
                    await session.stop()
                finally:  # counted until its dashboard is gone: never more than max_sessions run
                    self.sessions.pop(session, None)
        return websocket

    def _full(self) -> bool:
        return len(self.sessions) + self.starting >= self.max_sessions

    def _full_message(self) -> str:
        return (f"gpumem-tui serve: all {self.max_sessions} sessions are in use (--max-sessions "
                f"{self.max_sessions}); close another gpumem-tui tab, then reload this page.")

    def _full_page(self) -> web.Response:
        return _page(503, "Session limit reached", self._full_message())
