"""Fleet view at scale: 128 hosts x 8 GPUs (issue 12 target: refresh <= 2 s, CPU < 5 % of a core
at one refresh per 5 s).

A separate process answers ``/api/v1/query`` like Prometheus would for the instant queries of
:func:`gpumem_tui.remote.fleet.read_fleet` (per GPU: our exporter's used/total/utilization series and
two processes, of which the biggest per host is answered to the ``topk`` query; every host's
``up`` = 1 to the targets query), so the HTTP transfers, JSON decoding and folding into host rows
are real; the server's own CPU is not counted.
Then the Textual screen draws the 128 host rows (headless ``run_test``) and that is timed too.

    PYTHONPATH=$PWD python benchmarks/fleet_refresh.py [--hosts 128] [--gpus 8] [--refreshes 20]

Prints: samples per refresh, median/max refresh wall time, CPU seconds per refresh (this
process: ``time.process_time``), the CPU share at one refresh per 5 s, the draw time, and the
CPU share of the running screen (refreshing every 5 s, drawing, idling) over ``--seconds``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
import urllib.request

SERVER = r"""
import http.server, json, re, sys, urllib.parse
hosts, gpus = int(sys.argv[1]), int(sys.argv[2])
result = []
for h in range(hosts):
    inst = f"node{h:03d}:9835"
    for g in range(gpus):
        base = {"instance": inst, "job": "gpumem", "gpu": str(g), "uuid": f"GPU-{h}-{g}", "name": "NVIDIA H100 80GB HBM3"}
        for name, value in (("gpumem_gpu_memory_used_bytes", (h + g) * 2**30), ("gpumem_gpu_memory_total_bytes", 80 * 2**30),
                            ("gpumem_gpu_utilization_ratio", g / 8)):
            result.append({"metric": {"__name__": name, **base}, "value": [1.0, str(value)]})
        for p in range(2):
            lab = {"__name__": "gpumem_process_memory_used_bytes", "instance": inst, "job": "gpumem", "gpu": str(g),
                   "pid": str(1000 + g * 2 + p), "user": "alice", "command": "python train.py --config big.yaml"}
            result.append({"metric": lab, "value": [1.0, str((p + 1) * 2**29)]})
by_name = {}
for item in result:
    by_name.setdefault(item["metric"]["__name__"], []).append(item)
by_name["gpumem_process_memory_used_bytes"] = list({i["metric"]["instance"]: i for i in sorted(
    by_name["gpumem_process_memory_used_bytes"], key=lambda i: float(i["value"][1]))}.values())  # topk by (instance) (1, ...)
by_name["up"] = [{"metric": {"__name__": "up", "instance": f"node{h:03d}:9835", "job": "gpumem"}, "value": [1.0, "1"]}
                 for h in range(hosts)]
bodies = {name: json.dumps({"status": "success", "data": {"resultType": "vector", "result": items}}).encode()
          for name, items in by_name.items()}
empty = json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}}).encode()
body_size = sum(map(len, bodies.values()))
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        query = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query).get("query", [""])[0]
        name = re.search(r"gpumem_\w+|DCGM_\w+", query)
        if query.startswith("up and on"):
            body = bodies["up"] if name and name.group(0).startswith("gpumem") else empty
        elif query.startswith("max_over_time"):
            body = empty
        else:
            body = bodies.get(name.group(0) if name else "", empty)
        self.send_response(200); self.send_header("Content-Type", "application/json"); self.end_headers(); self.wfile.write(body)
    def log_message(self, *a): pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], len(result), body_size, flush=True)
s.serve_forever()
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=128)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--refreshes", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=20.0, help="how long the running screen is measured")
    args = ap.parse_args()

    from gpumem_tui.remote.fleet import PrometheusClient
    from gpumem_tui.ui.fleet_screen import FleetPoller

    server = subprocess.Popen([sys.executable, "-c", SERVER, str(args.hosts), str(args.gpus)], stdout=subprocess.PIPE, text=True)
    try:
        port, samples, size = map(int, server.stdout.readline().split())
        url = f"http://127.0.0.1:{port}"
        urllib.request.urlopen(url + "/api/v1/query").read()  # warm the server
        poller = FleetPoller(PrometheusClient(url, timeout=30), interval=5)
        walls, cpus = [], []
        for _ in range(args.refreshes):
            w0, c0 = time.perf_counter(), time.process_time()
            state = poller.refresh()
            walls.append(time.perf_counter() - w0)
            cpus.append(time.process_time() - c0)
            assert state.notice is None and len(state.hosts) == args.hosts
        draw = asyncio.run(_draw_time(poller))
        screen_cpu = asyncio.run(_screen_cpu(poller, args.seconds))
    finally:
        server.kill()
        server.wait()
    cpu = statistics.median(cpus)
    print(f"fleet refresh: {args.hosts} hosts x {args.gpus} GPUs, {samples} samples, {size / 2**20:.1f} MiB JSON per refresh (11 instant queries)")
    print(f"  refresh wall: median {statistics.median(walls) * 1000:.0f} ms, max {max(walls) * 1000:.0f} ms (target <= 2000 ms)")
    print(f"  refresh CPU:  median {cpu * 1000:.0f} ms -> {cpu / 5 * 100:.1f} % of a core at one refresh per 5 s (target < 5 %)")
    print(f"  screen draw of {args.hosts} host rows: median {statistics.median(draw) * 1000:.0f} ms")
    print(f"  running screen (refresh every 5 s, draw, idle) for {args.seconds:.0f} s: "
          f"{screen_cpu / args.seconds * 100:.1f} % of a core (this process's CPU time / wall time)")


async def _draw_time(poller) -> list[float]:
    from gpumem_tui.ui.fleet_screen import FleetApp

    app = FleetApp(poller)
    times = []
    async with app.run_test(size=(160, 50)) as pilot:
        app.show(poller.state)
        await pilot.pause()
        for _ in range(5):
            t0 = time.perf_counter()
            app._draw()
            await pilot.pause()
            times.append(time.perf_counter() - t0)
    return times


async def _screen_cpu(poller, seconds: float) -> float:
    """CPU seconds this process spends while the screen runs ``seconds`` at one refresh per 5 s."""
    from gpumem_tui.ui.fleet_screen import FleetApp

    poller.interval = 5.0
    app = FleetApp(poller)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause(1.0)  # start-up is not the steady state
        c0 = time.process_time()
        await asyncio.sleep(seconds)
        return time.process_time() - c0


if __name__ == "__main__":
    main()
