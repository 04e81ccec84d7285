"""Item 14 of issue 13: the probe writer on a shared machine (no symlink followed, no
directory of another user's or writable by others, parents 0700, refusal warns and the
job runs on). Runs as two throw-away users where the tests run as root."""

from __future__ import annotations

import os
import stat
import warnings
from pathlib import Path

import pytest
from local_users import run_as, shared_dir, two_users  # noqa: F401 - fixtures

from gpumem_tui.probe.writer import StreamWriter

SECRET = b"victim's private notes\n"


def _victim_secret(victim, base: Path) -> Path:
    home = base / "victim-home"
    home.mkdir(mode=0o700)
    secret = home / "notes.txt"
    secret.write_bytes(SECRET)
    secret.chmod(0o600)
    os.chown(home, victim.uid, victim.gid)
    os.chown(secret, victim.uid, victim.gid)
    return secret


def _write_stream(directory: str, lines: int) -> tuple[str | None, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        writer = StreamWriter(Path(directory) / "4242.jsonl", {"kind": "info"}, max_bytes=64 << 10)
        for i in range(lines):
            writer.write({"kind": "sample", "time": float(i), "pad": "x" * 200})
        writer.close()
    return writer.failed, [str(w.message) for w in caught]


@pytest.mark.parametrize("layout", ["sticky-1777", "attacker-owned-0755"])
def test_a_planted_symlink_never_makes_the_victims_probe_overwrite_their_file(two_users, shared_dir, layout):
    attacker, victim = two_users
    secret = _victim_secret(victim, shared_dir)
    probes = shared_dir / "probes"
    probes.mkdir()
    if layout == "sticky-1777":  # a team's common GPUMEM_TUI_PROBE_DIR
        probes.chmod(0o1777)
    else:
        os.chown(probes, attacker.uid, attacker.gid)
    run_as(attacker, os.symlink, str(secret), str(probes / "4242.jsonl"))
    run_as(attacker, os.symlink, str(secret), str(probes / "4242.jsonl.new"))

    failed, warned = run_as(victim, _write_stream, str(probes), 600)  # 600 lines rotate at 64 KiB

    assert secret.read_bytes() == SECRET
    assert failed is not None and len(warned) == 1
    expected = "every user (mode 1777)" if layout == "sticky-1777" else f"owned by {attacker.name}"
    assert expected in failed and expected in warned[0]


def test_symlinks_in_the_users_own_directory_are_replaced_not_followed(tmp_path):
    secret = tmp_path / "secret"
    secret.write_bytes(SECRET)
    probes = tmp_path / "probes"
    probes.mkdir(mode=0o700)
    (probes / "4242.jsonl").symlink_to(secret)
    (probes / "4242.jsonl.new").symlink_to(secret)

    failed, warned = _write_stream(str(probes), 600)  # rotates through 4242.jsonl.new

    assert failed is None and warned == []
    assert secret.read_bytes() == SECRET
    st = os.lstat(probes / "4242.jsonl")
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
    assert b'"generation":' in (probes / "4242.jsonl").read_bytes()  # it did rotate


def test_parents_are_created_0700_whatever_the_umask(tmp_path):
    old = os.umask(0)
    try:
        failed, _ = _write_stream(str(tmp_path / "a" / "b" / "probes"), 1)
    finally:
        os.umask(old)
    assert failed is None
    for path in (tmp_path / "a", tmp_path / "a" / "b", tmp_path / "a" / "b" / "probes"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700, path
    assert stat.S_IMODE((tmp_path / "a/b/probes/4242.jsonl").stat().st_mode) == 0o600


def test_a_group_writable_directory_is_refused_saying_which_and_why(two_users, tmp_path):
    attacker, _ = two_users
    probes = tmp_path / "probes"
    probes.mkdir()
    os.chown(probes, -1, attacker.gid)  # a group with another user in it
    probes.chmod(0o770)
    failed, warned = _write_stream(str(probes), 3)
    assert failed is not None and "writable by its group (mode 0770)" in failed and "chmod go-w" in failed
    assert len(warned) == 1
    assert not (probes / "4242.jsonl").exists()


def test_a_refused_directory_warns_once_and_the_training_job_runs_on(two_users, tmp_path):
    torch = pytest.importorskip("torch")
    import gpumem_tui.probe as gprobe

    attacker, _ = two_users
    probes = tmp_path / "probes"
    probes.mkdir()
    os.chown(probes, attacker.uid, attacker.gid)  # the attacker's 0755 directory
    model = torch.nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        probe = gprobe.attach(model, opt, directory=probes, interval=0.01, min_step_interval=0.0)
        try:
            for _ in range(3):
                model(torch.ones(2, 4)).sum().backward()
                opt.step()
                opt.zero_grad()
        finally:
            probe.close()
    assert probe.step == 3
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(messages) == 1 and f"owned by {attacker.name}" in messages[0]
    assert list(probes.iterdir()) == []


def test_a_directory_writable_only_by_the_users_private_group_is_accepted(two_users, shared_dir):
    _, victim = two_users  # useradd gave the victim a private group of the same name (umask 002 style)
    probes = shared_dir / "probes"
    probes.mkdir()
    os.chown(probes, victim.uid, victim.gid)
    probes.chmod(0o775)
    failed, warned = run_as(victim, _write_stream, str(probes), 3)
    assert failed is None and warned == []
    assert (probes / "4242.jsonl").stat().st_uid == victim.uid
