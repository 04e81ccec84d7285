"""Theme files: bundled themes complete, errors named with file and line, TCSS without hex."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpumem_tui.ui import themes as th

ROOT = Path(__file__).resolve().parent.parent


pytestmark = pytest.mark.usefixtures("no_user_config")  # tests/conftest.py


def test_bundled_themes_load_and_define_every_app_variable():
    loaded = th.load_themes()
    assert loaded.problems == []
    assert {"dark", "light"} <= set(loaded.themes)
    assert loaded.themes["dark"].dark is True and loaded.themes["light"].dark is False
    for name in ("dark", "light"):
        missing = set(th.APP_VARIABLES) - set(loaded.themes[name].variables)
        assert not missing, f"{name} lacks {missing}"


def test_bundled_dir_is_repo_themes_in_editable_install():
    assert th.bundled_theme_dir() == ROOT / "themes"


@pytest.mark.parametrize(
    "text, line, fragment",
    [
        ('primary = "#112233"\ndark = true\nbackground = "#zzz"\n', 3, "background: '#zzz' is not a colour"),
        ('primary = "#112233"\n\nflavour = "mint"\n', 3, "unknown theme field 'flavour'"),
        ('primary = "#112233"\ndark = "yes"\n', 2, "dark must be true or false"),
        ('primary = "#112233"\n[variables]\nband-gradients = "nope"\n', 3, "variable band-gradients"),
        ('primary = "#112233\n', 1, "Illegal character"),
        ('dark = true\n', None, "missing required field 'primary'"),
        ('name = "other"\nprimary = "#112233"\n', 1, "must match the file name 'mine'"),
    ],
)
def test_theme_errors_name_file_and_line(tmp_path, text, line, fragment):
    path = tmp_path / "mine.toml"
    path.write_text(text)
    result = th.load_themes([tmp_path])
    assert "mine" not in result.themes and "mine" in result.names
    assert len(result.problems) == 1
    problem = result.problems[0]
    prefix = f"{path}:{line}:" if line else f"{path}:"
    assert problem.startswith(prefix), problem
    assert fragment in problem
    assert problem.endswith("theme 'mine' not loaded")


def test_user_theme_overrides_and_adds(tmp_path, monkeypatch):
    user = tmp_path / "cfg" / "themes"
    user.mkdir(parents=True)
    (user / "light.toml").write_text('primary = "#000000"\ndark = false\n')
    (user / "neon.toml").write_text('primary = "#39FF14"\n[variables]\ncurve-measured = "#FFFFFF"\n')
    loaded = th.load_themes()
    assert loaded.themes["light"].primary == "#000000"
    assert loaded.themes["neon"].variables["curve-measured"] == "#FFFFFF"
    assert "neon" in th.known_theme_names(loaded)
    assert "textual-dark" in th.known_theme_names(loaded)


def test_tcss_uses_only_theme_variables():
    sources = [(ROOT / "gpumem_tui/ui/app.tcss").read_text()]
    for module in ("memory_chart", "process_table", "device_panel"):
        text = (ROOT / f"gpumem_tui/ui/{module}.py").read_text()
        sources += re.findall(r'DEFAULT_CSS = """(.*?)"""', text, re.S)
    css = "\n".join(sources)
    assert css.count("$") > 10  # the styles do use theme variables
    assert _hex_colours("#status { color: #ff0000; }") == ["#ff0000"]  # the check can fail
    assert _hex_colours(css) == []
    assert not re.search(r"\brgb\(|\bhsl\(", css)


def _hex_colours(css: str) -> list[str]:
    """Hex colour values (after a ':'), not id selectors."""
    return re.findall(r":[^;{}]*?(#[0-9a-fA-F]{3,8})\b", css)


async def test_palette_lists_bundled_themes():
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from ui_fakes import FakeSource

    from gpumem_tui.ui.app import GpuMemApp

    app = GpuMemApp(FakeSource(steps=1), themes=th.load_themes(), theme="light", side_pane=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        assert app.theme == "light"
        assert {"dark", "light"} <= set(app.available_themes)
        assert app.theme_variables["band-parameters"].upper() == "#1F6FC5"
        app.theme = "textual-dark"  # a Textual theme: app variables fall back to defaults
        await pilot.pause()
        assert app.theme_variables["band-parameters"] == th.APP_VARIABLES["band-parameters"]
