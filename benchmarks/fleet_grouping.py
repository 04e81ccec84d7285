"""Fleet at 100k series: grouping into host rows, parsing a large answer, refusing a hostile one
(issue: grouping was quadratic, 100k series over 60 s; a 63 MB answer of small objects took
1.7 GB). Target: grouping 100k series <= 2 s.

    PYTHONPATH=$PWD python benchmarks/fleet_grouping.py [--series 100000]

Prints:
- grouping time of :func:`gpumem_tui.remote.fleet.read_fleet` over a client that returns prebuilt
  answers (no HTTP, no JSON): ``--series`` GPU series in each of our exporter's three GPU
  queries, spread over hosts of 8 GPUs, then all on one host (the old worst case);
- one answer of ``--series`` series served over HTTP: its size, the time to read and parse it
  (:meth:`PrometheusClient.query`) and the peak RSS (VmHWM) of a fresh process doing it,
  before the query (the answer's bytes held by its server) and after;
- hostile answers (over the byte limit of tiny objects; under it with millions of values;
  just under both limits, the worst that is decoded): the time to refuse or read each and
  that process's peak RSS.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time

CHILD = r"""
import http.server, json, sys, threading, time
from gpumem_tui.remote.fleet_prometheus import PrometheusClient, PrometheusError
body = open(sys.argv[1], "rb").read()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Type", "application/json"); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
threading.Thread(target=s.serve_forever, daemon=True).start()
def peak_mib():  # VmHWM: this process's peak RSS (unlike ru_maxrss, not inherited through exec)
    line = next(l for l in open("/proc/self/status") if l.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024
before = peak_mib()
t0 = time.perf_counter()
try:
    outcome = f"{len(PrometheusClient(f'http://127.0.0.1:{s.server_address[1]}', timeout=60).query('x'))} series"
except PrometheusError as exc:
    outcome = f"refused: {exc}"
took = time.perf_counter() - t0
print(json.dumps({"seconds": took, "outcome": outcome, "rss_before_mib": before, "rss_peak_mib": peak_mib()}))
"""


class PrebuiltClient:
    """Answers fleet's queries from prebuilt series (keyed by the metric name in the query)."""

    def __init__(self, answers: dict) -> None:
        self.answers = answers

    def query(self, promql: str):
        from gpumem_tui.remote.fleet_prometheus import Answer

        found = re.search(r"(gpumem_\w+|DCGM_\w+)", promql)
        if promql.startswith(("up and on", "max_over_time")):
            return Answer()
        return self.answers.get(found.group(1) if found else "", Answer())


def _answers(series: int, gpus_per_host: int) -> dict:
    from gpumem_tui.remote.fleet_prometheus import Answer

    out = {}
    for metric, value in (("gpumem_gpu_memory_used_bytes", 2.0**30), ("gpumem_gpu_memory_total_bytes", 80 * 2.0**30),
                          ("gpumem_gpu_utilization_ratio", 0.5)):
        out[metric] = Answer(({"instance": f"node{i // gpus_per_host:06d}:9835", "gpu": str(i % gpus_per_host),
                               "name": "NVIDIA H100 80GB HBM3"}, value) for i in range(series))
    return out


def _grouping(series: int, gpus_per_host: int) -> tuple[float, int]:
    from gpumem_tui.remote.fleet import read_fleet

    client = PrebuiltClient(_answers(series, gpus_per_host))
    t0 = time.perf_counter()
    reading = read_fleet(client)
    return time.perf_counter() - t0, len(reading.hosts)


def _served(body: bytes, path: str) -> dict:
    with open(path, "wb") as out:
        out.write(body)
    proc = subprocess.run([sys.executable, "-c", CHILD, path], capture_output=True, text=True, timeout=600, check=True)
    return json.loads(proc.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--series", type=int, default=100_000)
    ap.add_argument("--tmp", default="/tmp/fleet_grouping_answer.json", help="where the served answer is written")
    args = ap.parse_args()
    from gpumem_tui.remote.fleet_prometheus import MAX_JSON_VALUES, MAX_RESPONSE_BYTES

    for gpus, what in ((8, "spread over hosts of 8 GPUs"), (args.series, "all on one host")):
        took, hosts = _grouping(args.series, gpus)
        print(f"grouping {args.series} series x 3 queries, {what} ({hosts} hosts): {took:.2f} s (target <= 2 s)")
    result = [{"metric": {"__name__": "gpumem_gpu_memory_used_bytes", "instance": f"node{i // 8:06d}:9835",
                          "job": "gpumem", "gpu": str(i % 8), "uuid": f"GPU-{i:08d}", "name": "NVIDIA H100 80GB HBM3"},
               "value": [1.7e9, str(2**30 + i)]} for i in range(args.series)]
    body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()
    r = _served(body, args.tmp)
    print(f"one answer of {args.series} series ({len(body) / 2**20:.1f} MiB): read + parsed in {r['seconds']:.2f} s, "
          f"{r['outcome']}; process peak RSS {r['rss_peak_mib']:.0f} MiB (before: {r['rss_before_mib']:.0f} MiB)")
    tiny = b"[" + b"{}," * (MAX_RESPONSE_BYTES // 3 + 1) + b"{}]"
    many = b'{"status":"success","data":{"resultType":"vector","result":[' + b"[]," * (MAX_JSON_VALUES + 1) + b"[]]}}"
    worst = b'{"status":"success","data":{"resultType":"vector","result":[' + b'"ab",' * (MAX_JSON_VALUES - 100) + b'"ab"]}}'
    for hostile, what in ((tiny, "tiny objects over the byte limit"), (many, "values over the value limit"),
                          (worst, "2-character strings just under the value limit (decoded)")):
        r = _served(hostile, args.tmp)
        print(f"hostile answer, {len(hostile) / 2**20:.1f} MiB of {what}: {r['outcome'][:70]} in {r['seconds']:.2f} s; "
              f"process peak RSS {r['rss_peak_mib']:.0f} MiB (before: {r['rss_before_mib']:.0f} MiB)")


if __name__ == "__main__":
    main()
