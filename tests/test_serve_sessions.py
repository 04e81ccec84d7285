"""serve's sessions end, are capped and clamped: the guarded textual-serve server in this test's
event loop, a real aiohttp websocket client, and a stub dashboard (tests/stub_dashboard.py)
that logs what reaches it and, in ``stubborn`` mode, ignores SIGTERM and never reads stdin.

The end-to-end versions with the real dashboard and ``gpumem-tui serve`` in its own process
are in tests/test_serve.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import sys
from pathlib import Path

import aiohttp
import psutil
import pytest
from aiohttp import web

from gpumem_tui.remote.serve_access import MAX_HEIGHT, MAX_WIDTH, MIN_HEIGHT, HostRule
from gpumem_tui.remote.serve_server import END_WITHIN_S, DashboardSession, QUIT_GRACE_S, TERM_GRACE_S, TRY_AGAIN_LATER, GuardedServer
from waiting import wait_async

STUB = Path(__file__).with_name("stub_dashboard.py")
TOKEN = "test-token-0123456789"
HANG_GUARD_S = 60  # only so that a broken build fails instead of hanging; not a speed target


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.asynccontextmanager
async def serving(log: Path, mode: str, max_sessions: int = 4):
    """A GuardedServer for the stub dashboard on a free loopback port; yields (server, base URL)."""
    port = _free_port()
    server = GuardedServer([sys.executable, str(STUB), str(log), mode], host="127.0.0.1", port=port,
                           public_url=f"http://127.0.0.1:{port}", hosts=HostRule.for_bind("127.0.0.1", port),
                           token=TOKEN, max_sessions=max_sessions)
    runner = web.AppRunner(await server._make_app())
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield server, f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()  # aiohttp's shutdown: GuardedServer.on_shutdown ends the dashboards
        leftovers = set(server.live_groups)
        server.kill_leftovers()
    assert leftovers == set(), "dashboards outlived the server's shutdown"


async def _log_entries(log: Path, key: str, count: int = 1) -> list[dict]:
    """The first ``count`` entries of the stub's log that have ``key``, once there are that many."""
    def logged() -> list[dict]:
        lines = log.read_text().splitlines() if log.exists() else []
        entries = [entry for entry in map(json.loads, lines) if key in entry]
        return entries[:count] if len(entries) >= count else []

    return await wait_async(logged, what=f"{count} {key!r} entries in the stub dashboard's log", poll=0.05)


async def _until(condition) -> None:
    await wait_async(condition, what="the session state the test needs", poll=0.05)


def _gone(*pids: int) -> bool:
    """True when none of ``pids`` is a live process (a zombie awaiting its reaper counts as gone)."""
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                return False
        except psutil.NoSuchProcess:
            pass
    return True


def test_the_grace_periods_end_a_dashboard_within_five_seconds():
    # quit packet, then SIGTERM to the group, then SIGKILL: the waits before SIGKILL are bounded
    assert QUIT_GRACE_S + TERM_GRACE_S < END_WITHIN_S <= 5.0


async def test_a_closed_socket_ends_a_dashboard_that_ignores_sigterm_and_its_children(tmp_path):
    log = tmp_path / "stub.log"
    async with serving(log, "stubborn") as (server, base), aiohttp.ClientSession() as client:
        async with client.ws_connect(f"{base}/ws?token={TOKEN}") as ws:
            [started] = await _log_entries(log, "pid")
            assert not _gone(started["pid"], started["child"]) and len(server.sessions) == 1
        await _until(lambda: not server.sessions)  # the handler has ended the session
        # SIGKILL went to the group; the dashboard is reaped, its child may still be a zombie
        await _until(lambda: _gone(started["pid"], started["child"]))
        assert server.live_groups == set()
        assert await _log_entries(log, "ignored") == [{"ignored": "SIGTERM"}]  # SIGTERM came first


async def test_a_dashboard_that_quits_when_asked_still_loses_its_children(tmp_path):
    log = tmp_path / "stub.log"
    async with serving(log, "polite") as (server, base), aiohttp.ClientSession() as client:
        async with client.ws_connect(f"{base}/ws?token={TOKEN}&width=80&height=24") as ws:
            [started] = await _log_entries(log, "pid")
        await _until(lambda: not server.sessions)
        await _until(lambda: _gone(started["pid"], started["child"]))
        metas = [entry["meta"]["type"] for entry in map(json.loads, log.read_text().splitlines()) if "meta" in entry]
        assert metas[-1] == "quit" and "ignored" not in log.read_text()
        assert ws.closed


async def test_sizes_are_clamped_at_start_and_on_resize(tmp_path):
    log = tmp_path / "stub.log"
    async with serving(log, "polite") as (server, base), aiohttp.ClientSession() as client:
        async with client.ws_connect(f"{base}/ws?token={TOKEN}&width=20000&height=1") as ws:
            [started] = await _log_entries(log, "pid")
            assert (started["columns"], started["rows"]) == (str(MAX_WIDTH), str(MIN_HEIGHT))
            for width, height in ((99999, -3), ("80", 24), (True, 24), (1.5, 24), (120, 40)):
                await ws.send_json(["resize", {"width": width, "height": height}])
            resizes = [entry["meta"] for entry in await _log_entries(log, "meta", 3)]
        # whole numbers (or their decimal text) pass, clamped and as numbers; True and 1.5 do not
        assert [(m["width"], m["height"]) for m in resizes] == [(MAX_WIDTH, MIN_HEIGHT), (80, 24), (120, 40)]
        assert MAX_HEIGHT >= 40


async def test_a_size_that_is_not_a_number_is_refused_before_any_dashboard(tmp_path):
    log = tmp_path / "stub.log"
    async with serving(log, "polite") as (server, base), aiohttp.ClientSession() as client:
        for query in ("width=abc&height=24", "width=80&height=1e9", "width=-5&height=24"):
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await client.ws_connect(f"{base}/ws?token={TOKEN}&{query}")
            assert refused.value.status == 400, query
        assert not log.exists() and not server.live_groups


async def test_sessions_are_capped_and_the_one_over_gets_a_message_and_no_dashboard(tmp_path):
    log = tmp_path / "stub.log"
    async with serving(log, "polite", max_sessions=2) as (server, base), aiohttp.ClientSession() as client:
        # five at once: the cap is counted before the first await, so exactly two get a dashboard
        sockets = await asyncio.gather(*(client.ws_connect(f"{base}/ws?token={TOKEN}") for _ in range(5)))
        refusals = []
        for ws in sockets:
            message = await ws.receive(timeout=HANG_GUARD_S)  # "ready" from a dashboard, or the refusal
            if message.data != b"ready":
                refusals.append(message.data.decode())
                assert (await ws.receive()).type == aiohttp.WSMsgType.CLOSE and ws.close_code == TRY_AGAIN_LATER
        assert len(refusals) == 3 and all("all 2 sessions are in use (--max-sessions 2)" in r for r in refusals)
        started = await _log_entries(log, "pid", 2)
        async with client.get(f"{base}/?token={TOKEN}") as page:
            assert page.status == 503 and "--max-sessions 2" in await page.text()
        assert len(server.sessions) == 2 and len(server.live_groups) == 2
        for ws in sockets:
            await ws.close()
        await _until(lambda: not server.sessions)
        await _until(lambda: _gone(*(p for entry in started for p in (entry["pid"], entry["child"]))))
        async with client.get(f"{base}/?token={TOKEN}") as page:  # free again
            assert page.status == 200
        lines = [json.loads(line) for line in log.read_text().splitlines()]
        assert len([entry for entry in lines if "pid" in entry]) == 2  # no third dashboard ever started


async def test_a_dashboard_that_stops_reading_its_input_does_not_hide_a_closed_socket(tmp_path, monkeypatch):
    # the stubborn stub never reads stdin: once the pipe is full a write waits for room, and
    # textual-serve's message loop (which would notice the close) waited with it, for ever
    monkeypatch.setattr(DashboardSession, "input_stall_s", 0.5)
    log = tmp_path / "stub.log"
    async with serving(log, "stubborn") as (server, base), aiohttp.ClientSession() as client:
        async with client.ws_connect(f"{base}/ws?token={TOKEN}") as ws:
            [started] = await _log_entries(log, "pid")
            for _ in range(40):  # 40 x 4 KiB of keys: more than the pipe holds
                await ws.send_json(["stdin", "x" * 4096])
        await _until(lambda: not server.sessions)
        await _until(lambda: _gone(started["pid"], started["child"]))


async def test_a_malformed_message_ends_its_session_not_the_server(tmp_path):
    log = tmp_path / "stub.log"
    async with serving(log, "polite") as (server, base), aiohttp.ClientSession() as client:
        async with client.ws_connect(f"{base}/ws?token={TOKEN}") as ws:
            [started] = await _log_entries(log, "pid")
            await ws.send_str("this is not json")
            await _until(lambda: not server.sessions)
        await _until(lambda: _gone(started["pid"], started["child"]))
        async with client.ws_connect(f"{base}/ws?token={TOKEN}") as ws:  # the server still serves
            await _log_entries(log, "pid", 2)


async def test_stopping_the_server_ends_every_dashboard(tmp_path):
    log = tmp_path / "stub.log"
    async with aiohttp.ClientSession() as client:
        async with serving(log, "stubborn") as (server, base):
            sockets = [await client.ws_connect(f"{base}/ws?token={TOKEN}") for _ in range(3)]
            started = await _log_entries(log, "pid", 3)
        # serving() ran aiohttp's cleanup with the sockets open, and found no group left (its assert)
        for ws in sockets:
            while (message := await ws.receive(timeout=HANG_GUARD_S)).type == aiohttp.WSMsgType.BINARY:
                pass  # the stub's "ready"
            assert message.type == aiohttp.WSMsgType.CLOSE and message.data == aiohttp.WSCloseCode.GOING_AWAY
        await _until(lambda: _gone(*(p for entry in started for p in (entry["pid"], entry["child"]))))
