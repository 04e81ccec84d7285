"""gpumem-tui serve end to end: ``gpumem-tui serve`` in its own process, real HTTP and websocket
clients (aiohttp), real dashboards (over the fake NVML of tests/fleet_shim).

Covered: the token URL on stdout and the token required (page and websocket, missing or wrong),
foreign Host and Origin refused before any dashboard starts, the page pointing back at the
(allowed) address the browser used, huge sizes clamped, a closed socket ending its dashboard,
SIGTERM/SIGINT to serve leaving no dashboard, and the one-line CLI errors.

The same rules in-process with a stub dashboard (stubborn dashboards, the session cap, resize
messages): tests/test_serve_sessions.py; the page in headless Chromium: tests/test_serve_browser.py.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import psutil
import pytest
from cli_inprocess import run_cli

from gpumem_tui.remote.serve import dashboard_argv
from waiting import wait_until

TESTS = Path(__file__).resolve().parent
HANG_GUARD_S = 60  # only so that a broken build fails instead of hanging; not a speed target


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_served_dashboard_is_readonly_unless_signals_are_allowed():
    assert dashboard_argv(["--interval", "2"], allow_signals=False)[-4:] == ["dashboard", "--interval", "2", "--readonly"]
    assert "--readonly" not in dashboard_argv([], allow_signals=True)
    assert dashboard_argv(["--readonly"], allow_signals=False).count("--readonly") == 1
    assert dashboard_argv(["--probe-dir", "a b"], allow_signals=False)[-2] == "a b"  # an argv: no shell


def _serve(*args, timeout=30):
    """``gpumem-tui serve ARGS`` refusing its input, in this process (tests/cli_inprocess.py): the
    same exit code and output without a child interpreter; the tests below run serve for real."""
    return run_cli("serve", *args, timeout=timeout)


def _one_line_exit_2(r: subprocess.CompletedProcess, says: str) -> None:
    assert r.returncode == 2 and says in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr and r.stdout == ""


def test_port_in_use_and_bad_port_are_one_line_exit_2():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        _one_line_exit_2(_serve("--port", str(busy.getsockname()[1])), "cannot listen")
    _one_line_exit_2(_serve("--port", "70000"), "--port must be 1-65535")


def test_a_host_that_cannot_be_bound_is_one_line_exit_2():
    # 203.0.113.7 is TEST-NET-3 (RFC 5737): no interface here has it, and binding needs no DNS
    _one_line_exit_2(_serve("--host", "203.0.113.7", "--port", str(_free_port())), "cannot listen on 203.0.113.7:")
    _one_line_exit_2(_serve("--host", "", "--port", str(_free_port())), "--host must not be empty")


def test_signals_off_loopback_need_the_explicit_flag_and_bad_flags_are_one_line():
    port = str(_free_port())
    _one_line_exit_2(_serve("--host", "0.0.0.0", "--port", port, "--allow-signals"), "add --allow-remote-signals")
    # with the flag the check passes; this address cannot be bound, so serve stops there
    _one_line_exit_2(_serve("--host", "203.0.113.7", "--port", port, "--allow-signals", "--allow-remote-signals"),
                     "cannot listen on 203.0.113.7:")
    for args, says in ((["--allow-remote-signals"], "only confirms --allow-signals"),
                       (["--max-sessions", "0"], "--max-sessions: must be > 0"),
                       (["--allow-host", "gpubox.example:80"], "--allow-host must be a host name"),
                       (["--allow-host", "a b"], "--allow-host must be a host name")):
        _one_line_exit_2(_serve("--port", port, *args), says)


@dataclass
class Served:
    """A running ``gpumem-tui serve``: its process, port, token and printed URLs."""

    proc: subprocess.Popen
    port: int
    token: str
    urls: list[str]
    stderr_path: Path

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def dashboards(self) -> list[psutil.Process]:
        return psutil.Process(self.proc.pid).children(recursive=True)


def _start_serve(tmp_path: Path, *args: str) -> Served:
    """Starts serve over the fake NVML and waits for its URL lines on stdout and for the port."""
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS / "fleet_shim"), str(TESTS.parent)]),
           "GPUMEM_FAKE_NVML": "2"}
    out, err = tmp_path / f"serve-{port}.out", tmp_path / f"serve-{port}.err"
    with out.open("w") as stdout, err.open("w") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "gpumem_tui", "serve", "--port", str(port), *args],
                                env=env, stdout=stdout, stderr=stderr)
    def listening() -> Served | None:
        urls = re.findall(r"^(http://\S+/\?token=(\S+))$", out.read_text(), re.MULTILINE)
        if urls:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=2).close()
                return Served(proc, port, urls[0][1], [u for u, _ in urls], err)
            except OSError:
                pass
        assert proc.poll() is None, f"serve exited early: {err.read_text()}"
        return None

    return wait_until(listening, what="serve to print its URL and listen", poll=0.2)


def _stop(served: Served) -> None:
    """Ends serve and, should a test have failed half-way, any dashboard it left."""
    left = served.dashboards() if served.proc.poll() is None else []
    served.proc.terminate()
    try:
        served.proc.wait(timeout=HANG_GUARD_S)
    finally:
        for process in left:
            try:
                process.kill()
            except psutil.NoSuchProcess:
                pass


@pytest.fixture(scope="module")
def loopback_serve(tmp_path_factory):
    served = _start_serve(tmp_path_factory.mktemp("serve"))
    yield served
    _stop(served)


@pytest.fixture
def fresh_serve(tmp_path):
    """Starts serve with the given arguments; ends every one started at teardown."""
    started: list[Served] = []

    def start(*args: str) -> Served:
        started.append(_start_serve(tmp_path, *args))
        return started[-1]

    yield start
    for served in started:
        _stop(served)


async def _status(client: aiohttp.ClientSession, url: str, **headers: str) -> int:
    async with client.get(url, headers=headers, allow_redirects=False) as response:
        return response.status


async def _ws_refused(client: aiohttp.ClientSession, url: str, **headers: str) -> int:
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await client.ws_connect(url, headers=headers)
    return refused.value.status


async def test_the_token_url_is_printed_and_nothing_starts_without_it(loopback_serve):
    served = loopback_serve
    assert served.urls == [f"http://127.0.0.1:{served.port}/?token={served.token}"]
    assert re.fullmatch(r"[A-Za-z0-9_-]{43,}", served.token)
    wrong = served.token[:-1] + ("A" if served.token[-1] != "A" else "B")
    async with aiohttp.ClientSession() as client:
        for query in ("", "?token=", f"?token={wrong}", f"?token={served.token[:-1]}"):
            assert await _status(client, f"{served.base}/{query}") == 403, query
            assert await _ws_refused(client, f"{served.base}/ws{query}") == 403, query
        assert await _ws_refused(client, f"{served.base}/ws", Cookie=f"gpumem_tui_token_{served.port}={wrong}") == 403
        assert await _status(client, f"{served.base}/download/anything") == 403
    assert served.dashboards() == []


async def test_a_foreign_host_or_origin_is_refused_before_any_dashboard(loopback_serve):
    served = loopback_serve
    token = f"?token={served.token}"
    async with aiohttp.ClientSession() as client:
        # DNS rebinding: the attacker's name resolves here, the browser sends it as Host
        for host in (f"evil.example:{served.port}", f"localhost.evil.example:{served.port}",
                     f"127.0.0.1:{served.port + 1}", "127.0.0.1", '"><script>alert(1)</script>'):
            assert await _status(client, f"{served.base}/{token}", Host=host) == 403, host
            assert await _ws_refused(client, f"{served.base}/ws{token}", Host=host) == 403, host
        # another site's page opening our websocket (or fetching the page) sends its Origin
        for origin in ("http://evil.example", f"http://evil.example:{served.port}", "null",
                       f"https://127.0.0.1:{served.port}", f"http://127.0.0.1:{served.port + 1}"):
            assert await _ws_refused(client, f"{served.base}/ws{token}", Origin=origin) == 403, origin
            assert await _status(client, f"{served.base}/{token}", Origin=origin) == 403, origin
    assert served.dashboards() == []


async def test_the_token_sets_a_strict_cookie_that_later_requests_may_use(loopback_serve):
    served = loopback_serve
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as client:
        async with client.get(f"{served.base}/?token={served.token}", headers={"Origin": served.base}) as page:
            assert page.status == 200 and f'ws://127.0.0.1:{served.port}/ws' in await page.text()
            cookie = page.cookies[f"gpumem_tui_token_{served.port}"]
            assert cookie.value == served.token and cookie["httponly"] and cookie["samesite"] == "Strict"
            assert page.headers["X-Frame-Options"] == "DENY" and page.headers["Referrer-Policy"] == "no-referrer"
        async with client.get(f"{served.base}/") as page:  # the cookie alone
            assert page.status == 200
        for host in (f"localhost:{served.port}", f"[::1]:{served.port}"):  # loopback names are this server
            async with client.get(f"{served.base}/?token={served.token}", headers={"Host": host}) as page:
                assert page.status == 200 and f"ws://{host}/ws" in await page.text()


async def _first_output(ws: aiohttp.ClientWebSocketResponse) -> None:
    """Waits for the dashboard's first terminal output (it is up and drawing)."""
    message = await ws.receive(timeout=HANG_GUARD_S)
    assert message.type == aiohttp.WSMsgType.BINARY, message


async def test_a_huge_terminal_is_clamped_and_the_dashboard_ends_with_its_socket(fresh_serve):
    served = fresh_serve()
    async with aiohttp.ClientSession() as client:
        ws = await client.ws_connect(f"{served.base}/ws?token={served.token}&width=20000&height=20000")
        await _first_output(ws)
        [dashboard] = served.dashboards()
        assert dashboard.cmdline()[-2:] == ["dashboard", "--readonly"]
        assert (dashboard.environ()["COLUMNS"], dashboard.environ()["ROWS"]) == ("500", "200")
        assert os.getpgid(dashboard.pid) == dashboard.pid  # its own process group, ended as one
        await ws.close()
        gone, alive = psutil.wait_procs([dashboard], timeout=HANG_GUARD_S)
        assert alive == [] and served.proc.poll() is None  # the dashboard ended, serve did not


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_stopping_serve_leaves_no_dashboard(fresh_serve, signum):
    served = fresh_serve()
    async with aiohttp.ClientSession() as client:
        sockets = [await client.ws_connect(f"{served.base}/ws?token={served.token}") for _ in range(2)]
        for ws in sockets:
            await _first_output(ws)
        descendants = served.dashboards()
        assert len(descendants) >= 2
        served.proc.send_signal(signum)
        assert served.proc.wait(timeout=HANG_GUARD_S) == 0
        # serve waited for each dashboard before exiting: none is left to re-parent to PID 1
        still_running = [p for p in descendants if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        assert still_running == []
        for ws in sockets:
            await ws.close()


async def test_on_every_interface_the_page_points_back_at_an_allowed_address(fresh_serve):
    # served on 0.0.0.0, a remote browser must not be told to open ws://0.0.0.0/...
    served = fresh_serve("--host", "0.0.0.0", "--allow-host", "gpubox.example")
    port, token = served.port, f"?token={served.token}"
    assert served.urls == [f"http://{socket.gethostname()}:{port}/{token}", f"http://127.0.0.1:{port}/{token}"]
    assert "warning: serving on 0.0.0.0, not loopback" in served.stderr_path.read_text()
    async with aiohttp.ClientSession() as client:
        for host in (f"gpubox.example:{port}", f"{socket.gethostname()}:{port}", f"[::1]:{port}"):
            async with client.get(f"{served.base}/{token}", headers={"Host": host}) as page:
                text = await page.text()
                assert page.status == 200 and f"ws://{host}/ws" in text and f"http://{host}/static/js/textual.js" in text
                assert "0.0.0.0" not in text
        assert await _status(client, f"{served.base}/{token}", Host=f"evil.example:{port}") == 403


async def test_a_dashboard_does_not_outlive_serve_killed_outright(fresh_serve):
    # SIGKILL gives serve no chance to end its dashboards: the kernel does (PR_SET_PDEATHSIG)
    served = fresh_serve()
    async with aiohttp.ClientSession() as client:
        ws = await client.ws_connect(f"{served.base}/ws?token={served.token}")
        await _first_output(ws)
        [dashboard] = served.dashboards()
        served.proc.kill()
        served.proc.wait(timeout=HANG_GUARD_S)
        gone, alive = psutil.wait_procs([dashboard], timeout=HANG_GUARD_S)
        assert alive == []
        await ws.close()
