"""User configuration: a TOML file read with ``tomllib``, validated strictly, found nearest-first.

Headless (no Textual). Search order, first existing file wins:

1. an explicit path (``gpumem-tui --config PATH``),
2. ``./gpumem-tui.toml`` in the current directory,
3. ``<user config dir>/config.toml`` where the user config dir is
   ``platformdirs.user_config_dir("gpumem-tui")`` or ``$GPUMEM_TUI_CONFIG_DIR`` when set.

File shape (every key optional)::

    interval = 1.0          # seconds between polls, > 0
    theme = "dark"          # a theme name (bundled, user theme file, or a Textual theme)
    readonly = false        # true removes the signal keys
    chart_window = 300      # seconds of history the chart shows, > 0
    [keys]                  # binding id -> key(s), e.g. sort_next = "s"
    quit = "q"

A problem never stops the dashboard: a file that is not valid TOML is ignored as a whole, a bad
or unknown key is ignored on its own; each problem becomes a notice naming the file and line
(``path:line: message``) and the defaults stay in effect.
"""

from __future__ import annotations

import math
import os
import re
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path

APP_NAME = "gpumem-tui"
CONFIG_DIR_ENV = "GPUMEM_TUI_CONFIG_DIR"
LOCAL_FILE_NAME = "gpumem-tui.toml"


@dataclass(frozen=True, slots=True)
class Config:
    """Settings with their defaults. ``keymap`` pairs are (binding id, keys)."""

    interval: float = 1.0
    theme: str = "dark"
    readonly: bool = False
    chart_window: float = 300.0
    keymap: tuple[tuple[str, str], ...] = ()
    path: Path | None = None  # the file these settings came from, if any
    notices: tuple[str, ...] = field(default=())  # problems found, "path:line: message"


class ConfigError(ValueError):
    """An explicit config path that does not exist or cannot be read."""


def user_config_dir() -> Path:
    """The per-user config directory (``$GPUMEM_TUI_CONFIG_DIR`` overrides platformdirs)."""
    override = os.environ.get(CONFIG_DIR_ENV)
    if override:
        return Path(override)
    import platformdirs  # ~5 ms; only needed when no override is set

    return Path(platformdirs.user_config_dir(APP_NAME))


def candidate_paths(explicit: Path | None = None) -> list[Path]:
    """Paths searched for a config file, nearest first."""
    paths = [] if explicit is None else [Path(explicit)]
    paths.append(Path.cwd() / LOCAL_FILE_NAME)
    paths.append(user_config_dir() / "config.toml")
    return paths


def load_config(explicit: Path | str | None = None) -> Config:
    """Find and read the config; problems become ``Config.notices``, never exceptions.

    Raises:
        ConfigError: only when ``explicit`` is given and cannot be read.
    """
    if explicit is not None:
        path = Path(explicit)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror if isinstance(exc, OSError) else exc}") from None
        return parse_config(text, path)
    for path in candidate_paths():
        if path.is_file():
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                return Config(notices=(f"{path}: cannot read config file ({exc}); using defaults",))
            return parse_config(text, path)
    return Config()


_TOML_POS = re.compile(r"\(at line (\d+), column \d+\)")


def toml_error_line(exc: tomllib.TOMLDecodeError) -> int | None:
    """The 1-based line of a TOML syntax error (from the message on Python < 3.14)."""
    lineno = getattr(exc, "lineno", None)
    if isinstance(lineno, int):
        return lineno
    match = _TOML_POS.search(str(exc))
    return int(match.group(1)) if match else None


def key_line(text: str, key: str, table: str | None = None) -> int | None:
    """1-based line where ``key = ...`` is set (inside ``[table]`` if given), or None."""
    current: str | None = None
    key_re = re.compile(r'^\s*"?' + re.escape(key) + r'"?\s*=')
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        header = re.match(r"^\[\s*([^\]]+?)\s*\]", stripped)
        if header:
            current = header.group(1).strip('"')
            if table is not None and current == table and key == "":
                return number
            continue
        if current == table and key_re.match(line):
            return number
    return None


def _where(path: Path | None, line: int | None) -> str:
    name = str(path) if path is not None else "<config>"
    return f"{name}:{line}" if line else name


def parse_config(text: str, path: Path | None = None) -> Config:
    """Validate TOML ``text`` into a :class:`Config`; invalid parts are skipped with a notice."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = _TOML_POS.sub("", str(exc)).strip()
        return Config(
            path=path,
            notices=(f"{_where(path, toml_error_line(exc))}: {msg}; config ignored, using defaults",),
        )
    config = Config(path=path)
    notices: list[str] = []

    def bad(key: str, message: str, table: str | None = None) -> None:
        notices.append(f"{_where(path, key_line(text, key, table))}: {message}; using the default")

    for key, value in data.items():
        if key == "interval":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                bad(key, f"interval must be a number of seconds > 0, got {value!r}")
            else:
                config = replace(config, interval=float(value))
        elif key == "chart_window":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                bad(key, f"chart_window must be a number of seconds > 0, got {value!r}")
            else:
                config = replace(config, chart_window=float(value))
        elif key == "theme":
            if not isinstance(value, str) or not value.strip():
                bad(key, f"theme must be a theme name, got {value!r}")
            else:
                config = replace(config, theme=value.strip())
        elif key == "readonly":
            if not isinstance(value, bool):
                bad(key, f"readonly must be true or false, got {value!r}")
            else:
                config = replace(config, readonly=value)
        elif key == "keys":
            if not isinstance(value, dict):
                bad(key, "keys must be a table of binding id = \"key\"")
                continue
            pairs = []
            for binding_id, keys in value.items():
                if not isinstance(keys, str) or not keys.strip():
                    bad(binding_id, f"key for {binding_id!r} must be a non-empty string, got {keys!r}", "keys")
                else:
                    pairs.append((str(binding_id), keys.strip()))
            config = replace(config, keymap=tuple(pairs))
        else:
            line = key_line(text, key) or key_line(text, "", key)
            notices.append(f"{_where(path, line)}: unknown setting {key!r} ignored")
    return replace(config, notices=tuple(notices))
