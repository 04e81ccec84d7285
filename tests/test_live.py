"""LiveSource: NVML + host + probes merged; the no-NVML path; faults keep polling alive."""

from __future__ import annotations

import os
from dataclasses import dataclass

import psutil
import pytest
from fake_pynvml import MiB, NVML_ERROR_UNKNOWN

from gpumem_tui.telemetry.host import HostEnricher
from gpumem_tui.telemetry.live import LiveSource
from gpumem_tui.telemetry.model import ProbeInfo, ProbeSample, ProcessStatus, ProcessType, Snapshot


@dataclass
class _Reading:
    probes: tuple = ()
    probe_infos: tuple = ()
    phase_marks: tuple = ()
    notices: tuple = ()


class _Probes:
    """Stands in for ProbeSource: reports the given PIDs as probed."""

    def __init__(self, pids=(), notices=()):
        self.pids = list(pids)
        self.notices = tuple(notices)
        self.closed = False

    def poll(self):
        samples = tuple(ProbeSample(time=1.0, pid=p, device="cpu", allocated_bytes=123) for p in self.pids)
        infos = tuple(ProbeInfo(pid=p) for p in self.pids)
        notices, self.notices = self.notices, ()
        return _Reading(probes=samples, probe_infos=infos, notices=notices)

    def close(self):
        self.closed = True


def _live(**kw) -> LiveSource:
    kw.setdefault("host", HostEnricher(in_container=False))
    kw.setdefault("probe_source", _Probes())
    return LiveSource(**kw)


def test_gpu_processes_are_enriched(fake_nvml, spawn):
    a, b = spawn(), spawn()
    fake_nvml.add_process(0, pid=a.pid, used=700 * MiB, sm=12)
    fake_nvml.add_process(1, pid=b.pid, used=300 * MiB)
    src = _live()
    assert src.nvml_available and src.nvml_error is None
    snap = src.poll()
    assert isinstance(snap, Snapshot) and snap.nvml_error is None
    assert snap.driver_version == "550.54.15" and len(snap.devices) == 2
    rows = {p.pid: p for p in snap.processes}
    assert set(rows) == {a.pid, b.pid}
    assert rows[a.pid].used_memory_bytes == 700 * MiB and rows[a.pid].sm_percent == 12.0
    assert rows[a.pid].device_index == 0 and rows[b.pid].device_index == 1
    assert rows[a.pid].user == psutil.Process().username()
    assert "time.sleep" in rows[a.pid].command and rows[a.pid].rss_bytes > 0
    src.close()


def test_probed_cpu_job_appears_as_host_row(fake_nvml, spawn):
    gpu_job, cpu_job = spawn(), spawn()
    fake_nvml.add_process(0, pid=gpu_job.pid, used=1 * MiB)
    probes = _Probes([gpu_job.pid, cpu_job.pid], notices=["probe note"])
    snap = _live(probe_source=probes).poll()
    rows = {p.pid: p for p in snap.processes}
    assert rows[gpu_job.pid].type is ProcessType.COMPUTE  # not duplicated as HOST
    assert rows[cpu_job.pid].type is ProcessType.HOST and rows[cpu_job.pid].device_index is None
    assert len(snap.processes) == 2
    assert [p.pid for p in snap.probes] == [gpu_job.pid, cpu_job.pid]
    assert "probe note" in snap.notices


def test_without_nvml_lists_visible_host_processes(no_nvml, spawn):
    mine = spawn()
    src = _live(probe_source=_Probes([mine.pid]), host_limit=50)
    assert not src.nvml_available
    snap = src.poll()
    assert snap.nvml_error == "NVML Shared Library Not Found"
    assert snap.devices == ()
    assert 0 < len(snap.processes) <= 50
    assert all(p.type is ProcessType.HOST for p in snap.processes)
    assert snap.processes[0].pid == mine.pid  # probed first
    assert os.getpid() in {p.pid for p in snap.processes} or len(snap.processes) == 50
    # between rescans the same rows are refreshed; an exited one is dropped
    mine.kill()
    mine.wait()
    snap = src.poll()
    assert mine.pid not in {p.pid for p in snap.processes}


def test_without_nvml_new_processes_show_after_rescan(no_nvml, spawn):
    src = _live(host_scan_seconds=0.0, host_limit=1000)
    src.poll()
    late = spawn()
    assert late.pid in {p.pid for p in src.poll().processes}


def test_faults_do_not_stop_polling_and_recover(fake_nvml, spawn):
    child = spawn()
    fake_nvml.add_process(1, pid=child.pid, used=5 * MiB)
    src = _live()
    src.poll()
    fake_nvml.lose_gpu(1)
    fake_nvml.fail("nvmlDeviceGetTemperature", NVML_ERROR_UNKNOWN, device=0)
    snap = src.poll()
    assert snap.devices[1].error == "GPU is lost"
    assert snap.devices[0].reason("temperature_c") == "unknown NVML error"
    assert snap.processes == ()
    fake_nvml.recover_gpu(1)
    fake_nvml.clear_faults()
    snap = src.poll()
    assert snap.devices[1].error is None and snap.devices[0].temperature_c == 55.0
    assert [p.pid for p in snap.processes] == [child.pid]


def test_namespace_message_reaches_snapshot_notices(fake_nvml):
    pid = 4_000_000
    while psutil.pid_exists(pid):
        pid -= 1
    fake_nvml.add_process(0, pid=pid, used=1 * MiB)
    src = _live(host=HostEnricher(in_container=True))
    snap = src.poll()
    (row,) = snap.processes
    assert row.status is ProcessStatus.NOT_IN_NAMESPACE
    assert any("--pid=host" in n for n in snap.notices)
    assert not any("--pid=host" in n for n in src.poll().notices)


def test_broken_probe_reader_is_a_notice(fake_nvml):
    class Broken:
        def poll(self):
            raise RuntimeError("disk on fire")

        def close(self):
            pass

    snap = _live(probe_source=Broken()).poll()
    assert any("disk on fire" in n for n in snap.notices) and len(snap.devices) == 2


def test_default_probe_reader_reads_given_directory(fake_nvml, tmp_path):
    src = LiveSource(tmp_path, host=HostEnricher(in_container=False))
    assert src._probe is not None and str(src._probe.directory) == str(tmp_path)
    snap = src.poll()
    assert snap.probes == () and len(snap.devices) == 2
    assert fake_nvml.init_count == 1
    src.close()
    assert fake_nvml.init_count == 0  # its own NvmlSource's nvmlInit is paired with nvmlShutdown


@pytest.mark.parametrize("module", ["gpumem_tui.telemetry.live", "gpumem_tui.telemetry.snapshot_cli",
                                    "gpumem_tui.support.signals", "gpumem_tui.support.text"])
def test_telemetry_modules_stay_headless(module):
    """No Textual/Rich/torch, and pynvml only once a source starts (DESIGN.md rule 1 and 3)."""
    import json
    import subprocess
    import sys

    code = f"import importlib, json, sys; importlib.import_module({module!r}); print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(json.loads(out.stdout))
    for heavy in ("textual", "rich", "torch", "pynvml"):
        assert heavy not in loaded, f"{module} imports {heavy}"
