"""The fleet seen through Prometheus: one row per host, from our exporter's metrics and
NVIDIA dcgm-exporter's (headless; the screen, :mod:`gpumem_tui.fleet_screen`, and ``fleet --once``,
:mod:`gpumem_tui.fleet_cli`, only print what it returns).

Prometheus is read through its HTTP API (``/api/v1/query``, ``/api/v1/query_range``; see
https://prometheus.io/docs/prometheus/latest/querying/api/) with the standard library. A host is
the ``instance`` label of the scraped target. Per GPU, our exporter's figures
(``gpumem_gpu_memory_used_bytes`` / ``_total_bytes``, ``gpumem_gpu_utilization_ratio``) are used
where a host has them, else dcgm-exporter's (``DCGM_FI_DEV_FB_USED`` and ``DCGM_FI_DEV_FB_FREE``
in MiB, so total = used + free, and ``DCGM_FI_DEV_GPU_UTIL`` in percent). Values that are NaN or
infinite are skipped, never shown as numbers.
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpumem_tui.units import MiB

__all__ = ["GpuRow", "HostRow", "PrometheusClient", "PrometheusError", "fleet_rows", "format_table"]

MAX_RESPONSE_BYTES = 64 * 1024 * 1024  # a Prometheus answer larger than this is refused


class PrometheusError(RuntimeError):
    """Prometheus cannot be read (down, timed out, an error, or not Prometheus); one line."""


class PrometheusClient:
    """Instant and range queries against one Prometheus server.

    Args:
        url: the server's base URL, e.g. ``http://127.0.0.1:9090``.
        timeout: seconds per request (also sent as the query's own ``timeout``).

    Raises (from the query methods):
        PrometheusError: the server is down or slow (the OS error or "timed out"), answers
            with an error (its ``error`` text), or is not Prometheus (says what answered).
    """

    def __init__(self, url: str, timeout: float = 5.0) -> None:
        parsed = urllib.parse.urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise PrometheusError(f"--prometheus wants an http(s) URL such as http://127.0.0.1:9090, got {url!r}")
        self.url = url.rstrip("/")
        self.timeout = timeout

    def _get(self, path: str, params: Mapping[str, str]) -> Any:
        query = urllib.parse.urlencode({**params, "timeout": f"{self.timeout:g}s"})
        address = f"{self.url}{path}?{query}"
        try:
            with urllib.request.urlopen(address, timeout=self.timeout) as resp:  # noqa: S310 - http(s) only
                body = resp.read(MAX_RESPONSE_BYTES + 1)
                kind = resp.headers.get("Content-Type", "")
        except urllib.error.HTTPError as exc:  # Prometheus answers 400/422/503 with a JSON error
            body, kind = exc.read(MAX_RESPONSE_BYTES + 1), exc.headers.get("Content-Type", "")
            if "json" not in kind:
                raise PrometheusError(f"{self.url} answered HTTP {exc.code} ({kind or 'no content type'}): "
                                      "is it a Prometheus server?") from None
        except TimeoutError:
            raise PrometheusError(f"{self.url}: no answer within {self.timeout:g} s") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, TimeoutError):
                raise PrometheusError(f"{self.url}: no answer within {self.timeout:g} s") from None
            raise PrometheusError(f"{self.url}: cannot connect ({reason})") from None
        if len(body) > MAX_RESPONSE_BYTES:
            raise PrometheusError(f"{self.url}: answer larger than {MAX_RESPONSE_BYTES // MiB} MiB")
        try:
            data = json.loads(body)
        except (ValueError, RecursionError):
            start = body[:60].decode("utf-8", "replace").replace("\n", " ")
            raise PrometheusError(
                f"{self.url} is not a Prometheus API: it answered {kind or 'no content type'} starting {start!r}"
            ) from None
        if not isinstance(data, dict) or "status" not in data:
            raise PrometheusError(f"{self.url} is not a Prometheus API: its JSON has no 'status'")
        if data["status"] != "success":
            raise PrometheusError(f"Prometheus error: {data.get('errorType', '?')}: {data.get('error', '?')}")
        return data.get("data")

    def query(self, promql: str) -> list[tuple[dict[str, str], float]]:
        """An instant vector: ``[(labels, value)]``; NaN and infinite values are left out."""
        data = self._get("/api/v1/query", {"query": promql})
        out = []
        for item in _result(data, "vector"):
            value = _number(item.get("value"))
            if value is not None:
                out.append((_labels(item), value))
        return out

    def query_range(self, promql: str, start: float, end: float, step: float) -> list[tuple[dict[str, str], list[tuple[float, float]]]]:
        """A range vector: ``[(labels, [(epoch seconds, value)])]`` (non-finite points left out)."""
        data = self._get("/api/v1/query_range", {"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}",
                                                 "step": f"{step:g}"})
        out = []
        for item in _result(data, "matrix"):
            values = item.get("values") if isinstance(item.get("values"), list) else []
            points = [(float(v[0]), n) for v in values if isinstance(v, list) and len(v) == 2
                      and (n := _number(v)) is not None]
            out.append((_labels(item), points))
        return out


def _result(data: Any, kind: str) -> list[dict]:
    if not isinstance(data, dict) or data.get("resultType") != kind or not isinstance(data.get("result"), list):
        raise PrometheusError(f"unexpected Prometheus answer: wanted a {kind}")
    return [item for item in data["result"] if isinstance(item, dict)]


def _labels(item: Mapping[str, Any]) -> dict[str, str]:
    metric = item.get("metric")
    return {str(k): str(v) for k, v in metric.items()} if isinstance(metric, dict) else {}


def _number(pair: Any) -> float | None:
    try:
        value = float(pair[1])
    except (TypeError, ValueError, IndexError):
        return None
    return value if math.isfinite(value) else None


@dataclass
class GpuRow:
    """One GPU of a host (bytes; utilization 0-1 or None)."""

    gpu: str
    name: str = ""
    used_bytes: int | None = None
    total_bytes: int | None = None
    utilization: float | None = None


@dataclass
class HostRow:
    """One host of the fleet: its GPUs, their sums, its biggest process and its probed jobs.

    ``source`` says whose metrics these are ("gpumem" or "dcgm"). ``biggest`` is
    ``(pid, command, bytes)``; ``probed`` lists ``(pid, measured peak, predicted peak)`` in bytes
    (predicted None when the exporter has no estimate).
    """

    host: str
    source: str
    gpus: list[GpuRow] = field(default_factory=list)
    biggest: tuple[str, str, int] | None = None
    probed: list[tuple[str, int | None, int | None]] = field(default_factory=list)

    @property
    def used_bytes(self) -> int | None:
        """Sum of the GPUs' used memory (None when none is known)."""
        known = [g.used_bytes for g in self.gpus if g.used_bytes is not None]
        return sum(known) if known else None

    @property
    def total_bytes(self) -> int | None:
        """Sum of the GPUs' total memory (None when none is known)."""
        known = [g.total_bytes for g in self.gpus if g.total_bytes is not None]
        return sum(known) if known else None

    @property
    def utilization(self) -> float | None:
        """Mean utilization of the GPUs that report one (0-1)."""
        known = [g.utilization for g in self.gpus if g.utilization is not None]
        return sum(known) / len(known) if known else None

    def to_json(self) -> dict[str, Any]:
        """The ``fleet --once --json`` row (bytes; utilization 0-1)."""
        return {
            "host": self.host, "source": self.source, "gpus": len(self.gpus),
            "used_bytes": self.used_bytes, "total_bytes": self.total_bytes, "utilization": self.utilization,
            "biggest_process": None if self.biggest is None else
            {"pid": self.biggest[0], "command": self.biggest[1], "used_bytes": self.biggest[2]},
            "probed": [{"pid": pid, "measured_peak_bytes": m, "predicted_peak_bytes": p} for pid, m, p in self.probed],
            "per_gpu": [g.__dict__ for g in self.gpus],
        }  # fmt: skip


def fleet_rows(client: PrometheusClient) -> list[HostRow]:
    """Every host Prometheus has GPU metrics of, sorted by host name.

    Raises:
        PrometheusError: see :class:`PrometheusClient`.
    """
    hosts: dict[str, HostRow] = {}

    def gpu(host: str, source: str, labels: Mapping[str, str], index_label: str) -> GpuRow:
        row = hosts.setdefault(host, HostRow(host, source))
        index = labels.get(index_label, "?")
        for existing in row.gpus:
            if existing.gpu == index:
                return existing
        new = GpuRow(index, labels.get("name") or labels.get("modelName", ""))
        row.gpus.append(new)
        return new

    for labels, value in client.query("gpumem_gpu_memory_used_bytes"):
        gpu(labels.get("instance", "?"), "gpumem", labels, "gpu").used_bytes = int(value)
    for labels, value in client.query("gpumem_gpu_memory_total_bytes"):
        gpu(labels.get("instance", "?"), "gpumem", labels, "gpu").total_bytes = int(value)
    for labels, value in client.query("gpumem_gpu_utilization_ratio"):
        gpu(labels.get("instance", "?"), "gpumem", labels, "gpu").utilization = min(max(value, 0.0), 1.0)
    ours = set(hosts)
    dcgm_free = {(lab.get("instance", "?"), lab.get("gpu", "?")): v for lab, v in client.query("DCGM_FI_DEV_FB_FREE")}
    for labels, value in client.query("DCGM_FI_DEV_FB_USED"):
        host = labels.get("instance", "?")
        if host in ours:
            continue  # our exporter on the same target says more
        row = gpu(host, "dcgm", labels, "gpu")
        row.used_bytes = int(value * MiB)
        free = dcgm_free.get((host, labels.get("gpu", "?")))
        row.total_bytes = None if free is None else int((value + free) * MiB)
    for labels, value in client.query("DCGM_FI_DEV_GPU_UTIL"):
        host = labels.get("instance", "?")
        if host not in ours:
            gpu(host, "dcgm", labels, "gpu").utilization = min(max(value / 100.0, 0.0), 1.0)
    for labels, value in client.query("gpumem_process_memory_used_bytes"):
        row = hosts.get(labels.get("instance", "?"))
        if row is not None and (row.biggest is None or value > row.biggest[2]):
            row.biggest = (labels.get("pid", "?"), labels.get("command", ""), int(value))
    predicted = {(lab.get("instance"), lab.get("pid")): int(v) for lab, v in client.query("gpumem_probe_predicted_peak_bytes")}
    for labels, value in client.query("gpumem_probe_measured_peak_bytes"):
        row = hosts.get(labels.get("instance", "?"))
        if row is not None:
            key = (labels.get("instance"), labels.get("pid"))
            row.probed.append((labels.get("pid", "?"), int(value), predicted.get(key)))
    for row in hosts.values():
        row.gpus.sort(key=lambda g: (len(g.gpu), g.gpu))
        row.probed.sort()
    return [hosts[name] for name in sorted(hosts)]


def format_table(rows: Sequence[HostRow]) -> str:
    """The host table as text (binary GiB, stated)."""
    from gpumem_tui.units import format_bytes

    lines = [f"{'HOST':<28} {'SRC':<6} {'GPUS':>4} {'USED / TOTAL (GiB = 2^30 B)':>30} {'UTIL':>5}  BIGGEST PROCESS"]
    for row in rows:
        used, total = row.used_bytes, row.total_bytes
        memory = f"{format_bytes(used) if used is not None else '?'} / {format_bytes(total) if total is not None else '?'}"
        util = f"{row.utilization * 100:.0f}%" if row.utilization is not None else "N/A"
        biggest = f"{row.biggest[0]} {format_bytes(row.biggest[2])} {row.biggest[1][:40]}" if row.biggest else "-"
        lines.append(f"{row.host[:28]:<28} {row.source:<6} {len(row.gpus):>4} {memory:>30} {util:>5}  {biggest}")
    return "\n".join(lines)
