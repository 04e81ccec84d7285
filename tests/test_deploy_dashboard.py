"""The shipped Grafana dashboard (deploy/grafana/gpumem-dashboard.json): every query, with its
template variables ($instance, $gpu, $__rate_interval) substituted as Grafana would, is
evaluated against the real Prometheus of the fleet tests scraping real exporters on the fake
NVML. Each must parse and answer without error; those whose series the fake GPUs have must
answer with data. The probe and time-to-OOM series need a probed job (none in that fleet):
their queries must still be valid PromQL.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from gpumem_tui.remote.fleet import PrometheusClient
from test_fleet_prometheus import _wait, prometheus  # noqa: F401 - the fleet tests' Prometheus fixture

DASHBOARD = Path(__file__).resolve().parent.parent / "deploy" / "grafana" / "gpumem-dashboard.json"
# Series only a probed job (or the coming time-to-OOM work) makes: queries on them may be empty here.
NEEDS_A_PROBED_JOB = ("gpumem_probe_", "gpumem_process_seconds_to_oom")


def _dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def _targets(dashboard: dict) -> list[tuple[str, str]]:
    """(panel title, expr) of every query of every panel, rows' nested panels included."""
    out = []
    for panel in dashboard["panels"]:
        for inner in [panel, *panel.get("panels", [])]:
            out += [(inner["title"], target["expr"]) for target in inner.get("targets", [])]
    return out


def _substitute(expr: str, instance: str, gpu: str) -> str:
    """Grafana's substitution of the dashboard's variables (a multi-value regex variable is a
    regex: the instance's dots are escaped)."""
    expr = expr.replace("$__rate_interval", "30s")
    expr = expr.replace("$instance", re.escape(instance).replace("\\", "\\\\")).replace("$gpu", gpu)
    assert "$" not in expr, f"an unknown variable in {expr!r}"
    return expr


def test_the_dashboard_is_grafana_json_with_instance_and_gpu_variables():
    dashboard = _dashboard()
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert {"datasource", "instance", "gpu"} <= set(variables)
    assert variables["instance"]["multi"] and variables["gpu"]["multi"]
    targets = _targets(dashboard)
    assert len(targets) >= 20
    exprs = " ".join(expr for _, expr in targets)
    for needed in ("gpumem_gpu_memory_used_bytes", "gpumem_probe_predicted_peak_bytes", "gpumem_process_seconds_to_oom",
                   "gpumem_process_memory_used_bytes", "gpumem_gpu_memory_free_bytes"):
        assert needed in exprs, needed
    for title, expr in targets:
        assert "$instance" in expr or "instance=~" in expr, f"{title}: not filtered by $instance"
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_every_dashboard_query_runs_against_real_prometheus(prometheus):  # noqa: F811 - the fixture
    client = PrometheusClient(prometheus["url"])
    instance = prometheus["a"]
    # the variables' own queries: label_values(SERIES, LABEL) -> SERIES must carry LABEL
    for variable in _dashboard()["templating"]["list"]:
        if variable["type"] != "query":
            continue
        series, label = re.fullmatch(r"label_values\((.*), (\w+)\)", variable["definition"]).groups()
        answer = client.query(_substitute(series, instance, "0"))
        assert answer and all(label in labels for labels, _ in answer), variable["name"]
    # NVLink rates need two scrapes inside the rate window
    _wait(lambda: client.query(f'rate(gpumem_gpu_nvlink_transmit_bytes_total{{instance="{instance}"}}[30s])'),
          30, "two scrapes of the NVLink counters")
    now = time.time()
    empty = []
    for title, expr in _targets(_dashboard()):
        promql = _substitute(expr, instance, "0")
        answer = client.query_range(promql, now - 60, now, 5)  # raises PrometheusError on bad PromQL
        if any(name in expr for name in NEEDS_A_PROBED_JOB):
            continue
        if not answer or not any(points for _, points in answer):
            empty.append((title, promql))
        for labels, _ in answer:
            assert labels.get("instance") == instance, (title, labels)
            assert labels.get("gpu", "0") == "0", (title, labels)  # $gpu picked GPU 0 only
    assert empty == []


def test_a_bad_query_would_be_caught(prometheus):  # noqa: F811 - the fixture
    """The check above can fail: Prometheus rejects a broken query with an error."""
    from gpumem_tui.remote.fleet import PrometheusError

    with pytest.raises(PrometheusError):
        PrometheusClient(prometheus["url"]).query_range("max by (instance (gpumem_gpu_memory_used_bytes)",
                                                        time.time() - 60, time.time(), 5)
