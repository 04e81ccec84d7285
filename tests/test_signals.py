"""signals: each refusal, and real delivery to our own child processes."""

from __future__ import annotations

import os
import signal

import psutil
import pytest

from gpumem_tui.support import signals
from gpumem_tui.support.signals import check_signal, send_signal
from waiting import wait_until


def _ct(pid: int) -> float:
    return psutil.Process(pid).create_time()


def _wait_exit(proc, timeout=60.0) -> int:
    # a bound against a hang, not a speed check: under xdist on a loaded 2-core machine a Python
    # child can take seconds to get through start-up and act on the signal
    return proc.wait(timeout=timeout)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_own_process_receives_signal(spawn, sig):
    child = spawn()
    assert check_signal(child.pid, _ct(child.pid), sig) is None
    assert send_signal(child.pid, _ct(child.pid), sig) is None
    assert _wait_exit(child) != 0  # killed (SIGINT ends a sleeping Python with KeyboardInterrupt)


def test_readonly_refuses_everything(spawn):
    child = spawn()
    for sig in signals.ALLOWED_SIGNALS:
        assert check_signal(child.pid, _ct(child.pid), sig, readonly=True) == signals.READONLY
        assert send_signal(child.pid, _ct(child.pid), sig, readonly=True) == signals.READONLY
    assert child.poll() is None


def test_other_signals_refused(spawn):
    child = spawn()
    assert send_signal(child.pid, _ct(child.pid), signal.SIGSTOP) == signals.UNSUPPORTED
    assert child.poll() is None


@pytest.mark.parametrize("pid", [0, -1, 1, os.getpid()], ids=["zero", "negative", "init", "own-pid"])  # ids: xdist workers must collect the same names
def test_bad_targets_refused(pid):
    expected = signals.BAD_TARGET.format(pid=pid)
    assert check_signal(pid, 0.0, signal.SIGTERM) == expected
    assert send_signal(pid, 0.0, signal.SIGTERM) == expected


def test_gone_process_refused(spawn):
    child = spawn()
    pid, created = child.pid, _ct(child.pid)
    child.kill()
    child.wait()
    assert send_signal(pid, created, signal.SIGTERM) == signals.GONE.format(pid=pid)


def test_zombie_refused(spawn):
    child = spawn()
    created = _ct(child.pid)
    os.kill(child.pid, signal.SIGKILL)
    wait_until(lambda: psutil.Process(child.pid).status() == psutil.STATUS_ZOMBIE, what="the killed child to be a zombie")
    assert check_signal(child.pid, created, signal.SIGTERM) == signals.ZOMBIE.format(pid=child.pid)


def test_pid_reuse_refused(spawn):
    child = spawn()
    shown = _ct(child.pid) - 5.0  # the row showed a process that started earlier
    assert send_signal(child.pid, shown, signal.SIGKILL) == signals.REUSED.format(pid=child.pid)
    assert child.poll() is None


def test_unknown_start_time_refused(spawn):
    child = spawn()
    assert send_signal(child.pid, None, signal.SIGKILL) == signals.UNVERIFIED.format(pid=child.pid)
    assert child.poll() is None


def test_not_own_process_refused_when_not_root(monkeypatch, spawn):
    child = spawn()  # owned by our real uid
    owner = psutil.Process(child.pid).username()
    monkeypatch.setattr(os, "geteuid", lambda: 54321)  # pretend to be someone else, not root
    refusal = send_signal(child.pid, _ct(child.pid), signal.SIGKILL)
    assert refusal == signals.NOT_OWN.format(pid=child.pid, user=owner)
    assert child.poll() is None


def test_root_may_signal_other_users(monkeypatch, spawn):
    if os.geteuid() != 0:
        pytest.skip("needs root to start a process as another user")
    child = spawn(user=65534)
    assert psutil.Process(child.pid).uids().real == 65534
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert send_signal(child.pid, _ct(child.pid), signal.SIGTERM) is None
    assert _wait_exit(child) == -signal.SIGTERM


def test_same_user_non_root_allowed(monkeypatch, spawn):
    if os.geteuid() != 0:
        pytest.skip("needs root to start a process as another user")
    child = spawn(user=65534)
    monkeypatch.setattr(os, "geteuid", lambda: 65534)
    assert check_signal(child.pid, _ct(child.pid), signal.SIGTERM) is None
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert check_signal(child.pid, _ct(child.pid), signal.SIGTERM).startswith(f"process {child.pid} belongs to ")


def test_os_permission_denied(monkeypatch, spawn):
    child = spawn()

    def denied(self, sig):
        raise psutil.AccessDenied(self.pid)

    monkeypatch.setattr(psutil.Process, "send_signal", denied)
    assert send_signal(child.pid, _ct(child.pid), signal.SIGTERM) == signals.DENIED.format(pid=child.pid)
    assert child.poll() is None


def test_refusals_are_distinct():
    texts = [signals.READONLY, signals.UNSUPPORTED, signals.BAD_TARGET, signals.GONE, signals.ZOMBIE,
             signals.REUSED, signals.UNVERIFIED, signals.NOT_OWN, signals.DENIED]
    filled = {t.format(pid=7, user="eve") for t in texts}
    assert len(filled) == len(texts)
