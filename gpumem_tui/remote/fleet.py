"""The fleet seen through Prometheus: one row per host, from our exporter's metrics and
NVIDIA dcgm-exporter's (headless; the screen, :mod:`gpumem_tui.ui.fleet_screen`, and ``fleet --once``,
:mod:`gpumem_tui.remote.fleet_cli`, only print what it returns).

Prometheus is read with :class:`gpumem_tui.remote.fleet_prometheus.PrometheusClient`. A host is the
``instance`` label of the scraped target. Per GPU, our exporter's figures
(``gpumem_gpu_memory_used_bytes`` / ``_total_bytes``, ``gpumem_gpu_utilization_ratio``) are used
where a host has them, else dcgm-exporter's (``DCGM_FI_DEV_FB_USED`` and ``DCGM_FI_DEV_FB_FREE``
in MiB, so total = used + free, and ``DCGM_FI_DEV_GPU_UTIL`` in percent; field list:
https://docs.nvidia.com/datacenter/dcgm/latest/dcgm-api/dcgm-api-field-ids.html).

Every value is checked before it is shown: a byte count must be finite, >= 0 and at most
:data:`MAX_PLAUSIBLE_BYTES`; a utilization within 0-100 %; anything else is N/A (None) and
counted in the reading's notices, never shown as a number.

Targets: Prometheus's synthetic ``up`` series (1 when the last scrape succeeded, 0 when it
failed; https://prometheus.io/docs/concepts/jobs_instances/) is read for every target of a job
that reported GPU metrics in the last :data:`SEEN_WINDOW`; a target whose ``up`` is 0 is a
down row with the time it was last up (``timestamp(up == 1)`` over that window, at
:data:`LAST_UP_STEP` resolution). PromQL used: ``group``, ``topk`` (aggregation operators),
``last_over_time``, ``max_over_time``, ``timestamp``, subqueries and ``and on (...)``
(https://prometheus.io/docs/prometheus/latest/querying/functions/ and ``.../operators/``).
A target removed from Prometheus's configuration has no ``up`` series any more: ``--once``
cannot see it; the screen keeps it as a down row (:class:`gpumem_tui.ui.fleet_screen.FleetPoller`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpumem_tui.remote.fleet_prometheus import MAX_EPOCH, MAX_SERIES, Answer, PrometheusClient, PrometheusError
from gpumem_tui.support.text import json_safe, printable
from gpumem_tui.support.units import MiB, format_bytes, format_duration

__all__ = ["FleetReading", "GpuRow", "HostRow", "PrometheusClient", "PrometheusError", "ValueChecks", "down_notice",
           "format_age", "format_table", "read_fleet"]

MAX_PLAUSIBLE_BYTES = 2**60
"""A memory figure above this (1 EiB) is refused as absurd."""
SEEN_WINDOW = "1h"
"""How far back a job counts as a GPU job, and a down target's last-up time is looked for."""
LAST_UP_STEP = "15s"
GPUMEM_USED = "gpumem_gpu_memory_used_bytes"
GPUMEM_TOTAL = "gpumem_gpu_memory_total_bytes"
GPUMEM_UTIL = "gpumem_gpu_utilization_ratio"
DCGM_USED = "DCGM_FI_DEV_FB_USED"
# One query per source: the `up` of every target of a job that had that source's GPU series.
TARGETS_QUERY = "up and on (job) group by (job) (last_over_time({metric}[" + SEEN_WINDOW + "]))"
LAST_UP_QUERY = f"max_over_time(timestamp(up == 1)[{SEEN_WINDOW}:{LAST_UP_STEP}]) and on (instance, job) (up == 0)"
# Only the biggest process of each host is needed: Prometheus picks it (a small answer).
BIGGEST_PROCESS_QUERY = "topk by (instance) (1, gpumem_process_memory_used_bytes)"


class Client(Protocol):
    """What :func:`read_fleet` needs of a client (a fake in the benchmark)."""

    def query(self, promql: str) -> Answer: ...


@dataclass
class GpuRow:
    """One GPU of a host (bytes; utilization 0-1; None: not reported or not plausible)."""

    gpu: str
    name: str = ""
    used_bytes: int | None = None
    total_bytes: int | None = None
    utilization: float | None = None


@dataclass
class HostRow:
    """One host of the fleet: its GPUs, their sums, its biggest process and its probed jobs.

    ``source`` says whose metrics these are ("gpumem" or "dcgm"). ``biggest`` is
    ``(pid, command, bytes or None)``; ``probed`` lists ``(pid, measured peak, predicted peak)``
    in bytes (None when not reported or not plausible). ``up`` is False when Prometheus's last
    scrape of the host failed or the host stopped reporting; ``last_seen`` is then the epoch
    second it was last seen up (None: not within the window looked at).
    """

    host: str
    source: str
    gpus: list[GpuRow] = field(default_factory=list)
    biggest: tuple[str, str, int | None] | None = None
    probed: list[tuple[str, int | None, int | None]] = field(default_factory=list)
    up: bool = True
    last_seen: float | None = None

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

    def state(self, now: float) -> str:
        """"up", or "down, last seen 35 s ago" / "down, not seen up in 1h"."""
        return "up" if self.up else f"down, {self.last_seen_text(now)}"

    def last_seen_text(self, now: float) -> str:
        """"last seen 35 s ago", or "not seen up in 1h" when the time is unknown."""
        if self.last_seen is None:
            return f"not seen up in {SEEN_WINDOW}"
        return f"last seen {format_age(now - self.last_seen)} ago"

    def to_json(self, now: float) -> dict[str, Any]:
        """The ``fleet --once --json`` row (bytes; utilization 0-1; times in epoch seconds)."""
        big = self.biggest
        return {
            "host": json_safe(self.host), "source": self.source, "up": self.up,
            "last_seen": self.last_seen,
            "last_seen_age_s": None if self.last_seen is None else round(max(now - self.last_seen, 0.0), 1),
            "gpus": len(self.gpus),
            "used_bytes": self.used_bytes, "total_bytes": self.total_bytes, "utilization": self.utilization,
            "biggest_process": None if big is None else
            {"pid": json_safe(big[0]), "command": json_safe(big[1]), "used_bytes": big[2]},
            "probed": [{"pid": json_safe(pid), "measured_peak_bytes": m, "predicted_peak_bytes": p}
                       for pid, m, p in self.probed],
            "per_gpu": [{**g.__dict__, "gpu": json_safe(g.gpu), "name": json_safe(g.name)} for g in self.gpus],
        }  # fmt: skip


Ask = Callable[[str], Answer]  # a PromQL query -> its answer (left-out series noted)
GpuOf = Callable[[str, str, dict[str, str]], GpuRow]  # (host, source, labels) -> that GPU's row, made if new


@dataclass
class FleetReading:
    """One read of the fleet: host rows sorted by name, ``notices`` (one line each: values
    refused, series left out; see :func:`down_notice` for down hosts) and ``read_at`` (epoch
    seconds)."""

    hosts: list[HostRow]
    notices: list[str]
    read_at: float


class ValueChecks:
    """Checks values read from Prometheus; counts the refused ones for one notice line.

    A refused value is returned as None (shown as N/A); :meth:`summary` names the first one
    refused (metric, value, host, why) and how many more.
    """

    def __init__(self) -> None:
        self.refused = 0
        self.example = ""
        self.notices: list[str] = []

    def _refuse(self, metric: str, labels: dict[str, str], shown: str, why: str) -> None:
        self.refused += 1
        if not self.example:
            host = printable(labels.get("instance", "?"), 60)
            self.example = f"{metric} = {shown} on {host} ({why})"

    def number(self, metric: str, labels: dict[str, str], value: float | None, low: float, high: float,
               why: str) -> float | None:
        """``value`` if it is a finite number within [low, high], else None (counted)."""
        if value is not None and low <= value <= high:  # NaN fails every comparison
            return value
        if value is None or not math.isfinite(value):
            self._refuse(metric, labels, "not a number" if value is None else str(value), "not a finite number")
        else:
            self._refuse(metric, labels, f"{value:g}", why)
        return None

    def bytes(self, metric: str, labels: dict[str, str], value: float | None, unit: int = 1) -> int | None:
        """A byte count (``value`` in units of ``unit`` bytes) or None (counted)."""
        if value is not None and 0 <= value <= MAX_PLAUSIBLE_BYTES / unit:  # the common case, first
            return int(value * unit)
        why = "negative" if value is not None and value < 0 else "above 2^60 bytes"
        self.number(metric, labels, value, 0, MAX_PLAUSIBLE_BYTES / unit, why)
        return None

    def ratio(self, metric: str, labels: dict[str, str], value: float | None, full: float = 1.0) -> float | None:
        """A utilization as 0-1 from ``value`` in [0, full], or None (counted)."""
        if value is not None and 0 <= value <= full:
            return value / full
        self.number(metric, labels, value, 0, full, f"outside 0-{full:g}")
        return None

    def answered(self, promql: str, answer: Answer) -> Answer:
        """``answer``, noting the series left out of it."""
        if answer.left_out:
            self.notices.append(f"{promql}: {answer.left_out} series beyond the first {MAX_SERIES} left out")
        return answer

    def summary(self) -> list[str]:
        """The notice lines (refused values first)."""
        lines = list(self.notices)
        if self.refused:
            more = f" and {self.refused - 1} more" if self.refused > 1 else ""
            lines.insert(0, f"shown as N/A: {self.example}{more}")
        return lines


def read_fleet(client: Client, now: float | None = None) -> FleetReading:
    """Every host Prometheus has GPU metrics or a GPU target of, sorted by host name.

    Cost: linear in the number of series (dicts keyed by host and GPU).

    Raises:
        PrometheusError: see :class:`PrometheusClient`.
    """
    now = time.time() if now is None else now
    checks = ValueChecks()
    hosts: dict[str, HostRow] = {}
    gpus: dict[tuple[str, str], GpuRow] = {}

    def ask(promql: str) -> Answer:
        return checks.answered(promql, client.query(promql))

    def gpu(host: str, source: str, labels: dict[str, str]) -> GpuRow:
        key = (host, labels.get("gpu", "?"))
        row = gpus.get(key)
        if row is None:
            row = gpus[key] = GpuRow(key[1], labels.get("name") or labels.get("modelName", ""))
            host_row = hosts.get(host)
            if host_row is None:
                host_row = hosts[host] = HostRow(host, source)
            host_row.gpus.append(row)
        return row

    for promql, field_name, check in ((GPUMEM_USED, "used_bytes", checks.bytes),
                                      (GPUMEM_TOTAL, "total_bytes", checks.bytes),
                                      (GPUMEM_UTIL, "utilization", checks.ratio)):
        for labels, value in ask(promql):
            row = gpus.get((labels.get("instance", "?"), labels.get("gpu", "?")))  # the common case, inline
            if row is None:
                row = gpu(labels.get("instance", "?"), "gpumem", labels)
            setattr(row, field_name, check(promql, labels, value))
    _add_dcgm(ask, checks, hosts, gpu)
    _add_processes(ask, checks, hosts)
    _add_targets(ask, checks, hosts, now)
    for row in hosts.values():
        row.gpus.sort(key=lambda g: (len(g.gpu), g.gpu))
        row.probed.sort(key=lambda p: p[0])
    return FleetReading([hosts[name] for name in sorted(hosts)], checks.summary(), now)


def _add_dcgm(ask: Ask, checks: ValueChecks, hosts: dict[str, HostRow], gpu: GpuOf) -> None:
    """dcgm-exporter's GPUs, for hosts without our exporter (MiB and percent)."""
    ours = set(hosts)
    free = {(lab.get("instance", "?"), lab.get("gpu", "?")): checks.bytes("DCGM_FI_DEV_FB_FREE", lab, v, MiB)
            for lab, v in ask("DCGM_FI_DEV_FB_FREE")}
    for labels, value in ask(DCGM_USED):
        host = labels.get("instance", "?")
        if host in ours:
            continue  # our exporter on the same target says more
        row = gpu(host, "dcgm", labels)
        row.used_bytes = checks.bytes(DCGM_USED, labels, value, MiB)
        spare = free.get((host, labels.get("gpu", "?")))
        row.total_bytes = None if spare is None or row.used_bytes is None else row.used_bytes + spare
    for labels, value in ask("DCGM_FI_DEV_GPU_UTIL"):
        host = labels.get("instance", "?")
        if host not in ours:
            gpu(host, "dcgm", labels).utilization = checks.ratio("DCGM_FI_DEV_GPU_UTIL", labels, value, 100.0)


def _add_processes(ask: Ask, checks: ValueChecks, hosts: dict[str, HostRow]) -> None:
    """The biggest process and the probed jobs of hosts that run our exporter."""
    for labels, value in ask(BIGGEST_PROCESS_QUERY):
        row = hosts.get(labels.get("instance", "?"))
        used = checks.bytes("gpumem_process_memory_used_bytes", labels, value)
        if row is not None and (row.biggest is None or (used or 0) > (row.biggest[2] or 0)):
            row.biggest = (labels.get("pid", "?"), labels.get("command", ""), used)
    predicted = {(lab.get("instance"), lab.get("pid")): checks.bytes("gpumem_probe_predicted_peak_bytes", lab, v)
                 for lab, v in ask("gpumem_probe_predicted_peak_bytes")}
    for labels, value in ask("gpumem_probe_measured_peak_bytes"):
        row = hosts.get(labels.get("instance", "?"))
        if row is not None:
            measured = checks.bytes("gpumem_probe_measured_peak_bytes", labels, value)
            row.probed.append((labels.get("pid", "?"), measured, predicted.get((labels.get("instance"), labels.get("pid")))))


def _add_targets(ask: Ask, checks: ValueChecks, hosts: dict[str, HostRow], now: float) -> None:
    """Mark hosts whose every GPU target is down (``up == 0``), adding rows for those
    without series, with the time each was last up."""
    state: dict[str, bool] = {}
    source_of: dict[str, str] = {}
    for source, metric in (("gpumem", GPUMEM_USED), ("dcgm", DCGM_USED)):
        for labels, value in ask(TARGETS_QUERY.format(metric=metric)):
            host = labels.get("instance", "?")
            up = checks.number("up", labels, value, 0, 1, "not 0 or 1")
            if up in (0.0, 1.0):
                state[host] = state.get(host, False) or up == 1.0
                source_of.setdefault(host, source)
    if all(state.values()):
        return
    last_up: dict[str, float] = {}
    for labels, value in ask(LAST_UP_QUERY):
        when = checks.number("timestamp(up == 1)", labels, value, 0, min(now + 60, MAX_EPOCH), "not a plausible time")
        if when is not None:
            host = labels.get("instance", "?")
            last_up[host] = max(when, last_up.get(host, 0.0))
    for host, up in state.items():
        if not up:
            row = hosts.get(host)
            if row is None:
                row = hosts[host] = HostRow(host, source_of[host])
            row.up, row.last_seen = False, last_up.get(host)


def down_notice(down: Sequence[HostRow], now: float) -> str:
    """One line naming the down hosts (at most three) and their state."""
    names = "; ".join(f"{printable(r.host, 60)} ({r.last_seen_text(now)})" for r in down[:3])
    more = f" and {len(down) - 3} more" if len(down) > 3 else ""
    return f"{len(down)} {'host' if len(down) == 1 else 'hosts'} down: {names}{more}"


def format_age(seconds: float) -> str:
    """How long ago: :func:`gpumem_tui.support.units.format_duration` (``35 s``, ``12 min``, ``3.5 h``)."""
    return format_duration(seconds)


def format_table(rows: Sequence[HostRow], now: float) -> str:
    """The host table as text for a terminal (binary GiB, stated); labels are made printable
    (control characters as visible escapes, :func:`gpumem_tui.support.text.printable`)."""
    lines = [f"{'HOST':<28} {'SRC':<6} {'GPUS':>4} {'USED / TOTAL (GiB = 2^30 B)':>30} {'UTIL':>5}  "
             f"{'STATE':<26} BIGGEST PROCESS"]
    for row in rows:
        memory = f"{format_bytes(row.used_bytes)} / {format_bytes(row.total_bytes)}"
        util = f"{row.utilization * 100:.0f}%" if row.utilization is not None else "N/A"
        big = row.biggest
        biggest = f"{printable(big[0], 12)} {format_bytes(big[2])} {printable(big[1], 40)}" if big else "-"
        lines.append(f"{printable(row.host, 28):<28} {row.source:<6} {len(row.gpus):>4} {memory:>30} {util:>5}  "
                     f"{row.state(now):<26} {biggest}")
    return "\n".join(lines)
