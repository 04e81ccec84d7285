"""How long a ``gpumem-tui serve`` dashboard outlives its websocket (target: gone within 5 s).

Prints, per run, the seconds from the client closing its websocket to the dashboard process
being gone (no longer running, or a zombie), for

* ``real``: ``gpumem-tui serve`` in its own process over the fake NVML (tests/fleet_shim), the
  real dashboard, which quits when textual-serve asks it to;
* ``stubborn``: the guarded server in this process with tests/stub_dashboard.py in ``stubborn``
  mode (ignores SIGTERM, never reads stdin), so that only SIGKILL ends it;

and the seconds from SIGTERM to ``serve`` until serve has exited with its dashboards gone.

    .venv/bin/python benchmarks/serve_session_end.py [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import psutil
from aiohttp import web

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gpumem_tui.remote.serve_access import HostRule  # noqa: E402
from gpumem_tui.remote.serve_server import GuardedServer  # noqa: E402

TESTS = ROOT / "tests"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _gone_after(pids: list[int], since: float) -> float:
    while True:
        alive = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.NoSuchProcess:
                pass
        if not alive:
            return time.monotonic() - since
        await asyncio.sleep(0.01)


def _start_serve(out: Path) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS / "fleet_shim"), str(ROOT)]),
           "GPUMEM_FAKE_NVML": "2"}
    with out.open("w") as stdout:
        proc = subprocess.Popen([sys.executable, "-m", "gpumem_tui", "serve", "--port", str(_free_port())],
                                env=env, stdout=stdout, stderr=subprocess.DEVNULL)
    while not (urls := re.findall(r"^http://\S+token=\S+$", out.read_text(), re.MULTILINE)):
        time.sleep(0.1)
    return proc, urls[0]


async def _connect(client: aiohttp.ClientSession, url: str) -> aiohttp.ClientWebSocketResponse:
    ws_url = url.replace("http://", "ws://").replace("/?token=", "/ws?token=")
    for _ in range(100):  # the port may not listen yet
        try:
            ws = await client.ws_connect(ws_url)
            await ws.receive()  # the dashboard's first output: it is up
            return ws
        except aiohttp.ClientConnectorError:
            await asyncio.sleep(0.2)
    raise RuntimeError("serve did not answer")


async def real_runs(runs: int) -> tuple[list[float], list[float]]:
    closed, stopped = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(runs):
            proc, url = _start_serve(Path(tmp) / f"serve{run}.out")
            async with aiohttp.ClientSession() as client:
                ws = await _connect(client, url)
                [dashboard] = psutil.Process(proc.pid).children()
                start = time.monotonic()
                await ws.close()
                closed.append(await _gone_after([dashboard.pid], start))
                sockets = [await _connect(client, url) for _ in range(2)]
                dashboards = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
                start = time.monotonic()
                proc.send_signal(signal.SIGTERM)
                while proc.poll() is None:
                    await asyncio.sleep(0.01)
                stopped.append(await _gone_after(dashboards, start))
                for ws in sockets:
                    await ws.close()
    return closed, stopped


async def stubborn_runs(runs: int) -> list[float]:
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(runs):
            log, port = Path(tmp) / f"stub{run}.log", _free_port()
            server = GuardedServer([sys.executable, str(TESTS / "stub_dashboard.py"), str(log), "stubborn"],
                                   host="127.0.0.1", port=port, public_url=f"http://127.0.0.1:{port}",
                                   hosts=HostRule.for_bind("127.0.0.1", port), token="t", max_sessions=4)
            runner = web.AppRunner(await server._make_app())
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", port).start()
            try:
                async with aiohttp.ClientSession() as client:
                    ws = await client.ws_connect(f"http://127.0.0.1:{port}/ws?token=t")
                    await ws.receive()  # the stub's "ready"
                    started = json.loads(log.read_text().splitlines()[0])
                    start = time.monotonic()
                    await ws.close()
                    times.append(await _gone_after([started["pid"], started["child"]], start))
            finally:
                await runner.cleanup()
                server.kill_leftovers()
    return times


def _line(name: str, values: list[float]) -> str:
    each = ", ".join(f"{v:.2f}" for v in values)
    return f"{name:<34} median {statistics.median(values):.2f} s  max {max(values):.2f} s  ({each})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    runs = parser.parse_args().runs
    closed, stopped = asyncio.run(real_runs(runs))
    stubborn = asyncio.run(stubborn_runs(runs))
    print(_line("real dashboard, socket closed", closed))
    print(_line("stubborn dashboard, socket closed", stubborn))
    print(_line("SIGTERM to serve, 2 dashboards", stopped))


if __name__ == "__main__":
    main()
