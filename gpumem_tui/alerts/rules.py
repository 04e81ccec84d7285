"""Alert rules: the config file's ``[[alerts]]`` tables, validated strictly.

Headless (stdlib only). One table is one rule::

    [[alerts]]
    rule = "memory_above"     # memory_above | will_not_fit | time_to_oom_below | drift | gpu_lost
    percent = 90              # memory_above: NVML used / total, 0 < percent <= 100
    # seconds = 600           # time_to_oom_below: fire under this many seconds to OOM, > 0
    # bytes_per_step = "1MiB" # drift: fire at or above this rise per step (default: any drift)
    name = "gpu-full"         # optional; what the notice and GPUMEM_ALERT_RULE say
    gpus = [0, 1]             # optional: only these GPU indices
    for = 30                  # seconds the condition must hold before it fires (default 0)
    repeat = 300              # seconds before the same rule fires again for the same GPU / PID
    bell = true               # ring the terminal bell (default true)
    desktop = true            # a desktop notification where the session has one (default true)
    command = ["/home/me/bin/page", "--team", "ml"]  # optional hook: an argument list
    timeout = 10              # seconds the hook may run before it is killed (default 10)

Security (DESIGN.md rule 6): a hook is an argument list run without a shell, so nothing in an
alert's figures or a process's name is ever parsed as shell syntax; a string is refused. No key
sends a signal to a process: a rule that asks for one is refused (a config line must not be
able to kill jobs on a shared box; the signal keys of the dashboard ask first).

A bad rule never stops the dashboard: it is dropped with a one-line notice
``path:line: alerts[N].key ...; rule ignored`` and the other rules stay in effect.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpumem_tui.support.units import parse_bytes

MEMORY_ABOVE = "memory_above"
WILL_NOT_FIT = "will_not_fit"
TIME_TO_OOM_BELOW = "time_to_oom_below"
DRIFT = "drift"
GPU_LOST = "gpu_lost"
RULE_KINDS = (MEMORY_ABOVE, WILL_NOT_FIT, TIME_TO_OOM_BELOW, DRIFT, GPU_LOST)

DEFAULT_REPEAT_SECONDS = 300.0
DEFAULT_HOOK_TIMEOUT_SECONDS = 10.0
MAX_HOOK_TIMEOUT_SECONDS = 3600.0
MAX_ARGS = 64
MAX_ARG_CHARS = 4096

#: keys that would make an alert send a signal: refused, never silently ignored
SIGNAL_KEYS = frozenset({"signal", "kill", "send_signal", "terminate", "sigkill", "sigterm", "sigint"})
_THRESHOLD_KEY = {MEMORY_ABOVE: "percent", TIME_TO_OOM_BELOW: "seconds", DRIFT: "bytes_per_step"}
_COMMON_KEYS = ("rule", "name", "gpus", "for", "repeat", "bell", "desktop", "command", "timeout")
_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


@dataclass(frozen=True, slots=True)
class AlertRule:
    """One validated rule. ``threshold``: percent (memory_above), seconds (time_to_oom_below),
    bytes per step (drift; 0 = any drift the detector reports), None (will_not_fit, gpu_lost).
    ``gpus``: GPU indices it watches, None = all. ``hold_seconds`` is the config's ``for``.
    ``command``: the hook's argument list (empty: none). Durations in seconds."""

    kind: str
    name: str
    threshold: float | None = None
    gpus: frozenset[int] | None = None
    hold_seconds: float = 0.0
    repeat_seconds: float = DEFAULT_REPEAT_SECONDS
    bell: bool = True
    desktop: bool = True
    command: tuple[str, ...] = ()
    timeout_seconds: float = DEFAULT_HOOK_TIMEOUT_SECONDS

    def describe(self) -> str:
        """The rule in words, e.g. ``"above 90 %"``, ``"under 600 s to OOM"``."""
        if self.kind == MEMORY_ABOVE:
            return f"above {self.threshold:g} %"
        if self.kind == TIME_TO_OOM_BELOW:
            return f"under {self.threshold:g} s to OOM"
        if self.kind == DRIFT:
            return f"drift of at least {self.threshold / (1 << 20):.1f} MiB per step" if self.threshold else "any drift"
        if self.kind == WILL_NOT_FIT:
            return "predicted peak above the memory it can have"
        return "GPU or NVML lost"


class RuleError(ValueError):
    """A rule's key is invalid; ``key`` names it (for the line number)."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


def _seconds(key: str, value: Any, *, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value < 0 or (positive and value == 0):
        raise RuleError(key, f"must be a number of seconds {'> 0' if positive else '>= 0'}, got {value!r}")
    return float(value)


def _threshold(kind: str, value: Any) -> float:
    key = _THRESHOLD_KEY[kind]
    if kind == MEMORY_ABOVE:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 100:
            raise RuleError(key, f"must be a percentage, 0 < percent <= 100, got {value!r}")
        return float(value)
    if kind == TIME_TO_OOM_BELOW:
        return _seconds(key, value, positive=True)
    if isinstance(value, str):  # drift: "1MiB", "500 KB", or a number of bytes
        try:
            return float(parse_bytes(value))
        except ValueError as exc:
            raise RuleError(key, str(exc)) from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise RuleError(key, f"must be a size per step (e.g. \"1MiB\" or bytes >= 0), got {value!r}")
    return float(value)


def _command(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        raise RuleError("command", "must be an argument list such as [\"/usr/local/bin/page\", \"--team\", "
                        "\"ml\"], not a string: a hook never runs through a shell")
    if not isinstance(value, list) or not value or len(value) > MAX_ARGS:
        raise RuleError("command", f"must be a non-empty list of at most {MAX_ARGS} strings, got {value!r}")
    for arg in value:
        if not isinstance(arg, str) or "\0" in arg or len(arg) > MAX_ARG_CHARS:
            raise RuleError("command", f"every argument must be a string without NUL of at most {MAX_ARG_CHARS} "
                            f"characters, got {arg!r}")
    if not value[0].strip():
        raise RuleError("command", "the program (the first argument) is empty")
    return tuple(value)


def _gpus(value: Any) -> frozenset[int]:
    if not isinstance(value, list) or not value or any(isinstance(i, bool) or not isinstance(i, int) or i < 0
                                                       for i in value):
        raise RuleError("gpus", f"must be a non-empty list of GPU indices (integers >= 0), got {value!r}")
    return frozenset(value)


def _flag(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise RuleError(key, f"must be true or false, got {value!r}")
    return value


def parse_rule(table: Any) -> AlertRule:
    """One ``[[alerts]]`` table -> :class:`AlertRule`.

    Raises:
        RuleError: the first problem found, naming its key (unknown keys and signal keys
            included).
    """
    if not isinstance(table, dict):
        raise RuleError("alerts", f"each alert must be a table ([[alerts]]), got {table!r}")
    for key in table:
        if key.lower() in SIGNAL_KEYS:
            raise RuleError(key, "refused: an alert never sends a signal to a process (a config line must not "
                            "be able to kill jobs); use a command hook, or the dashboard's signal keys")
    kind = table.get("rule")
    if kind not in RULE_KINDS:
        raise RuleError("rule", f"must be one of {', '.join(RULE_KINDS)}, got {kind!r}")
    allowed = set(_COMMON_KEYS) | ({_THRESHOLD_KEY[kind]} if kind in _THRESHOLD_KEY else set())
    for key in table:
        if key not in allowed:
            other = next((k for k, v in _THRESHOLD_KEY.items() if v == key), None)
            why = f"applies to rule = {other!r} only" if other else f"is unknown (known: {', '.join(sorted(allowed))})"
            raise RuleError(key, why)
    threshold = None
    if kind in _THRESHOLD_KEY:
        key = _THRESHOLD_KEY[kind]
        if key not in table and kind != DRIFT:
            raise RuleError("rule", f"rule = {kind!r} needs {key} = ...")
        threshold = _threshold(kind, table[key]) if key in table else 0.0
    name = table.get("name", kind)
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise RuleError("name", f"must be 1 to 64 letters, digits, '_', '-' or '.', got {name!r}")
    timeout = _seconds("timeout", table.get("timeout", DEFAULT_HOOK_TIMEOUT_SECONDS), positive=True)
    if timeout > MAX_HOOK_TIMEOUT_SECONDS:
        raise RuleError("timeout", f"must be at most {MAX_HOOK_TIMEOUT_SECONDS:g} seconds, got {timeout:g}")
    return AlertRule(
        kind=kind, name=name, threshold=threshold,
        gpus=_gpus(table["gpus"]) if "gpus" in table else None,
        hold_seconds=_seconds("for", table.get("for", 0), positive=False),
        repeat_seconds=_seconds("repeat", table.get("repeat", DEFAULT_REPEAT_SECONDS), positive=False),
        bell=_flag("bell", table.get("bell", True)),
        desktop=_flag("desktop", table.get("desktop", True)),
        command=_command(table["command"]) if "command" in table else (),
        timeout_seconds=timeout,
    )


def alert_key_line(text: str, index: int, key: str) -> int | None:
    """1-based line of ``key = ...`` inside the ``index``-th (0-based) ``[[alerts]]`` table of
    ``text``, else that table's header line, else the line of an inline ``alerts = [...]``."""
    headers = [n for n, line in enumerate(text.splitlines(), start=1) if re.match(r"^\s*\[\[\s*alerts\s*\]\]", line)]
    if index >= len(headers):
        return next((n for n, line in enumerate(text.splitlines(), start=1) if re.match(r"^\s*alerts\s*=", line)), None)
    lines = text.splitlines()
    key_re = re.compile(r'^\s*"?' + re.escape(key) + r'"?\s*=')
    for number in range(headers[index] + 1, len(lines) + 1):
        line = lines[number - 1]
        if re.match(r"^\s*\[", line):  # the next table starts
            break
        if key_re.match(line):
            return number
    return headers[index]


def parse_alerts(value: Any, text: str, path: Path | None = None) -> tuple[tuple[AlertRule, ...], tuple[str, ...]]:
    """The config's ``alerts`` value (a list of tables) -> (valid rules, one notice per bad
    rule, ``"path:line: alerts[N].key ...; rule ignored"`` with N counted from 1)."""
    name = str(path) if path is not None else "<config>"
    if not isinstance(value, list):
        line = alert_key_line(text, 10**9, "alerts")
        return (), (f"{name}:{line or '?'}: alerts must be an array of tables ([[alerts]]); no alerts",)
    rules: list[AlertRule] = []
    notices: list[str] = []
    for index, table in enumerate(value):
        try:
            rules.append(parse_rule(table))
        except RuleError as exc:
            line = alert_key_line(text, index, exc.key)
            where = f"{name}:{line}" if line else name
            notices.append(f"{where}: alerts[{index + 1}].{exc.key} {exc}; rule ignored")
    return tuple(rules), tuple(notices)
