"""Config file: search order, strict validation, errors named with file and line."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gpumem_tui.ui import config as cfg


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    """Keep the tester's own config out: empty user dir and an empty cwd."""
    user = tmp_path / "user"
    user.mkdir()
    monkeypatch.setenv(cfg.CONFIG_DIR_ENV, str(user))
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    return user, work


def test_defaults_without_files():
    c = cfg.load_config()
    assert c == cfg.Config()
    assert c.notices == ()


def test_nearest_first(_isolated):
    user, work = _isolated
    (user / "config.toml").write_text('interval = 3\ntheme = "light"\n')
    assert cfg.load_config().interval == 3.0
    (work / "gpumem-tui.toml").write_text("interval = 0.5\n")
    c = cfg.load_config()
    assert c.interval == 3.0 and c.theme == "light"  # the working directory's file is never read
    assert c.path == user / "config.toml"
    assert any("gpumem-tui.toml is not read" in n for n in c.notices)
    explicit = work / "other.toml"
    explicit.write_text("readonly = true\n")
    c = cfg.load_config(explicit)
    assert c.readonly is True and c.interval == 1.0


def test_syntax_error_names_file_and_line(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text('interval = 2\ntheme = "dark\nreadonly = true\n')
    c = cfg.load_config(p)
    assert c.interval == 1.0  # whole file ignored
    assert len(c.notices) == 1
    assert c.notices[0].startswith(f"{p}:2:")
    assert "using defaults" in c.notices[0]


def test_bad_values_skip_only_that_key(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text(
        "# comment\n"
        'theme = "light"\n'
        "interval = -1\n"
        'readonly = "yes"\n'
        "colour = 3\n"
        "[keys]\n"
        'quit = "ctrl+q"\n'
        "help = 5\n"
    )
    c = cfg.load_config(p)
    assert c.theme == "light"
    assert c.interval == 1.0 and c.readonly is False
    assert c.keymap == (("quit", "ctrl+q"),)
    text = "\n".join(c.notices)
    assert f"{p}:3: interval" in text
    assert f"{p}:4: readonly" in text
    assert f"{p}:5: unknown setting 'colour'" in text
    assert f"{p}:8: key for 'help'" in text
    assert len(c.notices) == 4


def test_explicit_missing_raises(tmp_path):
    with pytest.raises(cfg.ConfigError, match="nope.toml"):
        cfg.load_config(tmp_path / "nope.toml")


@pytest.mark.parametrize("value", ["0", "nan", "inf", "true", '"1"'])
def test_interval_rejected(value):
    c = cfg.parse_config(f"interval = {value}\n")
    assert c.interval == 1.0 and len(c.notices) == 1


def test_config_is_headless():
    code = "import sys, gpumem_tui.ui.config; print('textual' in sys.modules, 'rich' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
