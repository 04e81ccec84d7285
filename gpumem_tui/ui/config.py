"""User configuration: a TOML file read with ``tomllib``, validated strictly.

Headless (no Textual). Where a config comes from, first that applies:

1. an explicit path (``gpumem-tui --config PATH``),
2. ``<user config dir>/config.toml`` where the user config dir is
   ``platformdirs.user_config_dir("gpumem-tui")`` or ``$GPUMEM_TUI_CONFIG_DIR`` when set.

Never from the working directory: a ``./gpumem-tui.toml`` planted by another user in a
shared directory could turn read-only off and put a signal on ``q`` (issue 13, item 16);
such a file is named in a notice and not read. A config file (or its directory) that
another user owns or can write is not read either (a notice says which and why; for
``--config`` it is an error), and a file over :data:`gpumem_tui.support.safe_files.TOML_LIMIT` or
not a regular file is refused.

File shape (every key optional)::

    interval = 1.0          # seconds between polls, > 0
    theme = "dark"          # a theme name (bundled, user theme file, or a Textual theme)
    readonly = false        # true removes the signal keys
    chart_window = 300      # seconds of history the chart shows, > 0
    screenshot_dir = "~/shots"  # where the command palette's Screenshot saves (default: the
                                # working directory)
    [keys]                  # binding id -> key(s), e.g. sort_next = "s"
    quit = "q"
    [[alerts]]              # alert rules: see gpumem_tui.alerts.rules
    rule = "memory_above"
    percent = 90

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

from typing import TYPE_CHECKING

# The user config dir has a module of its own: the themes find their folder without this parser.
from gpumem_tui.ui.config_dir import APP_NAME, CONFIG_DIR_ENV, user_config_dir

if TYPE_CHECKING:  # read only when a config has [[alerts]]: the dashboard's start-up skips it
    from gpumem_tui.alerts.rules import AlertRule

__all__ = ["APP_NAME", "CONFIG_DIR_ENV", "Config", "ConfigError", "check_signal_keys", "key_line", "load_config",
           "parse_config", "toml_error_line", "unsafe_reason", "user_config_dir"]

LOCAL_FILE_NAME = "gpumem-tui.toml"


@dataclass(frozen=True, slots=True)
class Config:
    """Settings with their defaults. ``keymap`` pairs are (binding id, keys)."""

    interval: float = 1.0
    theme: str = "dark"
    readonly: bool = False
    chart_window: float = 300.0
    screenshot_dir: str | None = None  # None: the working directory
    keymap: tuple[tuple[str, str], ...] = ()
    alerts: tuple[AlertRule, ...] = ()  # the [[alerts]] rules (gpumem_tui.alerts.rules)
    path: Path | None = None  # the file these settings came from, if any
    notices: tuple[str, ...] = field(default=())  # problems found, "path:line: message"


class ConfigError(ValueError):
    """An explicit config path that does not exist, cannot be read, or is not safe to read."""


def unsafe_reason(path: Path, st: os.stat_result | None = None) -> str | None:
    """Why a config file should not be trusted, or None: the file or its directory is owned
    by another user than this one (root excepted) or writable by its group (unless it is the
    user's private group) or others (a sticky directory of this user's excepted). ``st``: the file's status if already known.

    Raises:
        OSError: the file or its directory cannot be examined.
    """
    import stat

    from gpumem_tui.support.safe_files import group_is_private

    me = os.geteuid()
    for what, target in (("file", path), ("directory", path.parent)):
        status = st if (what == "file" and st is not None) else os.stat(target)
        if status.st_uid not in (me, 0):
            return f"the config {what} {target} is owned by uid {status.st_uid}, not by you"
        group_writes = bool(status.st_mode & stat.S_IWGRP) and not group_is_private(status.st_gid)
        writers = [who for who, writes in (("its group", group_writes), ("every user", status.st_mode & stat.S_IWOTH))
                   if writes]
        if writers and not (what == "directory" and status.st_mode & stat.S_ISVTX and status.st_uid == me):
            return (f"the config {what} {target} is writable by {' and '.join(writers)} "
                    f"(mode {stat.S_IMODE(status.st_mode):04o}; chmod go-w {target})")
    return None


class _Unsafe(Exception):
    pass


def _read(path: Path) -> str:
    """The text of a config file: a regular file, safe by :func:`unsafe_reason` (checked on
    the opened file), at most TOML_LIMIT bytes, UTF-8.

    Raises:
        _Unsafe: the reason it is not trusted.
        OSError (FileRefused): missing, unreadable, not a regular file, too large.
        UnicodeDecodeError: not UTF-8.
    """
    from gpumem_tui.support.safe_files import TOML_LIMIT, FileRefused, format_limit, open_regular_binary

    with open_regular_binary(path) as handle:
        reason = unsafe_reason(path, os.fstat(handle.fileno()))
        if reason is not None:
            raise _Unsafe(reason)
        data = handle.read(TOML_LIMIT + 1)
    if len(data) > TOML_LIMIT:
        raise FileRefused(f"over the {format_limit(TOML_LIMIT)} limit for a config file")
    return data.decode("utf-8")


def candidate_paths(explicit: Path | None = None) -> list[Path]:
    """Paths a config is read from, first that exists wins (never the working directory)."""
    paths = [] if explicit is None else [Path(explicit)]
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
            text = _read(path)
        except _Unsafe as exc:
            raise ConfigError(f"not reading {path}: {exc}") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror if isinstance(exc, OSError) and exc.strerror else exc}") from None
        return parse_config(text, path)
    local = Path.cwd() / LOCAL_FILE_NAME
    skipped = (f"{local} is not read: configs come from {user_config_dir() / 'config.toml'} or --config FILE",) \
        if os.path.lexists(local) else ()
    for path in candidate_paths():
        if os.path.lexists(path):
            try:
                text = _read(path)
            except _Unsafe as exc:
                return Config(notices=(*skipped, f"{path}: not read, {exc}; using defaults"))
            except (OSError, UnicodeDecodeError) as exc:
                why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
                return Config(notices=(*skipped, f"{path}: cannot read config file ({why}); using defaults"))
            config = parse_config(text, path)
            return replace(config, notices=(*skipped, *config.notices))
    return Config(notices=skipped)


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
        elif key == "screenshot_dir":
            if not isinstance(value, str) or not value.strip() or "\0" in value:
                bad(key, f"screenshot_dir must be a folder path, got {value!r}")
            else:
                config = replace(config, screenshot_dir=value.strip())
        elif key == "readonly":
            if not isinstance(value, bool):
                bad(key, f"readonly must be true or false, got {value!r}")
            else:
                config = replace(config, readonly=value)
        elif key == "keys":  # clashes with signal keys are checked where bindings are known
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
        elif key == "alerts":
            from gpumem_tui.alerts.rules import parse_alerts

            rules, problems = parse_alerts(value, text, path)
            config = replace(config, alerts=rules)
            notices.extend(problems)
        else:
            line = key_line(text, key) or key_line(text, "", key)
            notices.append(f"{_where(path, line)}: unknown setting {key!r} ignored")
    return replace(config, notices=tuple(notices))


#: Binding ids whose keys send a signal, and the confirmation that sends it.
SIGNAL_BINDING_IDS = ("signal_int", "signal_term", "signal_kill")
CONFIRM_BINDING_ID = "signal_confirm"


def _keys(spec: str) -> set[str]:
    return {k.strip() for k in spec.split(",") if k.strip()}


def check_signal_keys(keymap: tuple[tuple[str, str], ...], defaults: dict[str, str],
                      path: Path | None = None) -> tuple[tuple[tuple[str, str], ...], tuple[str, ...]]:
    """Drop key overrides that would let one key press both do something else and send (or
    confirm) a signal: a signal binding or the confirmation must have keys no other binding
    uses. ``defaults`` maps every binding id of the dashboard to its default keys.

    Returns:
        (the keymap without the refused overrides, a notice per refused override).
    """
    overrides = dict(keymap)
    guarded = (*SIGNAL_BINDING_IDS, CONFIRM_BINDING_ID)
    notices: list[str] = []
    while True:
        effective = {bid: _keys(overrides.get(bid, keys)) for bid, keys in defaults.items()}
        clash = next(((g, other, sorted(effective[g] & effective[other])[0]) for g in guarded if g in effective
                      for other in effective if other != g and effective[g] & effective[other]), None)
        if clash is None:
            break
        guard, other, key = clash
        # refuse the override that made the clash (the guarded one if both were set)
        refused = guard if guard in overrides else other
        if refused not in overrides:  # the defaults themselves clash: nothing to refuse
            break
        notices.append(f"{path or 'config'}: keys.{refused} = {overrides[refused]!r} refused: {key!r} would "
                       f"both {_action(guard)} and {_action(other)}; a signal key must be a key of its own")
        del overrides[refused]
    return tuple((bid, keys) for bid, keys in keymap if bid in overrides), tuple(notices)


def _action(binding_id: str) -> str:
    if binding_id == CONFIRM_BINDING_ID:
        return "confirm a signal"
    if binding_id in SIGNAL_BINDING_IDS:
        return f"send SIG{binding_id.removeprefix('signal_').upper()}"
    return f"run {binding_id}"
