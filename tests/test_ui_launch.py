"""`gpumem-tui` option errors: one line on stderr, exit code 2, no Textual started."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gpumem_tui.ui import launch


@pytest.fixture(autouse=True)
def _no_user_config_in_a_fresh_directory(no_user_config, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--interval", "0"], "argument --interval: must be > 0 seconds, got '0'"),
        (["--interval", "-1"], "argument --interval: must be > 0 seconds"),
        (["--interval", "abc"], "argument --interval: must be a number of seconds, got 'abc'"),
        (["--interval", "nan"], "argument --interval: must be a finite number of seconds, got 'nan'"),
        (["--interval", "inf"], "argument --interval: must be a finite number of seconds, got 'inf'"),
        (["--theme", "nosuch"], "unknown theme 'nosuch'; available: dark, light, "),
        (["--bogus"], "unrecognized arguments: --bogus"),
        (["--config", "missing.toml"], "cannot read config file missing.toml"),
    ],
)
def test_bad_options_exit_2_with_one_line(argv, message, capsys, monkeypatch):
    started = []
    monkeypatch.setattr(launch, "run_dashboard", lambda **kw: started.append(kw))
    assert launch.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and err.startswith("gpumem-tui: ")
    assert not started


def test_good_options_reach_run_dashboard(monkeypatch, tmp_path):
    seen = {}
    monkeypatch.setattr(launch, "run_dashboard", lambda **kw: seen.update(kw))
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "config.toml").write_text("interval = 3\nreadonly = true\n")
    assert launch.main(["--theme", "light", "--no-demo"]) == 0
    assert seen["interval"] == 3.0 and seen["theme"] == "light" and seen["readonly"] is True
    assert seen["demo"] is False
    assert launch.main(["--interval", "0.5"]) == 0
    assert seen["interval"] == 0.5 and seen["demo"] is True


def test_unknown_theme_in_config_is_a_notice_not_an_error(monkeypatch, tmp_path):
    seen = {}
    monkeypatch.setattr(launch, "run_dashboard", lambda **kw: seen.update(kw))
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "config.toml").write_text('theme = "neon"\n')
    assert launch.main([]) == 0
    assert seen["theme"] == "dark"
    assert any("unknown theme 'neon'" in n for n in seen["config"].notices)


def test_cli_startup_does_not_import_textual_or_torch():
    code = (
        "import sys; from gpumem_tui.ui import launch; "
        "print('textual' in sys.modules, 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_cli_bad_interval_end_to_end():
    out = subprocess.run(
        [sys.executable, "-m", "gpumem_tui", "--interval", "0"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2
    assert out.stderr.strip() == "gpumem-tui: argument --interval: must be > 0 seconds, got '0'"
