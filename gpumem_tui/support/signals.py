"""Send SIGINT / SIGTERM / SIGKILL to a process the user selected -- only when it is safe.

Headless (psutil only); the UI asks for confirmation (naming pid, user and command) and then
calls :func:`send_signal`, which checks everything again right before sending.

A signal is refused, with a reason the UI shows as is, when:

- the dashboard runs read-only (``--readonly``)                          -> :data:`READONLY`
- the signal is not SIGINT, SIGTERM or SIGKILL                          -> :data:`UNSUPPORTED`
- the PID is not a real target (<= 1, or gpumem-tui itself)             -> :data:`BAD_TARGET`
- the process is gone, or a zombie                                      -> :data:`GONE`, :data:`ZOMBIE`
- the PID now belongs to another process (its start time differs from
  the one shown, psutil ``create_time``), or the start time is unknown  -> :data:`REUSED`, :data:`UNVERIFIED`
- the process belongs to another user and we are not root               -> :data:`NOT_OWN`
- the OS said no (EPERM)                                                 -> :data:`DENIED`

Every reason is a distinct template; ``str.format(pid=..., user=...)`` fills it in.
"""

from __future__ import annotations

import os
import signal

import psutil

ALLOWED_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)

READONLY = "read-only mode: sending signals is disabled"
UNSUPPORTED = "only SIGINT, SIGTERM and SIGKILL can be sent"
BAD_TARGET = "refusing to signal PID {pid} (init, a process group, or gpumem-tui itself)"
GONE = "process {pid} has exited"
ZOMBIE = "process {pid} has already exited (zombie waiting for its parent)"
REUSED = "PID {pid} now belongs to a different process (start time differs); not signalled"
UNVERIFIED = "cannot verify that PID {pid} is the process shown (start time unknown); not signalled"
NOT_OWN = "process {pid} belongs to {user}; only your own processes can be signalled (unless root)"
DENIED = "permission denied by the OS for PID {pid}"

# psutil's create_time is derived from the boot time and /proc/<pid>/stat start ticks; both
# readings of one process agree to well below this.
_CREATE_TIME_TOLERANCE_S = 0.05


def _signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return str(sig)


def _check(pid: int, expected_create_time: float | None, sig: int, readonly: bool) -> tuple[str | None, psutil.Process | None]:
    if readonly:
        return READONLY, None
    if sig not in ALLOWED_SIGNALS:
        return UNSUPPORTED, None
    if not isinstance(pid, int) or pid <= 1 or pid == os.getpid():
        return BAD_TARGET.format(pid=pid), None
    try:
        proc = psutil.Process(pid)
        create_time = proc.create_time()
        status = proc.status()
    except psutil.ZombieProcess:
        return ZOMBIE.format(pid=pid), None
    except psutil.NoSuchProcess:
        return GONE.format(pid=pid), None
    except psutil.AccessDenied:
        return DENIED.format(pid=pid), None
    if expected_create_time is None:
        return UNVERIFIED.format(pid=pid), None
    if abs(create_time - expected_create_time) > _CREATE_TIME_TOLERANCE_S:
        return REUSED.format(pid=pid), None
    if status == psutil.STATUS_ZOMBIE:
        return ZOMBIE.format(pid=pid), None
    euid = os.geteuid()
    if euid != 0:
        try:
            uids = proc.uids()
        except psutil.NoSuchProcess:
            return GONE.format(pid=pid), None
        except psutil.AccessDenied:
            return DENIED.format(pid=pid), None
        if euid not in (uids.real, uids.effective):
            try:
                user = proc.username()
            except Exception:
                user = f"uid {uids.real}"
            return NOT_OWN.format(pid=pid, user=user), None
    return None, proc


def check_signal(pid: int, expected_create_time: float | None, sig: int, *, readonly: bool = False) -> str | None:
    """Why ``sig`` must not be sent to ``pid`` now, or None if it may be.

    Args:
        pid: the process shown to the user.
        expected_create_time: its start time as shown (epoch seconds, psutil ``create_time``;
            ``ProcessSample.start_time``); None refuses (cannot rule out PID reuse).
        sig: ``signal.SIGINT``, ``SIGTERM`` or ``SIGKILL``.
        readonly: the dashboard's read-only mode.

    Returns one of the module's refusal texts (filled in), or None. Never raises.
    """
    try:
        return _check(pid, expected_create_time, sig, readonly)[0]
    except Exception as exc:  # pragma: no cover - defensive: refusing is always safe
        return f"cannot check PID {pid}: {type(exc).__name__}: {exc}"


def send_signal(pid: int, expected_create_time: float | None, sig: int, *, readonly: bool = False) -> str | None:
    """Check as :func:`check_signal`, then send ``sig``. Returns None when sent, else the refusal.

    The signal goes through ``psutil.Process.send_signal``, which checks once more that the
    PID was not reused since the check. Never raises.
    """
    try:
        refusal, proc = _check(pid, expected_create_time, sig, readonly)
        if refusal is not None:
            return refusal
        assert proc is not None
        proc.send_signal(sig)
    except psutil.NoSuchProcess:
        return GONE.format(pid=pid)
    except (psutil.AccessDenied, PermissionError):
        return DENIED.format(pid=pid)
    except Exception as exc:
        return f"could not send {_signal_name(sig)} to PID {pid}: {type(exc).__name__}: {exc}"
    return None
