"""Item 14 of issue 13: the probe writer on a shared machine (no symlink followed, no
directory of another user's or writable by others, parents 0700, refusal warns and the
job runs on). Runs as two throw-away users where the tests run as root."""

from __future__ import annotations

import errno
import json
import os
import stat
import subprocess
import sys
import time
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


@pytest.mark.torch_in_process
def test_a_refused_directory_warns_once_and_the_training_job_runs_on(two_users, tmp_path):
    import torch
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


# -- every parent checked, and the directory used only through its descriptor --------------

DEAD_PID = 999999999  # beyond Linux's pid_max: never a running process
WEEK = 7 * 24 * 3600.0


def _old_stream(directory: Path, pid: int = DEAD_PID, owner=None) -> Path:
    """A stream of a dead process, untouched for two weeks (what the stale cleanup deletes)."""
    path = directory / f"{pid}.jsonl"
    path.write_bytes(b'{"kind":"info"}\n')
    if owner is not None:
        os.chown(path, owner.uid, owner.gid)
    past = time.time() - 2 * WEEK
    os.utime(path, (past, past))
    return path


def _probe_and_clean(stream_path: str) -> tuple[str | None, list[str], list[str]]:
    """What the probe does at attach: open the stream, then delete stale streams."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        writer = StreamWriter(Path(stream_path), {"kind": "info"})
        removed = writer.remove_stale(WEEK, lambda pid, created: False)
        writer.write({"kind": "sample", "time": 1.0})
        writer.close()
    return writer.failed, [str(w.message) for w in caught], removed


@pytest.mark.parametrize("layout", ["parent-0777", "sticky-parent-attackers-link"])
def test_a_swapped_probe_directory_never_redirects_the_victims_stream_or_cleanup(two_users, shared_dir, layout):
    attacker, victim = two_users
    home = shared_dir / "victim-home"
    home.mkdir(mode=0o700)
    old = _old_stream(home, owner=victim)
    os.chown(home, victim.uid, victim.gid)
    scratch = shared_dir / "scratch"
    scratch.mkdir()
    scratch.chmod(0o777 if layout == "parent-0777" else 0o1777)
    # the victim's probe directory was scratch/probes; the attacker puts a link in its place
    run_as(attacker, os.symlink, str(home), str(scratch / "probes"))

    failed, warned, removed = run_as(victim, _probe_and_clean, str(scratch / "probes" / "4242.jsonl"))

    assert old.read_bytes() == b'{"kind":"info"}\n' and removed == []
    assert sorted(p.name for p in home.iterdir()) == [old.name]  # nothing written into the victim's directory
    assert failed is not None and len(warned) == 1 and failed in warned[0]
    if layout == "parent-0777":
        assert f"parent directory {scratch} of the probe directory" in failed
        assert "every user without the sticky bit (mode 0777)" in failed
    else:
        assert f"{scratch / 'probes'} is a symbolic link owned by {attacker.name}" in failed


def test_a_parent_owned_by_another_user_is_refused(two_users, shared_dir):
    attacker, victim = two_users
    parent = shared_dir / "attackers"
    parent.mkdir(mode=0o755)
    os.chown(parent, attacker.uid, attacker.gid)  # can rename the victim's directory away at will
    probes = parent / "probes"
    probes.mkdir(mode=0o700)
    os.chown(probes, victim.uid, victim.gid)
    failed, warned, _ = run_as(victim, _probe_and_clean, str(probes / "4242.jsonl"))
    assert failed is not None and f"parent directory {parent} of the probe directory is owned by {attacker.name}" \
        in failed
    assert not (probes / "4242.jsonl").exists()


def test_links_of_your_own_are_followed_and_what_they_lead_to_is_checked(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "via").symlink_to("real")  # relative target
    failed, warned, _ = _probe_and_clean(str(tmp_path / "via" / "4242.jsonl"))
    assert failed is None and warned == [] and (real / "4242.jsonl").is_file()

    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)  # no sticky bit
    (open_dir / "probes").mkdir(mode=0o700)
    (tmp_path / "via-open").symlink_to(open_dir / "probes")  # absolute target
    failed, _, _ = _probe_and_clean(str(tmp_path / "via-open" / "4242.jsonl"))
    assert failed is not None and f"parent directory {open_dir} of the probe directory" in failed
    assert not (open_dir / "probes" / "4242.jsonl").exists()


def test_a_directory_renamed_and_replaced_by_a_link_after_the_check_is_not_followed(tmp_path):
    probes = tmp_path / "probes"
    probes.mkdir(mode=0o700)
    mine = _old_stream(probes)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    theirs = _old_stream(elsewhere)
    writer = StreamWriter(probes / "4242.jsonl", {"kind": "info"}, max_bytes=64 << 10)
    probes.rename(tmp_path / "moved")
    probes.symlink_to(elsewhere)  # the path now leads somewhere else; the descriptor does not

    removed = writer.remove_stale(WEEK, lambda pid, created: False)
    for i in range(600):  # rotates through 4242.jsonl.new
        writer.write({"kind": "sample", "time": float(i), "pad": "x" * 200})
    writer.close()

    assert removed == [mine.name] and not (tmp_path / "moved" / mine.name).exists()
    assert theirs.exists() and sorted(p.name for p in elsewhere.iterdir()) == [theirs.name]
    assert b'"generation":' in (tmp_path / "moved" / "4242.jsonl").read_bytes()


def test_the_stale_cleanup_deletes_only_old_regular_streams_of_yours_whose_process_is_gone(two_users, tmp_path):
    attacker, _ = two_users
    probes = tmp_path / "probes"
    probes.mkdir(mode=0o700)
    target = tmp_path / "target.jsonl"
    target.write_bytes(SECRET)
    stale = _old_stream(probes, 111)
    fresh = probes / "222.jsonl"
    fresh.write_bytes(b"{}\n")
    running = _old_stream(probes, 333)
    foreign = _old_stream(probes, 444, owner=attacker)
    link = probes / "555.jsonl"
    link.symlink_to(target)
    os.utime(link, (0, 0), follow_symlinks=False)
    writer = StreamWriter(probes / "4242.jsonl", {"kind": "info"})
    removed = writer.remove_stale(WEEK, lambda pid, created: pid == 333)
    writer.close()
    assert removed == [stale.name]
    assert not stale.exists() and fresh.exists() and running.exists() and foreign.exists() and link.is_symlink()
    assert target.read_bytes() == SECRET


# -- disk full: the job trains on, the stream tears nothing and resumes with a gap record ----


class _Disk:
    """os.write for one descriptor as a disk with ``room`` bytes left (None: no limit), or
    failing with ``error``: a write that does not fit writes what fits (a short write, as
    the kernel does) and the next one fails."""

    def __init__(self, real_write, error: int = errno.ENOSPC) -> None:
        self.real_write, self.error, self.fd, self.room = real_write, error, None, None

    def __call__(self, fd: int, data) -> int:
        if fd != self.fd or self.room is None:
            return self.real_write(fd, data)
        if self.room == 0:
            raise OSError(self.error, os.strerror(self.error))
        written = self.real_write(fd, bytes(data)[: self.room])
        self.room -= written
        return written


def _lines(path: Path) -> list[dict]:
    data = path.read_bytes()
    assert data.endswith(b"\n")  # no torn last line
    return [json.loads(line) for line in data.splitlines()]


@pytest.mark.parametrize(("error", "room"), [(errno.ENOSPC, 20), (errno.EDQUOT, 0)])
def test_a_full_disk_tears_no_line_and_the_stream_resumes_with_a_gap_record(tmp_path, monkeypatch, error, room):
    disk = _Disk(os.write, error)
    monkeypatch.setattr(os, "write", disk)
    path = tmp_path / "probes" / "4242.jsonl"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        writer = StreamWriter(path, {"kind": "info", "format": "gpumem-tui-probe", "pid": 4242})
        disk.fd = writer._fd
        now = time.time()
        for i in range(3):
            writer.write({"kind": "sample", "time": now, "step": i})
        disk.room = room  # the next line does not fit (20: 20 of its bytes land), then nothing does
        for i in range(3, 8):
            writer.write({"kind": "sample", "time": now, "step": i})
            assert _lines(path)[-1] == {"kind": "sample", "time": now, "step": 2}  # never torn, also meanwhile
        assert writer.dropped == 5 and writer.failed is None
        disk.room = None  # space again
        writer.write({"kind": "sample", "time": now, "step": 8})
        writer.close()
    lines = _lines(path)
    assert [line.get("step") for line in lines if line["kind"] == "sample"] == [0, 1, 2, 8]
    (gap,) = [line for line in lines if line["kind"] == "gap"]
    assert lines.index(gap) == len(lines) - 2 and gap["dropped"] == 5 and gap["start"] <= gap["time"]
    assert writer.dropped == 0
    (warning,) = [str(w.message) for w in caught]
    assert (os.strerror(error) if room == 0 else "no room: wrote 20 of ") in warning and "gap record" in warning


def test_a_file_size_limit_hit_by_a_real_write_tears_nothing_and_resumes(tmp_path):
    """RLIMIT_FSIZE makes the kernel itself do short writes and then EFBIG (SIGXFSZ ignored)."""
    path = tmp_path / "4242.jsonl"
    script = f"""
import resource, signal, time, warnings
from pathlib import Path
from gpumem_tui.probe.writer import StreamWriter
warnings.simplefilter("ignore")
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
writer = StreamWriter(Path({str(path)!r}), {{"kind": "info", "format": "gpumem-tui-probe", "pid": 4242}})
now = time.time()
for i in range(3):
    writer.write({{"kind": "sample", "time": now, "step": i, "pad": "x" * 50}})
resource.setrlimit(resource.RLIMIT_FSIZE, (Path({str(path)!r}).stat().st_size + 30, hard))
for i in range(3, 7):
    writer.write({{"kind": "sample", "time": now, "step": i, "pad": "x" * 50}})
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
writer.write({{"kind": "sample", "time": now, "step": 7, "pad": "x" * 50}})
writer.close()
print(writer.failed, writer.dropped)
"""
    done = subprocess.run([sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": os.getcwd()},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["None", "0"]
    lines = _lines(path)
    assert [line.get("step") for line in lines if line["kind"] == "sample"] == [0, 1, 2, 7]
    assert [line["dropped"] for line in lines if line["kind"] == "gap"] == [4]


def test_the_dashboard_reads_the_gap_and_shows_only_what_was_written(tmp_path, monkeypatch):
    from gpumem_tui.telemetry.probe_source import ProbeSource

    disk = _Disk(os.write)
    monkeypatch.setattr(os, "write", disk)
    writer = StreamWriter(tmp_path / f"{os.getpid()}.jsonl",
                          {"kind": "info", "format": "gpumem-tui-probe", "pid": os.getpid()})
    disk.fd = writer._fd
    now = time.time()
    sample = {"kind": "sample", "step": 1, "phase": "forward", "device": "cuda:0", "torch_allocated": 1 << 30}
    writer.write({**sample, "time": now - 3})
    disk.room = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(4):
            writer.write({**sample, "time": now - 2 + i * 0.1})
    disk.room = None
    writer.write({**sample, "time": now})
    writer.close()
    reading = ProbeSource(tmp_path).poll()
    assert [p.time for p in reading.probes] == [now - 3, now]  # nothing made up for the gap
    (notice,) = [n for n in reading.notices if "lost" in n]
    assert "4 records lost" in notice and "disk full" in notice


def test_a_parent_you_may_only_pass_through_is_walked_without_reading_it(two_users, shared_dir):
    _, victim = two_users
    passage = shared_dir / "passage"
    passage.mkdir()
    passage.chmod(0o711)  # root's, searchable but not readable by the victim
    probes = passage / "probes"
    probes.mkdir(mode=0o700)
    os.chown(probes, victim.uid, victim.gid)
    failed, warned, _ = run_as(victim, _probe_and_clean, str(probes / "4242.jsonl"))
    assert failed is None and warned == []
    assert (probes / "4242.jsonl").stat().st_uid == victim.uid
