"""Read GPU fleet figures from a Prometheus server's HTTP API and fold them into host rows.

Headless (urllib + json only). Sources, both read with one instant query each refresh:

- our exporter (``gpumem-tui exporter``): ``gpumem_gpu_memory_used_bytes`` /
  ``..._total_bytes`` (bytes), ``gpumem_gpu_utilization_ratio`` (0-1),
  ``gpumem_process_memory_used_bytes`` and the probe peaks (bytes, NVML-used scope on CUDA);
- NVIDIA dcgm-exporter: ``DCGM_FI_DEV_FB_USED`` / ``DCGM_FI_DEV_FB_FREE`` in MiB (total = used
  + free, as dcgm-exporter's default counters give no total), ``DCGM_FI_DEV_GPU_UTIL`` in
  percent; labels ``gpu``, ``UUID``, ``modelName``, ``Hostname``
  (https://github.com/NVIDIA/dcgm-exporter, default-counters.csv).

A host is one Prometheus ``instance`` label. API: https://prometheus.io/docs/prometheus/latest/querying/api/
(``/api/v1/query``, ``/api/v1/query_range``; values are strings, "NaN"/"+Inf" possible).
Samples that are not finite, or lack ``instance``/``gpu``, are skipped, never shown.
"""

from __future__ import annotations

import json
import math
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

MIB = 1024 * 1024

#: one instant query reads every series the fleet view uses
FLEET_SELECTOR = (
    '{__name__=~"gpumem_gpu_memory_used_bytes|gpumem_gpu_memory_total_bytes|gpumem_gpu_utilization_ratio'
    '|gpumem_process_memory_used_bytes|gpumem_probe_measured_peak_bytes|gpumem_probe_predicted_peak_bytes'
    '|DCGM_FI_DEV_FB_USED|DCGM_FI_DEV_FB_FREE|DCGM_FI_DEV_GPU_UTIL"}'
)


class PrometheusError(RuntimeError):
    """The Prometheus API could not be read; ``str()`` is one line saying what happened."""


@dataclass(frozen=True)
class Sample:
    """One instant-vector element: its labels (``__name__`` included) and value."""

    labels: dict[str, str]
    value: float


class PrometheusClient:
    """Minimal client for the Prometheus HTTP API.

    Args:
        url: the server's base URL, e.g. ``http://127.0.0.1:9090``.
        timeout: seconds for each HTTP request (also sent as the query ``timeout``).
    Raises :class:`PrometheusError` (one line) for a refused connection, a timeout, an HTTP
    error, an answer that is not the Prometheus API (says what answered) or ``status: error``.
    """

    def __init__(self, url: str, timeout: float = 5.0) -> None:
        parsed = urllib.parse.urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise PrometheusError(f"{url!r} is not an http(s) URL")
        self.url = url.rstrip("/")
        self.timeout = timeout

    def _get(self, path: str, params: dict[str, Any]) -> Any:
        params = {**params, "timeout": f"{self.timeout:g}s"}
        full = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(full, timeout=self.timeout) as resp:
                body, ctype, status = resp.read(), resp.headers.get("Content-Type", ""), resp.status
        except urllib.error.HTTPError as exc:  # Prometheus answers 400/422/503 with a JSON error body
            body, ctype, status = exc.read(), exc.headers.get("Content-Type", ""), exc.code
        except TimeoutError:
            raise PrometheusError(f"{self.url}: no answer within {self.timeout:g} s") from None
        except urllib.error.URLError as exc:
            reason = exc.reason
            if isinstance(reason, TimeoutError) or "timed out" in str(reason):
                raise PrometheusError(f"{self.url}: no answer within {self.timeout:g} s") from None
            raise PrometheusError(f"{self.url}: {getattr(reason, 'strerror', None) or reason}") from None
        except OSError as exc:
            raise PrometheusError(f"{self.url}: {exc.strerror or exc}") from None
        try:
            doc = json.loads(body)
            if not isinstance(doc, dict) or "status" not in doc:
                raise ValueError
        except ValueError:
            head = body[:60].decode("utf-8", "replace").replace("\n", " ").strip()
            raise PrometheusError(f"{self.url} is not the Prometheus API: HTTP {status} {ctype or 'no content type'}"
                                  f", {head!r}") from None
        if doc.get("status") != "success":
            raise PrometheusError(f"Prometheus error ({doc.get('errorType', f'HTTP {status}')}): "
                                  f"{str(doc.get('error', ''))[:200]}")
        return doc.get("data")

    def query(self, promql: str) -> list[Sample]:
        """Instant query -> vector samples (non-finite values dropped)."""
        data = self._get("/api/v1/query", {"query": promql})
        if not isinstance(data, dict) or data.get("resultType") != "vector":
            raise PrometheusError(f"unexpected result for {promql[:60]!r}: {str(data)[:80]}")
        out = []
        for item in data.get("result", []):
            value = _number(item.get("value", [None, None])[1]) if isinstance(item, dict) else None
            if value is not None and isinstance(item.get("metric"), dict):
                out.append(Sample({str(k): str(v) for k, v in item["metric"].items()}, value))
        return out

    def query_range(self, promql: str, start: float, end: float, step: float) -> list[tuple[dict[str, str], list[tuple[float, float]]]]:
        """Range query -> [(labels, [(epoch seconds, value)])], non-finite points dropped."""
        data = self._get("/api/v1/query_range", {"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}",
                                                 "step": f"{max(step, 0.001):g}"})
        if not isinstance(data, dict) or data.get("resultType") != "matrix":
            raise PrometheusError(f"unexpected result for {promql[:60]!r}: {str(data)[:80]}")
        out = []
        for item in data.get("result", []):
            if not isinstance(item, dict) or not isinstance(item.get("metric"), dict):
                continue
            points = []
            for pair in item.get("values", []):
                try:
                    t, v = float(pair[0]), _number(pair[1])
                except (TypeError, ValueError, IndexError):
                    continue
                if v is not None:
                    points.append((t, v))
            out.append(({str(k): str(v) for k, v in item["metric"].items()}, points))
        return out


def _number(text: Any) -> float | None:
    try:
        v = float(text)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


@dataclass
class GpuRow:
    """One GPU of one host. Bytes; ``utilization`` 0-1; ``source`` "gpumem" or "dcgm"."""

    instance: str
    gpu: str
    uuid: str = ""
    name: str = ""
    used_bytes: float | None = None
    total_bytes: float | None = None
    utilization: float | None = None
    source: str = "gpumem"


@dataclass
class ProcessRow:
    """One process on one GPU (our exporter only; NVML per-process used, bytes)."""

    instance: str
    gpu: str
    pid: str
    user: str
    command: str
    used_bytes: float


@dataclass
class ProbeRow:
    """Predicted vs measured peak of one probed job (bytes; scope named by ``device``)."""

    instance: str
    pid: str
    device: str
    measured_bytes: float | None = None
    predicted_bytes: float | None = None


@dataclass
class HostRow:
    """One host (Prometheus ``instance``): its GPUs and what runs on them."""

    instance: str
    hostname: str = ""
    gpus: list[GpuRow] = field(default_factory=list)
    processes: list[ProcessRow] = field(default_factory=list)
    probes: list[ProbeRow] = field(default_factory=list)

    @property
    def used_bytes(self) -> float | None:
        """Sum of the GPUs' used bytes (None when no GPU reports it)."""
        values = [g.used_bytes for g in self.gpus if g.used_bytes is not None]
        return sum(values) if values else None

    @property
    def total_bytes(self) -> float | None:
        """Sum of the GPUs' total bytes (None when no GPU reports it)."""
        values = [g.total_bytes for g in self.gpus if g.total_bytes is not None]
        return sum(values) if values else None

    @property
    def utilization(self) -> float | None:
        """Mean utilisation of the GPUs that report it, 0-1."""
        values = [g.utilization for g in self.gpus if g.utilization is not None]
        return sum(values) / len(values) if values else None

    @property
    def biggest_process(self) -> ProcessRow | None:
        """The process using the most GPU memory on this host."""
        return max(self.processes, key=lambda p: p.used_bytes, default=None)

    def to_json(self) -> dict[str, Any]:
        """The ``fleet --once --json`` object of this host (bytes, utilisation 0-1)."""
        big = self.biggest_process
        return {
            "instance": self.instance, "hostname": self.hostname, "gpus": len(self.gpus),
            "memory_used_bytes": self.used_bytes, "memory_total_bytes": self.total_bytes,
            "utilization": self.utilization,
            "biggest_process": None if big is None else {
                "pid": big.pid, "user": big.user, "command": big.command, "gpu": big.gpu,
                "used_bytes": big.used_bytes},
            "probes": [{"pid": p.pid, "device": p.device, "measured_peak_bytes": p.measured_bytes,
                        "predicted_peak_bytes": p.predicted_bytes} for p in self.probes],
            "gpu_rows": [{"gpu": g.gpu, "uuid": g.uuid, "name": g.name, "memory_used_bytes": g.used_bytes,
                          "memory_total_bytes": g.total_bytes, "utilization": g.utilization, "source": g.source}
                         for g in self.gpus],
        }


def hosts_from_samples(samples: list[Sample]) -> list[HostRow]:
    """Fold one instant query of :data:`FLEET_SELECTOR` into host rows, sorted by instance.

    Our exporter's GPU figures win over dcgm-exporter's for the same instance and GPU.
    """
    hosts: dict[str, HostRow] = {}
    ours: dict[tuple[str, str], GpuRow] = {}
    dcgm: dict[tuple[str, str], GpuRow] = {}
    dcgm_free: dict[tuple[str, str], float] = {}
    probes: dict[tuple[str, str], ProbeRow] = {}
    for s in samples:
        lab = s.labels
        name, instance = lab.get("__name__", ""), lab.get("instance")
        if not instance:
            continue
        host = hosts.setdefault(instance, HostRow(instance))
        if name.startswith("gpumem_gpu_") and "gpu" in lab:
            row = ours.setdefault((instance, lab["gpu"]), GpuRow(instance, lab["gpu"], lab.get("uuid", ""), lab.get("name", "")))
            if name == "gpumem_gpu_memory_used_bytes":
                row.used_bytes = s.value
            elif name == "gpumem_gpu_memory_total_bytes":
                row.total_bytes = s.value
            elif name == "gpumem_gpu_utilization_ratio":
                row.utilization = s.value
        elif name.startswith("DCGM_FI_DEV_") and "gpu" in lab:
            key = (instance, lab["gpu"])
            row = dcgm.setdefault(key, GpuRow(instance, lab["gpu"], lab.get("UUID", ""), lab.get("modelName", ""), source="dcgm"))
            host.hostname = host.hostname or lab.get("Hostname", "")
            if name == "DCGM_FI_DEV_FB_USED":
                row.used_bytes = s.value * MIB
            elif name == "DCGM_FI_DEV_FB_FREE":
                dcgm_free[key] = s.value * MIB
            elif name == "DCGM_FI_DEV_GPU_UTIL":
                row.utilization = s.value / 100.0
        elif name == "gpumem_process_memory_used_bytes" and "pid" in lab:
            host.processes.append(ProcessRow(instance, lab.get("gpu", ""), lab["pid"], lab.get("user", ""),
                                             lab.get("command", ""), s.value))
        elif name.startswith("gpumem_probe_") and "pid" in lab:
            probe = probes.setdefault((instance, lab["pid"]), ProbeRow(instance, lab["pid"], lab.get("device", "")))
            if name == "gpumem_probe_measured_peak_bytes":
                probe.measured_bytes = s.value
            else:
                probe.predicted_bytes = s.value
    for key, row in dcgm.items():
        if key in dcgm_free and row.used_bytes is not None:
            row.total_bytes = row.used_bytes + dcgm_free[key]
    for key, row in {**dcgm, **ours}.items():
        hosts[key[0]].gpus.append(row)
    for (instance, _), probe in probes.items():
        hosts[instance].probes.append(probe)
    for host in hosts.values():
        host.gpus.sort(key=lambda g: (len(g.gpu), g.gpu))
        host.processes.sort(key=lambda p: -p.used_bytes)
    return sorted(hosts.values(), key=lambda h: h.instance)


@dataclass
class FleetState:
    """What the fleet view shows: the last good host rows and how fresh they are.

    ``notice`` is one line when the last refresh failed (the rows are then the last good
    ones, from ``updated_at``); ``retry_in`` the seconds until the next try (back-off).
    """

    hosts: list[HostRow] = field(default_factory=list)
    updated_at: float | None = None
    notice: str | None = None
    retry_in: float = 0.0
    refresh_seconds: float | None = None


class FleetPoller:
    """Refreshes a :class:`FleetState` from Prometheus with exponential back-off on failure.

    ``interval``: seconds between refreshes while healthy; after ``n`` failures in a row
    the next try waits ``min(interval * 2**n, max_backoff)``.
    """

    def __init__(self, client: PrometheusClient, interval: float = 5.0, max_backoff: float = 60.0) -> None:
        self.client = client
        self.interval = interval
        self.max_backoff = max_backoff
        self.failures = 0
        self.state = FleetState()

    def refresh(self) -> FleetState:
        """One refresh; never raises for what Prometheus answers. Returns the new state."""
        start = time.perf_counter()
        try:
            hosts = hosts_from_samples(self.client.query(FLEET_SELECTOR))
        except PrometheusError as exc:
            self.failures += 1
            self.state.notice = f"{exc} (showing data from {self._age()}; retrying)"
            self.state.retry_in = min(self.interval * 2 ** self.failures, self.max_backoff)
            return self.state
        self.failures = 0
        self.state = FleetState(hosts, time.time(), None, self.interval, time.perf_counter() - start)
        return self.state

    def _age(self) -> str:
        if self.state.updated_at is None:
            return "no refresh yet"
        return f"{time.time() - self.state.updated_at:.0f} s ago"

    def history(self, instance: str, seconds: float = 600.0, points: int = 120) -> dict[str, list[tuple[float, float]]]:
        """Memory used per GPU of ``instance`` over the last ``seconds`` (query_range), bytes.

        Keys are the GPU labels. Our exporter's series, else dcgm-exporter's (MiB -> bytes).
        Raises :class:`PrometheusError`.
        """
        end = time.time()
        step = max(seconds / points, 1.0)
        inst = instance.replace("\\", "\\\\").replace('"', '\\"')
        out: dict[str, list[tuple[float, float]]] = {}
        for labels, pts in self.client.query_range(f'DCGM_FI_DEV_FB_USED{{instance="{inst}"}} * {MIB}', end - seconds, end, step):
            out[labels.get("gpu", "?")] = pts
        for labels, pts in self.client.query_range(f'gpumem_gpu_memory_used_bytes{{instance="{inst}"}}', end - seconds, end, step):
            out[labels.get("gpu", "?")] = pts
        return out
