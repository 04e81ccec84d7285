"""The shipped Prometheus alerting rules (deploy/prometheus/gpumem-alerts.yml): ``promtool
check rules`` accepts them and ``promtool test rules`` runs their unit tests
(tests/prometheus/gpumem-alerts.test.yml: each alert fires on the series it is about, with
its summary and description, and stays quiet where it should).

promtool comes with Debian's ``prometheus`` package, which scripts/test.sh installs; a machine
without it fails here rather than skipping.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "deploy" / "prometheus" / "gpumem-alerts.yml"
RULE_TESTS = ROOT / "tests" / "prometheus" / "gpumem-alerts.test.yml"
# The alerts the issue asks for; GpuNvmlDown and GpuLost together are "GPU lost".
ALERTS = {"GpuMemoryAbove90Percent", "GpuJobWillNotFit", "GpuJobOutOfMemorySoon", "GpuNvmlDown", "GpuLost",
          "GpumemExporterDown"}


def _promtool() -> str:
    binary = shutil.which("promtool")
    if binary is None:
        pytest.fail("'promtool' is missing: scripts/test.sh installs it (apt-get install prometheus)")
    return binary


def test_promtool_check_rules_accepts_the_rules_file():
    proc = subprocess.run([_promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in proc.stdout


def test_promtool_unit_tests_of_every_alert_pass():
    proc = subprocess.run([_promtool(), "test", "rules", str(RULE_TESTS)], capture_output=True, text=True,
                          timeout=120, cwd=RULE_TESTS.parent)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    tested = {case["alertname"] for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]
              for case in test["alert_rule_test"] if case["exp_alerts"]}
    assert tested == ALERTS  # every alert has a case in which it fires


def test_every_alert_says_what_was_measured():
    rules = [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]
    assert {rule["alert"] for rule in rules} == ALERTS
    for rule in rules:
        notes = rule["annotations"]
        assert notes["summary"] and "{{ $labels.instance }}" in notes["summary"], rule["alert"]
        # the description names the series it was computed from
        assert any(name in notes["description"] for name in ("gpumem_", "up == 0")), rule["alert"]
        assert rule["labels"]["severity"] in {"warning", "critical"}
    assert "gpumem_process_seconds_to_oom < 600" in {rule["expr"] for rule in rules}
