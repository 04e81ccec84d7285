"""HostEnricher: psutil states, PID namespace verdict, containers, caching, multi-user."""

from __future__ import annotations

import os
import sys
import time

import psutil
import pytest

from gpumem_tui.telemetry import host as host_module
from gpumem_tui.telemetry.host import (
    MIN_CPU_SECONDS,
    NAMESPACE_MESSAGE,
    HostEnricher,
    container_from_cgroup,
    detect_container,
    pid_in_own_namespace,
)
from gpumem_tui.telemetry.model import ProcessSample, ProcessStatus, ProcessType
from waiting import wait_until


def _gpu(pid: int, device: int = 0) -> ProcessSample:
    return ProcessSample(pid=pid, device_index=device, type=ProcessType.COMPUTE, used_memory_bytes=1 << 20)


def _dead_pid() -> int:
    pid = 4_000_000
    while psutil.pid_exists(pid):
        pid -= 1
    return pid


@pytest.mark.parametrize("fast", [True, False])
def test_own_process_details_and_cpu_after_two_polls(spawn, fast):
    child = spawn()
    host = HostEnricher(in_container=False, fast=fast)
    (first,) = host.enrich([_gpu(child.pid)])
    assert first.status is ProcessStatus.OK
    assert first.user == psutil.Process().username()
    assert "time.sleep(600" in first.command
    assert first.rss_bytes and first.rss_bytes > 0
    assert first.start_time == pytest.approx(psutil.Process(child.pid).create_time())
    assert first.used_memory_bytes == 1 << 20  # NVML figure untouched
    assert first.cpu_percent is None and first.reason("cpu_percent") == "measuring"
    time.sleep(MIN_CPU_SECONDS)  # the shortest interval a CPU % is measured over
    (second,) = host.enrich([_gpu(child.pid)])
    assert isinstance(second.cpu_percent, float) and second.cpu_percent >= 0.0
    assert second.reason("cpu_percent") is None


@pytest.mark.parametrize("fast", [True, False], ids=["proc", "psutil"])
def test_cpu_percent_is_measured_over_at_least_min_cpu_seconds(spawn, tmp_path, monkeypatch, fast):
    """Two polls a moment apart measured a busy process's one clock tick (10 ms of CPU time)
    over 2.4 ms: 413 % of a core for a single thread (an exporter scraped twice at once). A
    poll sooner than MIN_CPU_SECONDS after the last reading shows that reading, or none yet."""
    ready = tmp_path / "started"
    busy = spawn(argv=["python3", "-c", f"open({str(ready)!r}, 'w').close()\nwhile True: pass"])
    wait_until(ready.exists, what="the child to start its loop")
    real = time.monotonic
    clock = [real()]
    monkeypatch.setattr(host_module.time, "monotonic", lambda: clock[0])
    host = HostEnricher(in_container=False, fast=fast)
    polls = []
    for quick in (False, True, False, True):
        if quick:  # 2 ms after the poll before, whatever the machine's load
            clock[0] += 0.002
        elif polls:  # the real time since the first poll: the CPU time read is real too
            time.sleep(MIN_CPU_SECONDS)
            clock[0] = real()
        (row,) = host.enrich([_gpu(busy.pid)])
        polls.append((row.cpu_percent, row.reason("cpu_percent")))
    assert polls[0] == polls[1] == (None, "measuring")  # 2 ms: no figure yet, and none made up
    cpu, reason = polls[2]
    # one thread: at most 100 %, plus two 10 ms ticks of reading skew over the interval
    assert reason is None and 0.0 <= cpu <= 100.0 + 100.0 * 0.02 / MIN_CPU_SECONDS
    assert polls[3] == polls[2]  # 2 ms after a reading: that reading


def test_other_users_process(spawn):
    if os.geteuid() != 0:
        pytest.skip("needs root to start a process as another user")
    child = spawn(user=65534)  # returns once exec is done: the process runs as that user now
    (row,) = HostEnricher(in_container=False).enrich([_gpu(child.pid)])
    assert row.status is ProcessStatus.OK
    expected = psutil.Process(child.pid).username()
    assert row.user == expected and row.user != psutil.Process().username()


def test_same_pid_on_two_gpus_gets_same_details(spawn):
    child = spawn()
    rows = HostEnricher(in_container=False).enrich([_gpu(child.pid, 0), _gpu(child.pid, 1)])
    assert [r.device_index for r in rows] == [0, 1]
    assert rows[0].command == rows[1].command and rows[1].reason("cpu_percent") == "measuring"


def test_exited_between_listing_and_lookup(spawn):
    child = spawn()
    pid = child.pid
    child.kill()
    child.wait()
    (row,) = HostEnricher(in_container=False).enrich([_gpu(pid)])
    assert row.status is ProcessStatus.EXITED
    assert row.reason("command") == "exited" and row.rss_bytes is None


@pytest.mark.parametrize("fast", [True, False])
def test_exited_after_being_cached(spawn, fast):
    child = spawn()
    host = HostEnricher(in_container=False, fast=fast)
    host.enrich([_gpu(child.pid)])
    child.kill()
    child.wait()
    (row,) = host.enrich([_gpu(child.pid)])
    assert row.status is ProcessStatus.EXITED


@pytest.mark.parametrize("fast", [True, False])
def test_real_zombie(spawn, fast):
    child = spawn()
    child.kill()
    wait_until(lambda: psutil.Process(child.pid).status() == psutil.STATUS_ZOMBIE, what="the killed child to be a zombie")
    (row,) = HostEnricher(in_container=False, fast=fast).enrich([_gpu(child.pid)])
    assert row.status is ProcessStatus.ZOMBIE


def test_zombie_process_exception(monkeypatch, spawn):
    child = spawn()

    def boom(self, *a, **k):
        raise psutil.ZombieProcess(self.pid)

    monkeypatch.setattr(psutil.Process, "cpu_percent", boom)
    (row,) = HostEnricher(in_container=False, fast=False).enrich([_gpu(child.pid)])
    assert row.status is ProcessStatus.ZOMBIE


@pytest.mark.parametrize("fast", [True, False])
def test_access_denied_is_no_permission(monkeypatch, spawn, fast):
    child = spawn()

    def denied(self, *a, **k):
        raise psutil.AccessDenied(self.pid)

    def eperm(pid):
        raise PermissionError(13, "Permission denied")

    denied.cache_activate = denied.cache_deactivate = lambda self: None  # oneshot() hooks
    monkeypatch.setattr(psutil.Process, "memory_info", denied)
    monkeypatch.setattr(host_module, "_read_rss", eperm)
    monkeypatch.setattr(psutil.Process, "cmdline", denied)
    (row,) = HostEnricher(in_container=False, fast=fast).enrich([_gpu(child.pid)])
    assert row.status is ProcessStatus.NO_PERMISSION
    assert row.rss_bytes is None and row.reason("rss_bytes") == "no permission"
    assert row.command is None and row.reason("command") == "no permission"
    assert row.user is not None  # what could be read still is


def test_access_denied_on_open(monkeypatch):
    def denied(self, pid=None):
        raise psutil.AccessDenied(pid)

    monkeypatch.setattr(psutil.Process, "__init__", denied)
    (row,) = HostEnricher(in_container=False).enrich([_gpu(1)])
    assert row.status is ProcessStatus.NO_PERMISSION and row.reason("user") == "no permission"


def test_namespace_verdict_in_container():
    host = HostEnricher(in_container=True)
    (row,) = host.enrich([_gpu(_dead_pid())])
    assert row.status is ProcessStatus.NOT_IN_NAMESPACE
    assert row.reason("command") == "?"  # one character per column; the note says why once
    assert "--pid=host" in NAMESPACE_MESSAGE
    assert host.take_notices() == [f"GPU processes are {NAMESPACE_MESSAGE}"]
    host.enrich([_gpu(_dead_pid())])
    assert host.take_notices() == []  # said once


def test_exited_process_lingering_in_nvml_is_not_a_namespace_case():
    host = HostEnricher(in_container=False)  # default grace: 2 s
    pid = _dead_pid()
    for _ in range(3):
        assert host.enrich([_gpu(pid)])[0].status is ProcessStatus.EXITED
    assert host.take_notices() == []


def test_namespace_verdict_from_persistence_outside_container():
    host = HostEnricher(in_container=False, namespace_grace=0.0)
    pid = _dead_pid()
    assert host.enrich([_gpu(pid)])[0].status is ProcessStatus.EXITED  # could be a race
    assert host.enrich([_gpu(pid)])[0].status is ProcessStatus.NOT_IN_NAMESPACE  # NVML insists
    host.enrich([])  # gone from NVML: counter reset
    assert host.enrich([_gpu(pid)])[0].status is ProcessStatus.EXITED


def test_host_rows_never_claim_namespace():
    host = HostEnricher(in_container=True)
    (row,) = host.enrich([ProcessSample(pid=_dead_pid(), device_index=None, type=ProcessType.HOST)],
                         from_nvml=False)
    assert row.status is ProcessStatus.EXITED


@pytest.mark.parametrize("fast", [True, False])
def test_pid_reuse_gets_fresh_details(monkeypatch, spawn, fast):
    child = spawn()
    host = HostEnricher(in_container=False, fast=fast)
    host.enrich([_gpu(child.pid)])
    host.enrich([_gpu(child.pid)])
    real_create = psutil.Process.create_time
    real_stat = host_module._read_stat
    monkeypatch.setattr(psutil.Process, "create_time", lambda self: real_create(self) + 1000.0)
    monkeypatch.setattr(host_module, "_read_stat", lambda pid: (lambda s: (s[0], s[1], s[2] + 100_000))(real_stat(pid)))
    monkeypatch.setattr(psutil.Process, "cmdline", lambda self: ["new-owner", "--of-this-pid"])
    (row,) = host.enrich([_gpu(child.pid)])
    assert row.command == "new-owner --of-this-pid"
    assert row.cpu_percent is None  # a new process: no previous CPU reading


@pytest.mark.parametrize("text, label", [
    ("0::/system.slice/docker-3f2a9c1b0e4d5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d2e3f4a5b6c7d8e9f0a.scope\n",
     "docker 3f2a9c1b0e4d"),
    ("12:memory:/docker/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n",
     "docker 0123456789ab"),
    ("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1a2b3c4d_5e6f_7a8b_9c0d_1e2f3a4b5c6d.slice/"
     "cri-containerd-aaaabbbbccccdddd.scope\n", "pod 1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d"),
    ("11:cpu:/kubepods/besteffort/pod0a1b2c3d-0000-1111-2222-333344445555/abcdef\n",
     "pod 0a1b2c3d-0000-1111-2222-333344445555"),
    ("0::/system.slice/cri-containerd-feedfacecafebeef0011223344556677.scope\n", "containerd feedfacecafe"),
    ("0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-0011aabbccddeeff0011.scope\n",
     "podman 0011aabbccdd"),
    ("0::/lxc.payload.web01/init.scope\n", "lxc web01"),
    ("4:cpuset:/lxc/builder\n", "lxc builder"),
    ("0::/user.slice/user-1000.slice/session-3.scope\n", None),
    ("0::/\n", None),
])
def test_container_from_cgroup(text, label):
    assert container_from_cgroup(text) == label


def test_container_read_from_proc_cgroup(tmp_path, spawn):
    child = spawn()
    (tmp_path / str(child.pid)).mkdir()
    (tmp_path / str(child.pid) / "cgroup").write_text("0::/system.slice/docker-" + "ab" * 32 + ".scope\n")
    (row,) = HostEnricher(in_container=False, proc_root=str(tmp_path)).enrich([_gpu(child.pid)])
    assert row.container == "docker abababababab"


def test_detect_container_from_init_cgroup(tmp_path):
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "cgroup").write_text("12:pids:/kubepods/burstable/pod1/xyz\n")
    assert detect_container(str(tmp_path)) is True


def test_host_processes_lists_own_processes_bounded(spawn):
    if os.geteuid() != 0:
        pytest.skip("needs root to start a process as another user")
    mine = [spawn() for _ in range(3)]
    other = spawn(user=65534)  # spawn returns once exec is done
    host = HostEnricher(in_container=False)
    rows = host.host_processes(limit=500)
    pids = {r.pid for r in rows}
    assert {c.pid for c in mine} <= pids
    assert other.pid not in pids
    assert all(r.type is ProcessType.HOST and r.device_index is None for r in rows)
    rss = [r.rss_bytes or 0 for r in rows]
    assert rss == sorted(rss, reverse=True)
    assert all(r.rss_bytes != 0 for r in rows)  # kernel threads (no user memory) left out
    if psutil.pid_exists(2) and psutil.Process(2).name() == "kthreadd":
        assert 2 not in pids
    small = host.host_processes(limit=2, extra_pids=[other.pid])
    assert len(small) == 2 and small[0].pid == other.pid  # probed PIDs are always kept


def _cpu_seconds(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def _enrich_bracketed(host: HostEnricher, pid: int) -> tuple[ProcessSample, tuple[float, float], tuple[float, float]]:
    """One enrich of ``pid`` with (its CPU seconds, time.monotonic()) read just before and just
    after: the reading the enricher took lies between the two."""
    before = (_cpu_seconds(pid), time.monotonic())
    (row,) = host.enrich([_gpu(pid)])
    return row, before, (_cpu_seconds(pid), time.monotonic())


def _cpu_percent_bounds(first: tuple, second: tuple) -> tuple[float, float]:
    """The lowest and highest CPU % two bracketed enriches can report: CPU time between the
    readings over the wall time between them, each taken at the bracket ends that make it
    smallest / largest (both paths divide (utime + stime) by monotonic time, proc(5))."""
    (_, before1, after1), (_, before2, after2) = first, second
    low = (before2[0] - after1[0]) / (after2[1] - before1[1]) * 100
    high = (after2[0] - before1[0]) / (before2[1] - after1[1]) * 100
    return low, high


def test_fast_and_psutil_paths_agree(spawn):
    busy = spawn(argv=[sys.executable, "-c", "while True: pass"])  # killed by the fixture
    fast, slow = HostEnricher(in_container=False, fast=True), HostEnricher(in_container=False, fast=False)
    fast1, slow1 = _enrich_bracketed(fast, busy.pid), _enrich_bracketed(slow, busy.pid)
    # the busy child runs for a while between the readings: by its CPU time, not a sleep (on a
    # loaded machine it may get little of a core, so a fixed sleep could see nothing)
    start = slow1[2][0]
    wait_until(lambda: _cpu_seconds(busy.pid) >= start + 0.1, what="the busy child to use 0.1 s of CPU")
    fast2, slow2 = _enrich_bracketed(fast, busy.pid), _enrich_bracketed(slow, busy.pid)
    a, b = fast2[0], slow2[0]
    assert a.command == b.command and a.user == b.user and a.start_time == b.start_time
    assert a.rss_bytes == pytest.approx(b.rss_bytes, rel=0.2)
    # each path's CPU % is the figure for its own interval: within what the brackets allow
    # (psutil rounds to 0.1 %), and above zero (the child used 0.1 s between the readings)
    for row, (low, high) in ((a, _cpu_percent_bounds(fast1, fast2)), (b, _cpu_percent_bounds(slow1, slow2))):
        assert row.cpu_percent > 0 and low - 0.1 <= row.cpu_percent <= high + 0.1, (row.cpu_percent, low, high)


def test_fast_path_survives_parentheses_in_process_name(spawn):
    code = "open('/proc/self/comm', 'w').write('x) (R 1 2'); import time; time.sleep(600)"
    child = spawn(argv=[sys.executable, "-c", code])
    wait_until(lambda: psutil.Process(child.pid).name() == "x) (R 1 2", what="the child to rename itself")
    state, ticks, start = host_module._read_stat(child.pid)
    assert state in "SR" and ticks >= 0
    assert start / os.sysconf("SC_CLK_TCK") + psutil.boot_time() == pytest.approx(
        psutil.Process(child.pid).create_time(), abs=0.05)
    (row,) = HostEnricher(in_container=False, fast=True).enrich([_gpu(child.pid)])
    assert row.status is ProcessStatus.OK and row.rss_bytes > 0


def test_cache_of_gone_pids_is_dropped(monkeypatch, spawn):
    # an hour: however slowly this runs, entries age only when the test ages them below
    monkeypatch.setattr(host_module, "CACHE_SECONDS", 3600.0)
    children = [spawn() for _ in range(3)]
    host = HostEnricher(in_container=False)
    host.enrich([_gpu(c.pid) for c in children])
    assert len(host._cache) == 3
    host.enrich([_gpu(children[0].pid)])
    assert len(host._cache) == 3  # others kept for a while (a GPU can skip a poll)
    for entry in host._cache.values():  # last looked up longer ago than CACHE_SECONDS (no sleep)
        entry.last_seen -= host_module.CACHE_SECONDS + 1.0
    host.enrich([_gpu(children[0].pid)])
    assert [key[0] for key in host._cache] == [children[0].pid]


def test_process_sample_field_order_used_by_positional_construction():
    """nvml.py and host.py build ProcessSample positionally (hot path): guard the order."""
    import dataclasses

    names = [f.name for f in dataclasses.fields(ProcessSample)][:13]
    assert names == ["pid", "device_index", "type", "used_memory_bytes", "sm_percent", "user", "command",
                     "cpu_percent", "rss_bytes", "start_time", "status", "container", "field_errors"]


@pytest.mark.parametrize("status,expected", [
    ("Name:\tpython\nNSpid:\t48213\t42\nNSpgid:\t48213\t42\n", 42),
    ("Name:\tpython\nNSpid:\t48213\t9000\t7\n", 7),  # nested twice: the innermost
    ("Name:\tpython\nNSpid:\t48213\n", None),  # in our own namespace
    ("Name:\tpython\n", None),  # kernel < 4.1: no NSpid line
    ("NSpid:\t48213\tx\n", None),
    ("NSpid:\t48213\t99999999999\n", None),
])
def test_pid_in_own_namespace(status, expected):
    assert pid_in_own_namespace(status) == expected


def test_container_pid_read_from_proc_status(tmp_path, spawn):
    """Run on the host, the dashboard shows the PID a containerised process has inside its
    container (NSpid), beside the container's name, as nvidia-smi users expect from `ps`."""
    child = spawn()
    root = tmp_path / str(child.pid)
    root.mkdir()
    (root / "cgroup").write_text("0::/system.slice/docker-" + "cd" * 32 + ".scope\n")
    (root / "status").write_text(f"Name:\tpython\nNSpid:\t{child.pid}\t42\n")
    (row,) = HostEnricher(in_container=False, proc_root=str(tmp_path)).enrich([_gpu(child.pid)])
    assert row.container == "docker cdcdcdcdcdcd" and row.container_pid == 42
    (plain,) = HostEnricher(in_container=False).enrich([_gpu(child.pid)])  # the real /proc
    assert plain.container_pid is None  # the test runs in its own namespace's view


def test_container_pid_survives_a_trace_round_trip():
    from gpumem_tui.telemetry.serialize import process_from_dict, process_to_dict

    boxed = ProcessSample(pid=48213, device_index=0, type=ProcessType.COMPUTE, container="docker cdcdcdcdcdcd",
                          container_pid=42)
    assert process_from_dict(process_to_dict(boxed)) == boxed
    old = process_to_dict(_gpu(5))
    del old["container_pid"]  # a trace written before the field existed
    assert process_from_dict(old).container_pid is None
