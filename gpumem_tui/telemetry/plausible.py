"""Bounds for figures read from files (probe streams, traces): what a real machine can show.

Headless. A figure outside these bounds is not data to draw but a broken or hostile file:
a time of 1e308 overflows the chart's arithmetic, a sample a day ahead stretches its time
axis over 86 400 s of nothing (plotext fills it point by point), and a byte count beyond
any memory would set the chart's scale. Readers drop such a figure (or its line) and say so.
"""

from __future__ import annotations

import math

#: Largest byte count accepted for any memory figure: 1 PiB (2**50), above any GPU's or
#: host's memory today by orders of magnitude and still exact as a float.
MAX_BYTES = 1 << 50

#: How far a sample's time may lie ahead of the reader's clock (s). Probes and the reader
#: share the machine's clock, so only a write/read race puts a sample ahead at all.
MAX_FUTURE_SECONDS = 2.0

#: Latest epoch time accepted in a trace: 2100-01-01T00:00:00Z.
LATEST_TIME = 4102444800.0


def plausible_time(value: object) -> float | None:
    """``value`` as a float when it is a finite epoch time in [0, LATEST_TIME], else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        value = float(value)
    except OverflowError:
        return None
    return value if math.isfinite(value) and 0.0 <= value <= LATEST_TIME else None
