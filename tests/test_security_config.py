"""Item 16 of issue 13 (and item 18 for configs): configs only from the user's config
directory or --config, never one another user can write, bounded reads, and no signal on a
key that another action or the confirmation uses."""

from __future__ import annotations

import os
import threading

import pytest
from local_users import shared_dir, two_users  # noqa: F401 - fixtures
from waiting import HANG_TIMEOUT, settle, wait_async

from gpumem_tui.ui import config as cfg

HOSTILE = 'readonly = false\n[keys]\nsignal_kill = "q"\nsignal_confirm = "q"\n'


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    user = tmp_path / "user"
    user.mkdir()
    monkeypatch.setenv(cfg.CONFIG_DIR_ENV, str(user))
    return user


def test_a_config_planted_in_a_shared_working_directory_is_not_read(two_users, shared_dir, user_dir, monkeypatch):
    attacker, _ = two_users
    shared_dir.chmod(0o1777)
    planted = shared_dir / "gpumem-tui.toml"
    planted.write_text(HOSTILE)
    os.chown(planted, attacker.uid, attacker.gid)
    (user_dir / "config.toml").write_text("readonly = true\n")
    monkeypatch.chdir(shared_dir)
    config = cfg.load_config()
    assert config.readonly is True and config.keymap == ()
    assert config.path == user_dir / "config.toml"
    assert any(f"{planted} is not read" in n for n in config.notices)


@pytest.mark.parametrize("mode", [0o666, 0o620])
def test_a_user_config_others_can_write_is_ignored_saying_why(two_users, user_dir, mode):
    path = user_dir / "config.toml"
    path.write_text(HOSTILE)
    os.chown(path, -1, two_users[0].gid)  # a group with another user in it
    path.chmod(mode)
    config = cfg.load_config()
    assert config.keymap == () and config.path is None
    (notice,) = config.notices
    who = "its group and every user" if mode & 0o002 else "its group"
    assert f"writable by {who} (mode {mode:04o}" in notice and "using defaults" in notice


def test_a_user_config_in_a_directory_others_can_write_is_ignored(user_dir):
    (user_dir / "config.toml").write_text(HOSTILE)
    user_dir.chmod(0o777)
    config = cfg.load_config()
    assert config.keymap == () and "config directory" in config.notices[0]


def test_a_user_config_owned_by_another_user_is_ignored(two_users, user_dir):
    attacker, _ = two_users
    path = user_dir / "config.toml"
    path.write_text(HOSTILE)
    os.chown(path, attacker.uid, attacker.gid)
    config = cfg.load_config()
    assert config.keymap == () and f"owned by uid {attacker.uid}" in config.notices[0]


def test_an_explicit_config_others_can_write_is_an_error(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(HOSTILE)
    path.chmod(0o666)
    with pytest.raises(cfg.ConfigError, match="writable by (its group and )?every user"):
        cfg.load_config(path)


def test_fifo_device_and_oversized_configs_are_refused_at_once(tmp_path, user_dir):
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    outcome: list = []

    def load() -> None:
        try:
            cfg.load_config(fifo)
        except cfg.ConfigError as exc:
            outcome.append(str(exc))

    reader = threading.Thread(target=load, daemon=True)
    reader.start()
    reader.join(timeout=HANG_TIMEOUT)  # a hang guard: the bug blocks for ever
    if reader.is_alive():  # today's reader waits for a writer: give it one, then fail
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("reading a FIFO config blocked")
    assert outcome and "not a regular file (a FIFO)" in outcome[0]
    with pytest.raises(cfg.ConfigError, match="a character device"):
        cfg.load_config("/dev/zero")
    big = tmp_path / "big.toml"
    big.write_bytes(b"# " + b"x" * (2 << 20) + b"\n")
    with pytest.raises(cfg.ConfigError, match="over the 1 MiB limit"):
        cfg.load_config(big)
    os.mkfifo(user_dir / "config.toml")
    assert "a FIFO" in cfg.load_config().notices[0]


async def test_a_signal_key_shared_with_quit_is_refused_and_q_quits():
    from ui_fakes import FakeSource

    from gpumem_tui.ui.app import GpuMemApp
    from gpumem_tui.ui.screens import ConfirmSignalScreen

    app = GpuMemApp(FakeSource(), interval=0.05, side_pane=False,
                    keymap=(("signal_kill", "q"), ("signal_confirm", "q"), ("sort_next", "x")))
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot, lambda: app.table.selected is not None, what="a selected row")
        notices = [n for n in app.start_notices if "refused" in n]
        assert len(notices) == 2 and "keys.signal_kill = 'q' refused" in notices[0]
        await pilot.press("q")
        # q quits: wait for the app to stop (a hang guard); had q opened the signal screen it
        # would still be running, showing it
        await wait_async(lambda: not app.is_running or isinstance(app.screen, ConfirmSignalScreen),
                         what="q to quit the app")
        assert not app.is_running  # q quit: it did not open the signal confirmation
