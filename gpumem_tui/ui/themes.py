"""Load the bundled and user themes (TOML files) into Textual ``Theme`` objects.

A theme file is named ``<theme name>.toml``. Top-level keys are Textual ``Theme`` fields
(``primary`` required; ``secondary``, ``accent``, ``warning``, ``error``, ``success``,
``foreground``, ``background``, ``surface``, ``panel``, ``boost`` colours; ``dark`` bool;
``luminosity_spread``, ``text_alpha`` floats); the ``[variables]`` table holds the app's own
colours (see :data:`APP_VARIABLES`), which the chart, bars and estimator bands use.

Where themes are found, later ones overriding earlier ones of the same name:

1. the bundled folder: ``gpumem_tui/_themes`` in an installed wheel (pyproject force-include),
   or the repository's top-level ``themes/`` in an editable install;
2. ``<user config dir>/themes/*.toml`` (see :func:`gpumem_tui.ui.config_dir.user_config_dir`).

A file with an error is skipped; its problem is returned as ``path:line: message`` so the app
can show it once and fall back to the default theme.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from textual.color import Color, ColorParseError
from textual.theme import Theme

from gpumem_tui.ui.config_dir import user_config_dir

DEFAULT_THEME = "dark"
FALLBACK_THEME = "textual-dark"  # used only when the bundled default itself fails to load

#: App colour variables with their defaults (also the fallback for Textual's own themes).
APP_VARIABLES: dict[str, str] = {
    "band-parameters": "#4EA1F3",
    "band-gradients": "#B07CF0",
    "band-optimizer-states": "#F5A623",
    "band-activations": "#4CC38A",
    "band-kv-cache": "#E36FB0",
    "band-cuda-context": "#8A939E",
    "curve-measured": "#E2E6EB",
    "curve-reserved": "#7FD4E8",
    "curve-nvml": "#C9A0FF",
    "line-total": "#F0524F",
    "phase-init": "#4E8FE0",
    "phase-forward": "#F59A3B",
    "phase-backward": "#E8D44D",
    "phase-optimizer-step": "#4CC38A",
    "bar-used": "#4EA1F3",
    "bar-free": "#2E3540",
}

_COLOUR_FIELDS = (
    "primary", "secondary", "warning", "error", "success", "accent",
    "foreground", "background", "surface", "panel", "boost",
)
_FLOAT_FIELDS = ("luminosity_spread", "text_alpha")


@dataclass
class ThemeSet:
    """Result of loading: good themes by name, every name seen (good or bad), problems."""

    themes: dict[str, Theme] = field(default_factory=dict)
    names: set[str] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)
    paths: dict[str, Path] = field(default_factory=dict)


def bundled_theme_dir() -> Path | None:
    """The bundled themes folder (wheel ``_themes`` first, then the repository ``themes/``)."""
    package = Path(__file__).resolve().parent.parent
    for candidate in (package / "_themes", package.parent / "themes"):
        if candidate.is_dir():
            return candidate
    return None


def theme_dirs() -> list[Path]:
    """Folders searched for ``*.toml`` themes, lowest precedence first."""
    dirs = []
    bundled = bundled_theme_dir()
    if bundled is not None:
        dirs.append(bundled)
    dirs.append(user_config_dir() / "themes")
    return dirs


class ThemeFileError(ValueError):
    """A theme file that cannot be used; ``str()`` is ``path:line: message``."""


def parse_theme(text: str, path: Path) -> Theme:
    """Build a Theme named after ``path``'s stem from TOML ``text``.

    Raises:
        ThemeFileError: TOML syntax error, unknown key, missing ``primary`` or a value that is
            not a colour / bool / number; the message names the file and line.
    """
    name = path.stem

    def fail(message: str, line: int | None) -> ThemeFileError:
        where = f"{path}:{line}" if line else str(path)
        return ThemeFileError(f"{where}: {message}")

    def fail_at(message: str, key: str, table: str | None = None) -> ThemeFileError:
        # the line is looked up only for an error: a scan per key cost start-up ~5 ms (and
        # the config parser's module, compiled on the first start, ~20 M instructions)
        from gpumem_tui.ui.config import key_line

        return fail(message, key_line(text, key, table))

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        from gpumem_tui.ui.config import toml_error_line

        msg = str(exc).split(" (at line")[0]
        raise fail(msg, toml_error_line(exc)) from None
    kwargs: dict[str, object] = {"name": name}
    for key, value in data.items():
        if key in _COLOUR_FIELDS:
            if not isinstance(value, str):
                raise fail_at(f"{key} must be a colour string, got {value!r}", key)
            try:
                Color.parse(value)
            except ColorParseError:
                raise fail_at(f"{key}: {value!r} is not a colour", key) from None
            kwargs[key] = value
        elif key == "dark":
            if not isinstance(value, bool):
                raise fail_at(f"dark must be true or false, got {value!r}", key)
            kwargs[key] = value
        elif key in _FLOAT_FIELDS:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise fail_at(f"{key} must be a number, got {value!r}", key)
            kwargs[key] = float(value)
        elif key == "name":
            if value != name:
                raise fail_at(f"name {value!r} must match the file name {name!r}", key)
        elif key == "variables":
            if not isinstance(value, dict):
                raise fail_at("variables must be a table", key)
            variables: dict[str, str] = {}
            for var, colour in value.items():
                if not isinstance(colour, str):
                    raise fail_at(f"variable {var} must be a colour string, got {colour!r}", var, "variables")
                if var in APP_VARIABLES:
                    try:
                        Color.parse(colour)
                    except ColorParseError:
                        raise fail_at(f"variable {var}: {colour!r} is not a colour", var, "variables") from None
                variables[var] = colour
            kwargs["variables"] = variables
        else:
            raise fail_at(f"unknown theme field {key!r}", key)
    if "primary" not in kwargs:
        raise fail("missing required field 'primary'", None)
    return Theme(**kwargs)  # type: ignore[arg-type]


def load_themes(dirs: list[Path] | None = None) -> ThemeSet:
    """Load every ``*.toml`` in ``dirs`` (default :func:`theme_dirs`); never raises."""
    result = ThemeSet()
    for folder in theme_dirs() if dirs is None else dirs:
        try:
            files = sorted(folder.glob("*.toml"))
        except OSError:
            continue
        for path in files:
            result.names.add(path.stem)
            try:
                text = path.read_text(encoding="utf-8")
                theme = parse_theme(text, path)
            except ThemeFileError as exc:
                result.problems.append(f"{exc}; theme {path.stem!r} not loaded")
                result.themes.pop(path.stem, None)
                continue
            except (OSError, UnicodeDecodeError) as exc:
                result.problems.append(f"{path}: cannot read theme ({exc}); theme {path.stem!r} not loaded")
                result.themes.pop(path.stem, None)
                continue
            result.themes[theme.name] = theme
            result.paths[theme.name] = path
    return result


def builtin_theme_names() -> list[str]:
    """Names of Textual's built-in themes (accepted by --theme too)."""
    from textual.theme import BUILTIN_THEMES

    return sorted(BUILTIN_THEMES)


def known_theme_names(themes: ThemeSet) -> list[str]:
    """Every name --theme accepts: theme files (even broken ones) and Textual's themes."""
    return sorted(themes.names) + [n for n in builtin_theme_names() if n not in themes.names]
