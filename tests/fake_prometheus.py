"""A fake Prometheus HTTP API for the fleet tests: an ``http.server`` in a thread that answers
``/api/v1/query`` and ``/api/v1/query_range`` from series the test sets, hostile ones included.

The answer to an instant query is chosen by what fleet asks (see :mod:`gpumem_tui.remote.fleet`):
the targets query (``up and on (job) ... <metric>``) gives the ``up`` series of the hosts of
that source, the last-up query gives ``last_up``, any other query gives the series set for
the metric name it names. A test may instead set ``raw`` (path -> bytes) to answer anything.
"""

from __future__ import annotations

import http.server
import json
import re
import threading
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

GiB = 2**30


def series(metric: dict[str, Any], value: Any, when: Any = 1_700_000_000.0) -> dict:
    """One instant-vector element as Prometheus writes it (the value as given, usually text)."""
    return {"metric": metric, "value": [when, value]}


@dataclass
class FakePrometheus:
    """Set ``vectors[metric name] = [series(...)]``, ``up[source] = [series(...)]``,
    ``last_up = [series(...)]``, ``ranges[metric name] = [{"metric":..., "values": [...]}]``."""

    vectors: dict[str, list[dict]] = field(default_factory=dict)
    up: dict[str, list[dict]] = field(default_factory=dict)
    last_up: list[dict] = field(default_factory=list)
    ranges: dict[str, list[dict]] = field(default_factory=dict)
    raw: dict[str, bytes] = field(default_factory=dict)
    asked: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                parsed = urllib.parse.urlparse(self.path)
                query = urllib.parse.parse_qs(parsed.query).get("query", [""])[0]
                fake.asked.append(query)
                body = fake.answer(parsed.path, query)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def answer(self, path: str, query: str) -> bytes:
        """The body for one request."""
        if path in self.raw:
            return self.raw[path]
        name = re.search(r"(gpumem_\w+|DCGM_\w+)", query)
        metric = name.group(1) if name else ""
        if path == "/api/v1/query_range":
            return _ok("matrix", self.ranges.get(metric, []))
        if query.startswith("up and on"):
            return _ok("vector", self.up.get("gpumem" if metric.startswith("gpumem") else "dcgm", []))
        if query.startswith("max_over_time(timestamp(up"):
            return _ok("vector", self.last_up)
        return _ok("vector", self.vectors.get(metric, []))

    def add_gpumem_host(self, instance: str, gpus: int = 1, used: Any = GiB, total: Any = 80 * GiB,
                        util: Any = "0.5", pid: str = "4242", command: str = "python train.py") -> None:
        """Our exporter's series for one host (values as Prometheus's text) and its ``up`` = 1."""
        for g in range(gpus):
            base = {"instance": instance, "job": "gpumem", "gpu": str(g), "name": "NVIDIA H100 80GB HBM3"}
            for metric, value in (("gpumem_gpu_memory_used_bytes", used), ("gpumem_gpu_memory_total_bytes", total),
                                  ("gpumem_gpu_utilization_ratio", util)):
                self.vectors.setdefault(metric, []).append(series({"__name__": metric, **base}, str(value)))
        proc = {"instance": instance, "job": "gpumem", "gpu": "0", "pid": pid, "command": command}
        self.vectors.setdefault("gpumem_process_memory_used_bytes", []).append(series(proc, str(used)))
        self.up.setdefault("gpumem", []).append(series({"__name__": "up", "instance": instance, "job": "gpumem"}, "1"))

    def set_down(self, instance: str, last_up: float | None) -> None:
        """``up`` = 0 for ``instance`` (its GPU series gone, as after a failed scrape)."""
        for metric in list(self.vectors):
            self.vectors[metric] = [s for s in self.vectors[metric] if s["metric"].get("instance") != instance]
        for source, items in self.up.items():
            for item in items:
                if item["metric"]["instance"] == instance:
                    item["value"][1] = "0"
        if last_up is not None:
            self.last_up.append(series({"instance": instance, "job": "gpumem"}, f"{last_up:.3f}"))

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _ok(kind: str, result: list[dict]) -> bytes:
    return json.dumps({"status": "success", "data": {"resultType": kind, "result": result}}).encode()
