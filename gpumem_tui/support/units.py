"""Bytes <-> human text. Binary units (KiB, MiB, GiB = 2**10, 2**20, 2**30 bytes) on screen.

Parsing also accepts decimal SI suffixes (KB, MB, GB = 10**3, 10**6, 10**9) because vendors
sell "24 GB" cards; each suffix means what its standard says, never the other.
"""

from __future__ import annotations

import math
import re

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
TiB = 1 << 40

_SUFFIXES = {
    "": 1,
    "b": 1,
    "kib": KiB,
    "mib": MiB,
    "gib": GiB,
    "tib": TiB,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
}
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")


def parse_bytes(text: str) -> int:
    """Parse "24GiB", "24 GB", "512MiB", "1e9" into bytes.

    Raises:
        ValueError: empty, negative, non-finite, or an unknown suffix (the message names it).
    """
    match = _SIZE_RE.match(text)
    if not match:
        raise ValueError(f"not a size: {text!r} (expected e.g. 24GiB, 16GB, 512MiB)")
    number, suffix = match.groups()
    factor = _SUFFIXES.get(suffix.lower())
    if factor is None:
        raise ValueError(f"unknown size unit {suffix!r} in {text!r} (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)")
    value = float(number) * factor
    if not math.isfinite(value):
        raise ValueError(f"size out of range: {text!r}")
    return int(round(value))


def format_bytes(n: int | float | None, unit: str | None = None, precision: int = 1) -> str:
    """Format bytes in binary units ("1.5 GiB"); "N/A" for None.

    ``unit`` forces one of "KiB", "MiB", "GiB", "TiB"; otherwise the largest unit with a
    value >= 1 is used.
    """
    if n is None:
        return "N/A"
    if unit is not None:
        return f"{n / _SUFFIXES[unit.lower()]:.{precision}f} {unit}"
    sign = "-" if n < 0 else ""
    n = abs(n)
    for name, factor in (("TiB", TiB), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= factor:
            return f"{sign}{n / factor:.{precision}f} {name}"
    return f"{sign}{int(n)} B"


def format_mib(n: int | float | None) -> str:
    """Format bytes as whole MiB, nvidia-smi style ("8123MiB"); "N/A" for None."""
    if n is None:
        return "N/A"
    return f"{int(round(n / MiB))}MiB"


def format_duration(seconds: float) -> str:
    """A duration for people: ``35 s``, ``12 min``, ``3.5 h``, ``2.0 d`` (seconds below 2 min,
    minutes below 2 h, hours below 2 days; a negative duration, e.g. from clock skew, is 0 s)."""
    seconds = max(seconds, 0.0)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"
