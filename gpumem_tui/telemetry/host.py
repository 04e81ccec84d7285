"""Host details of a PID through psutil: user, command line, CPU %, RSS, start time, container.

One :class:`HostEnricher` lives as long as the poller. It keeps a ``psutil.Process`` per
``(pid, create_time)`` so that ``cpu_percent`` has a previous reading to diff against and so
that the command line, user and container (which do not change) are read once. A PID that
was reused by a new process gets a new key and fresh details.

What psutil could not say becomes a visible state, never an exception:

- ``psutil.AccessDenied``  -> ``ProcessStatus.NO_PERMISSION`` (the field reads "no permission")
- ``psutil.ZombieProcess`` -> ``ProcessStatus.ZOMBIE``
- ``psutil.NoSuchProcess`` -> ``ProcessStatus.EXITED``, or ``NOT_IN_NAMESPACE`` when NVML
  keeps reporting a PID that /proc never shows: the GPU driver sees PIDs of the host's
  PID namespace, which a container without ``--pid=host`` cannot see (``in_container`` makes
  that call at once; otherwise a PID invisible for two polls in a row is judged so).

Headless (psutil only). Memory in bytes; CPU in percent of one core (psutil convention,
can exceed 100 for multi-threaded processes).
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import psutil

from gpumem_tui.telemetry.launch import RankLaunch, launch_from_environ
from gpumem_tui.telemetry.model import NOT_VISIBLE, ProcessSample, ProcessStatus, ProcessType

NAMESPACE_MESSAGE = "not visible from this PID namespace; run the container with --pid=host"
NO_PERMISSION = "no permission"
EXITED = "exited"
ZOMBIE = "zombie"
FIRST_SAMPLE = "measuring"  # cpu_percent needs two readings
#: Shortest time (s) a CPU % is measured over. A process's CPU time counts in clock ticks
#: (10 ms at the usual SC_CLK_TCK of 100, proc(5)): two polls 2.4 ms apart read one tick
#: as 413 % of a core (seen when the exporter was scraped twice at once). Over 0.05 s a tick
#: is at most 20 points; a poll sooner than this shows the last reading.
MIN_CPU_SECONDS = 0.05
CACHE_SECONDS = 5.0  # keep a PID's details this long after it was last looked up

# /proc/<pid>/cgroup patterns, most specific first: (regex, label template).
_CGROUP_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"kubepods[^\n]*?pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})"), "pod {0}"),
    (re.compile(r"cri-containerd-([0-9a-f]{12,64})"), "containerd {0}"),
    (re.compile(r"/containerd/([0-9a-f]{12,64})"), "containerd {0}"),
    (re.compile(r"libpod-(?:conmon-)?([0-9a-f]{12,64})"), "podman {0}"),
    (re.compile(r"docker[-/]([0-9a-f]{12,64})"), "docker {0}"),
    (re.compile(r"lxc\.payload\.([^/\n]+)"), "lxc {0}"),
    (re.compile(r"/lxc/([^/\n]+)"), "lxc {0}"),
)
_CONTAINER_MARKERS = ("docker", "kubepods", "containerd", "libpod", "lxc")


def container_from_cgroup(text: str) -> str | None:
    """Container or pod label from the contents of ``/proc/<pid>/cgroup``, or None.

    Recognises Docker (``/docker/<id>``, ``docker-<id>.scope``), containerd / CRI
    (``cri-containerd-<id>.scope``), Kubernetes (``kubepods...pod<uid>``, label is the pod
    UID: the pod *name* is not in the cgroup path), Podman (``libpod-<id>.scope``) and LXC
    (``/lxc/<name>``, ``lxc.payload.<name>``). Container ids are shortened to 12 hex digits.
    """
    for pattern, label in _CGROUP_PATTERNS:
        match = pattern.search(text)
        if match:
            ident = match.group(1)
            if re.fullmatch(r"[0-9a-f]{13,64}", ident):
                ident = ident[:12]
            return label.format(ident.replace("_", "-"))
    return None


def detect_container(proc_root: str = "/proc") -> bool:
    """True if this process seems to run inside a container (its own PID namespace likely).

    Signs: ``/.dockerenv`` or ``/run/.containerenv`` exists, or ``<proc_root>/1/cgroup`` names
    docker/kubepods/containerd/libpod/lxc. With cgroup v2 namespaces none of these may show;
    then :class:`HostEnricher` falls back to noticing PIDs that NVML reports but /proc lacks.
    """
    if os.path.exists("/.dockerenv") or os.path.exists("/run/.containerenv"):
        return True
    try:
        text = Path(proc_root, "1", "cgroup").read_text(errors="replace")
    except OSError:
        return False
    return any(marker in text for marker in _CONTAINER_MARKERS)


_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class _UseSlowPath(Exception):
    """/proc could not be parsed: ask psutil instead."""


def _read_stat(pid: int) -> tuple[str, int, int]:
    """(state, utime + stime in clock ticks, start time in ticks since boot) from /proc/<pid>/stat.

    The command name (field 2) may hold spaces and parentheses, so fields are counted from
    the last ")" (proc(5)).
    """
    with open(f"/proc/{pid}/stat", "rb") as f:
        data = f.read()
    rest = data[data.rindex(b")") + 2:].split()
    return rest[0].decode(), int(rest[11]) + int(rest[12]), int(rest[19])


def _read_rss(pid: int) -> int:
    """Resident set size in bytes: /proc/<pid>/statm field 2 (pages) x page size."""
    with open(f"/proc/{pid}/statm", "rb") as f:
        return int(f.read().split()[1]) * _PAGE_SIZE


@dataclass
class _Entry:
    proc: psutil.Process
    create_time: float
    user: str | None
    command: str | None
    container: str | None
    errors: list[tuple[str, str]]
    container_pid: int | None = None
    launch: RankLaunch | None = None  # from its environment, read once (read_launch)
    primed: bool = False  # cpu_percent has a previous reading
    last_seen: float = 0.0
    errors_t: tuple[tuple[str, str], ...] = ()
    status: ProcessStatus = ProcessStatus.OK
    prev_ticks: int | None = None  # fast path: utime+stime (clock ticks) at prev_time
    prev_time: float = 0.0  # monotonic time of the CPU reading the next one is measured from
    last_cpu: float | None = None  # the last CPU % measured (over >= MIN_CPU_SECONDS)


def pid_in_own_namespace(status_text: str) -> int | None:
    """The PID a process has in its innermost PID namespace, from ``/proc/<pid>/status``.

    The ``NSpid:`` line lists the process's PID in each PID namespace it belongs to, from the
    namespace of the procfs we read down to its own (proc(5), Linux >= 4.1). More than one
    value means it runs in a nested namespace (a container): the last value is what ``ps``
    shows inside that container. Returns None when there is one value, no such line, or the
    line is malformed.
    """
    for line in status_text.splitlines():
        if line.startswith("NSpid:"):
            fields = line[len("NSpid:"):].split()
            if len(fields) > 1 and fields[-1].isdigit() and 0 < int(fields[-1]) <= 1 << 22:
                return int(fields[-1])
            return None
    return None


def read_launch(proc: psutil.Process) -> RankLaunch | None:
    """The torchrun / accelerate launch identity in ``proc``'s environment, or None.

    ``psutil.Process.environ()`` reads ``/proc/<pid>/environ``, which only the process's own
    user (or root) may read: AccessDenied, NoSuchProcess (ZombieProcess included) or any OS
    error mean "no grouping", never an exception. It is the environment the process started
    with (a later ``os.environ`` change inside it is not seen). Called once per process
    (:class:`HostEnricher` caches it with the process's other fixed details); the values
    are validated by :func:`gpumem_tui.telemetry.launch.launch_from_environ`.
    """
    try:
        env = proc.environ()
    except (psutil.Error, OSError, ValueError):
        return None
    if "RANK" not in env or "WORLD_SIZE" not in env:  # the usual case: not a launched rank
        return None
    return launch_from_environ(env)


class HostEnricher:
    """Adds host figures to NVML process samples; lists visible host processes.

    ``in_container``: None detects it (:func:`detect_container`); tests pass True/False.
    ``proc_root``: where per-PID cgroup files are read (tests point it elsewhere).
    ``fast``: on Linux, read ``/proc/<pid>/stat`` and ``statm`` directly each poll (two small
    reads per PID instead of psutil's four; psutil still supplies user, command line and
    start time once per process). None = when /proc is there. Not thread-safe: use from
    the poller thread.

    ``namespace_grace``: outside a detected container, a PID NVML lists is judged to be in
    another PID namespace only once /proc has lacked it for 2+ polls and this many seconds
    (an exited process can linger in NVML's list for a moment).

    CPU % on the fast path is (utime + stime) ticks / SC_CLK_TCK over the wall time between
    two polls, x 100 (proc(5), fields 14-15) -- the figure psutil's ``cpu_percent`` computes;
    on both paths over at least MIN_CPU_SECONDS (a sooner poll shows the last figure).
    RSS is statm field 2 x page size (proc(5)).
    """

    def __init__(self, *, in_container: bool | None = None, proc_root: str = "/proc",
                 fast: bool | None = None, namespace_grace: float = 2.0) -> None:
        self.proc_root = proc_root
        self.fast = os.path.exists("/proc/self/stat") if fast is None else fast
        self.in_container = detect_container(proc_root) if in_container is None else in_container
        self._cache: dict[tuple[int, float], _Entry] = {}
        self.namespace_grace = namespace_grace
        # pid -> (consecutive polls NVML reported it but /proc did not, monotonic time of the first)
        self._missing: dict[int, tuple[int, float]] = {}
        self._notices: list[str] = []
        self._namespace_noticed = False

    # ---- public --------------------------------------------------------------------------
    def enrich(self, samples: Iterable[ProcessSample], *, from_nvml: bool = True) -> list[ProcessSample]:
        """Return ``samples`` with user, command, CPU %, RSS, start time, status, container.

        ``from_nvml``: the PIDs come from the GPU driver (enables the PID-namespace verdict).
        Never raises for psutil errors. Call once per poll; cached details of PIDs not
        looked up for CACHE_SECONDS are dropped (a churning box must not grow the cache).
        """
        now = time.monotonic()
        out: list[ProcessSample] = []
        looked_up: dict[int, dict] = {}
        for sample in samples:
            if sample.pid not in looked_up:
                looked_up[sample.pid] = self._lookup(sample.pid, now, from_nvml)
            info = looked_up[sample.pid]
            errors = info["errors"]
            if sample.field_errors:
                errors = tuple(dict.fromkeys(sample.field_errors + errors))
            # direct construction: ~4x cheaper than dataclasses.replace, and this runs per row
            out.append(ProcessSample(sample.pid, sample.device_index, sample.type, sample.used_memory_bytes,
                                     sample.sm_percent, info["user"], info["command"], info["cpu_percent"],
                                     info["rss_bytes"], info["start_time"], info["status"], info["container"],
                                     errors, info.get("container_pid"), sample.mem_percent,
                                     sample.gpu_instance_id, sample.compute_instance_id,
                                     info.get("launch", sample.launch)))
        if from_nvml:  # NVML no longer lists it: forget how long it was invisible
            for pid in list(self._missing):
                if pid not in looked_up:
                    del self._missing[pid]
        self._expire(now)
        return out

    def host_processes(self, *, extra_pids: Iterable[int] = (), limit: int = 200,
                       uid: int | None = None) -> list[ProcessSample]:
        """Processes of user ``uid`` (default: our effective uid) plus ``extra_pids``, as HOST rows.

        Bounded: at most ``limit`` rows, the largest RSS first (extra PIDs always kept);
        kernel threads (RSS 0) and processes that exited are left out. Used when there is no
        NVML. Never raises. Linux: ownership is read from ``/proc/<pid>``'s owner.
        """
        uid = os.geteuid() if uid is None else uid
        extra = set(extra_pids)
        pids: list[int] = []
        for pid in psutil.pids():
            if pid in extra:
                continue
            try:
                if os.stat(f"/proc/{pid}").st_uid == uid:
                    pids.append(pid)
            except OSError:
                continue
        base = [ProcessSample(pid=p, device_index=None, type=ProcessType.HOST) for p in sorted(extra)]
        rows = self.enrich(base + [ProcessSample(pid=p, device_index=None, type=ProcessType.HOST) for p in pids],
                           from_nvml=False)
        kept = rows[: len(base)]
        # rss 0: a kernel thread (no user memory), nothing to watch here
        others = [r for r in rows[len(base):] if r.status is not ProcessStatus.EXITED and r.rss_bytes != 0]
        others.sort(key=lambda r: r.rss_bytes or 0, reverse=True)
        return kept + others[: max(limit - len(kept), 0)]

    def take_notices(self) -> list[str]:
        """One-off messages since the last call (e.g. the PID-namespace explanation)."""
        notices, self._notices = self._notices, []
        return notices

    # ---- internals -----------------------------------------------------------------------
    def _lookup(self, pid: int, now: float, from_nvml: bool) -> dict:
        if self.fast:
            try:
                return self._lookup_fast(pid, now, from_nvml)
            except _UseSlowPath:
                pass
        return self._lookup_psutil(pid, now, from_nvml)

    def _lookup_fast(self, pid: int, now: float, from_nvml: bool) -> dict:
        try:
            state, ticks, start = _read_stat(pid)
        except (FileNotFoundError, ProcessLookupError):
            return self._vanished(pid, from_nvml, now)
        except PermissionError:
            return self._state(ProcessStatus.NO_PERMISSION, NO_PERMISSION)
        except (OSError, ValueError, IndexError) as exc:
            raise _UseSlowPath from exc
        self._missing.pop(pid, None)
        key = (pid, start)  # start ticks since boot: a reused PID has a new key
        entry = self._cache.get(key)
        if entry is None:
            try:
                proc = psutil.Process(pid)
                entry = self._new_entry(proc, proc.create_time())
            except psutil.ZombieProcess:
                return self._state(ProcessStatus.ZOMBIE, ZOMBIE, pid)
            except psutil.NoSuchProcess:
                return self._vanished(pid, from_nvml, now)
            except psutil.AccessDenied:
                return self._state(ProcessStatus.NO_PERMISSION, NO_PERMISSION)
            self._cache[key] = entry
        entry.last_seen = now
        errors = entry.errors_t
        if state == "Z":
            return {"user": entry.user, "command": entry.command, "cpu_percent": None, "rss_bytes": None,
                    "start_time": entry.create_time, "status": ProcessStatus.ZOMBIE, "container": entry.container, "container_pid": entry.container_pid, "launch": entry.launch,
                    "errors": errors + (("cpu_percent", ZOMBIE), ("rss_bytes", ZOMBIE))}
        status = entry.status
        if entry.prev_ticks is None:
            entry.prev_ticks, entry.prev_time = ticks, now
        elif now - entry.prev_time >= MIN_CPU_SECONDS:
            entry.last_cpu = (ticks - entry.prev_ticks) / _CLK_TCK / (now - entry.prev_time) * 100.0
            entry.prev_ticks, entry.prev_time = ticks, now
        cpu = entry.last_cpu
        if cpu is None:
            errors = errors + (("cpu_percent", FIRST_SAMPLE),)
        try:
            rss = _read_rss(pid)
        except PermissionError:
            rss = None
            errors = errors + (("rss_bytes", NO_PERMISSION),)
            status = ProcessStatus.NO_PERMISSION
        except (OSError, ValueError, IndexError):
            rss = None
            errors = errors + (("rss_bytes", EXITED),)
        return {"user": entry.user, "command": entry.command, "cpu_percent": cpu, "rss_bytes": rss,
                "start_time": entry.create_time, "status": status, "container": entry.container, "container_pid": entry.container_pid,
                "launch": entry.launch, "errors": errors}

    def _lookup_psutil(self, pid: int, now: float, from_nvml: bool) -> dict:
        try:
            proc = psutil.Process(pid)  # reads the create time: our PID-reuse guard
            key = (pid, proc.create_time())
        except psutil.ZombieProcess:
            return self._state(ProcessStatus.ZOMBIE, ZOMBIE, pid)
        except psutil.NoSuchProcess:
            return self._vanished(pid, from_nvml, now)
        except psutil.AccessDenied:
            return self._state(ProcessStatus.NO_PERMISSION, NO_PERMISSION)
        except Exception as exc:  # pragma: no cover - psutil on an exotic platform
            return self._state(ProcessStatus.NO_PERMISSION, f"{type(exc).__name__}: {exc}")
        self._missing.pop(pid, None)
        entry = self._cache.get(key)
        if entry is None:
            entry = self._cache[key] = self._new_entry(proc, key[1])
        entry.last_seen = now
        errors = list(entry.errors)
        status = ProcessStatus.OK
        cpu = rss = None
        try:
            with entry.proc.oneshot():
                try:
                    if not entry.primed or now - entry.prev_time >= MIN_CPU_SECONDS:
                        reading = entry.proc.cpu_percent(None)  # since its last call
                        if entry.primed:
                            entry.last_cpu = reading
                        entry.primed, entry.prev_time = True, now
                    cpu = entry.last_cpu
                    if cpu is None:
                        errors.append(("cpu_percent", FIRST_SAMPLE))
                except psutil.AccessDenied:
                    errors.append(("cpu_percent", NO_PERMISSION))
                    status = ProcessStatus.NO_PERMISSION
                try:
                    rss = entry.proc.memory_info().rss
                except psutil.AccessDenied:
                    errors.append(("rss_bytes", NO_PERMISSION))
                    status = ProcessStatus.NO_PERMISSION
                if entry.proc.status() == psutil.STATUS_ZOMBIE:
                    status = ProcessStatus.ZOMBIE
        except psutil.ZombieProcess:
            status = ProcessStatus.ZOMBIE
        except psutil.NoSuchProcess:
            self._cache.pop(key, None)
            return self._state(ProcessStatus.EXITED, EXITED, user=entry.user, command=entry.command)
        except psutil.AccessDenied:
            status = ProcessStatus.NO_PERMISSION
        if status is ProcessStatus.OK and any(r == NO_PERMISSION for _, r in errors):
            status = ProcessStatus.NO_PERMISSION
        return {
            "user": entry.user,
            "command": entry.command,
            "cpu_percent": cpu,
            "rss_bytes": rss,
            "start_time": entry.create_time,
            "status": status,
            "container": entry.container, "container_pid": entry.container_pid,
            "launch": entry.launch, "errors": tuple(errors),
        }

    def _new_entry(self, proc: psutil.Process, create_time: float) -> _Entry:
        errors: list[tuple[str, str]] = []
        user = command = None
        try:
            user = proc.username()  # uid as text when it has no passwd entry
        except psutil.AccessDenied:
            errors.append(("user", NO_PERMISSION))
        except (psutil.NoSuchProcess, KeyError):
            pass
        try:
            argv = proc.cmdline()
            command = " ".join(argv) if argv else f"[{proc.name()}]"
        except psutil.AccessDenied:
            errors.append(("command", NO_PERMISSION))
        except psutil.ZombieProcess:
            command = None
        except psutil.NoSuchProcess:
            pass
        container = container_pid = None
        try:
            container = container_from_cgroup(Path(self.proc_root, str(proc.pid), "cgroup").read_text(errors="replace"))
        except OSError:
            pass
        try:
            container_pid = pid_in_own_namespace(Path(self.proc_root, str(proc.pid), "status").read_text(errors="replace"))
        except OSError:
            pass
        return _Entry(proc=proc, create_time=create_time, user=user, command=command,
                      container=container, container_pid=container_pid, launch=read_launch(proc),
                      errors=errors, errors_t=tuple(errors),
                      status=ProcessStatus.NO_PERMISSION if errors else ProcessStatus.OK)

    def _vanished(self, pid: int, from_nvml: bool, now: float) -> dict:
        if from_nvml:
            polls, first = self._missing.get(pid, (0, now))
            self._missing[pid] = (polls + 1, first)
            # An exited process drops out of NVML's list within a moment; one that stays is
            # alive in a PID namespace we cannot see.
            if self.in_container or (polls + 1 >= 2 and now - first >= self.namespace_grace):
                if not self._namespace_noticed:
                    self._namespace_noticed = True
                    self._notices.append(f"GPU processes are {NAMESPACE_MESSAGE}")
                # each host field shows "?"; the table, JSON and detail view explain it once
                return self._state(ProcessStatus.NOT_IN_NAMESPACE, NOT_VISIBLE)
        return self._state(ProcessStatus.EXITED, EXITED)

    def _state(self, status: ProcessStatus, reason: str, pid: int | None = None, *,
               user: str | None = None, command: str | None = None) -> dict:
        if status is ProcessStatus.ZOMBIE and pid is not None:
            try:
                user = psutil.Process(pid).username()
            except Exception:
                user = None
        errors = tuple((name, reason) for name, value in (("user", user), ("command", command)) if value is None)
        errors += (("cpu_percent", reason), ("rss_bytes", reason))
        return {"user": user, "command": command, "cpu_percent": None, "rss_bytes": None,
                "start_time": None, "status": status, "container": None, "errors": errors}

    def _expire(self, now: float) -> None:
        stale = [key for key, entry in self._cache.items() if now - entry.last_seen > CACHE_SECONDS]
        for key in stale:
            del self._cache[key]
