"""Bounded memory-over-time history per GPU and per process.

Headless (no Textual import) so it can be unit-tested and benchmarked on its own.

A :class:`Series` keeps recent samples raw and older ones downsampled in tiers, like an RRD
round-robin archive: when the raw ring is full, the sample it evicts is folded into a bucket
of the next tier (``resolution`` seconds wide); a finished bucket becomes one point of that
tier, and so on. Each downsampled point keeps the **maximum** of its bucket, because for
memory the peak is what decides whether a job fits; the bucket's time is the time of its
first sample. Memory is bounded by the sum of the tier capacities whatever the sampling rate.

Default tiers: 3600 raw samples (1 hour at 1 Hz), then 10 s buckets for 6 hours, then 60 s
buckets for 24 hours, i.e. at most 3600 + 2160 + 1440 points (+2 open buckets) per series.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from collections.abc import Hashable, Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Tier:
    """One downsampling tier: buckets ``resolution`` seconds wide, at most ``capacity`` points."""

    resolution: float
    capacity: int


#: Raw ring capacity (samples, any rate) and the downsampled tiers after it.
DEFAULT_RAW_CAPACITY = 3600
DEFAULT_TIERS: tuple[Tier, ...] = (Tier(10.0, 2160), Tier(60.0, 1440))


class _Bucket:
    """An open bucket of a tier: index floor(t / resolution), first time, max value."""

    __slots__ = ("index", "time", "value")

    def __init__(self, index: int, time: float, value: float) -> None:
        self.index = index
        self.time = time
        self.value = value


class Series:
    """Time series (epoch seconds, value) with bounded, tiered storage.

    Values are whatever the caller stores (bytes for memory). ``add`` expects non-decreasing
    times; a sample not newer than the newest one is dropped (a paused replay repeats its
    last record, and a clock step back must not corrupt the order the chart relies on).
    """

    __slots__ = ("_raw", "_tiers", "_points", "_open")

    def __init__(
        self, raw_capacity: int = DEFAULT_RAW_CAPACITY, tiers: Iterable[Tier] = DEFAULT_TIERS
    ) -> None:
        if raw_capacity < 1:
            raise ValueError("raw_capacity must be >= 1")
        self._raw: deque[tuple[float, float]] = deque()
        self._tiers = (Tier(0.0, raw_capacity), *tuple(tiers))
        for tier in self._tiers[1:]:
            if tier.resolution <= 0 or tier.capacity < 1:
                raise ValueError(f"bad tier {tier}")
        # _points[0] is the raw ring; _points[k] holds finished buckets of tier k.
        self._points: list[deque[tuple[float, float]]] = [self._raw] + [deque() for _ in self._tiers[1:]]
        self._open: list[_Bucket | None] = [None] * len(self._tiers)

    def add(self, time: float, value: float) -> None:
        """Append one sample; older samples cascade down the tiers. NaN values are dropped."""
        # ``value != value``: true for a NaN only (math.isnan without its call; ints are never NaN)
        if value is None or value != value:
            return
        if self._raw and time <= self._raw[-1][0]:
            return
        self._push(0, time, value)

    def _push(self, level: int, time: float, value: float) -> None:
        ring = self._points[level]
        ring.append((time, value))
        if len(ring) > self._tiers[level].capacity:
            old_time, old_value = ring.popleft()
            self._fold(level + 1, old_time, old_value)

    def _fold(self, level: int, time: float, value: float) -> None:
        if level >= len(self._tiers):
            return  # beyond the last tier: forgotten
        index = math.floor(time / self._tiers[level].resolution)
        bucket = self._open[level]
        if bucket is None:
            self._open[level] = _Bucket(index, time, value)
        elif bucket.index == index:
            bucket.value = max(bucket.value, value)
        else:
            self._open[level] = _Bucket(index, time, value)
            self._push(level, bucket.time, bucket.value)

    def points(self, since: float | None = None) -> list[tuple[float, float]]:
        """All stored points, oldest first, optionally only those with time >= ``since``."""
        out: list[tuple[float, float]] = []
        for level in range(len(self._tiers) - 1, -1, -1):
            out.extend(self._points[level])
            # the open bucket of a tier holds samples newer than that tier's finished points
            # and older than everything in the tier above it
            if level > 0 and self._open[level] is not None:
                bucket = self._open[level]
                out.append((bucket.time, bucket.value))
        if since is not None:
            out = [p for p in out if p[0] >= since]
        return out

    def tier_points(self, level: int) -> list[tuple[float, float]]:
        """Finished points of one tier (0 = raw), oldest first. For tests and debugging."""
        return list(self._points[level])

    def __len__(self) -> int:
        return sum(len(p) for p in self._points) + sum(b is not None for b in self._open)

    @property
    def latest(self) -> tuple[float, float] | None:
        """The newest sample, or None when empty."""
        return self._raw[-1] if self._raw else None

    @property
    def max_points(self) -> int:
        """Upper bound of ``len(self)``."""
        return sum(t.capacity for t in self._tiers) + len(self._tiers) - 1


class HistoryStore:
    """Named series (per GPU, per process, per probe figure) with a bound on how many exist.

    Keys are any hashable, e.g. ``("gpu", 0)``, ``("proc", 1234)``, ``("probe", 1234,
    "allocated")``. When more than ``max_series`` exist, the series touched longest ago is
    dropped, so process churn on a shared box cannot grow memory without limit.
    """

    def __init__(
        self,
        max_series: int = 512,
        raw_capacity: int = DEFAULT_RAW_CAPACITY,
        tiers: Iterable[Tier] = DEFAULT_TIERS,
    ) -> None:
        self.max_series = max_series
        self._raw_capacity = raw_capacity
        self._tiers = tuple(tiers)
        self._series: OrderedDict[Hashable, Series] = OrderedDict()

    def add(self, key: Hashable, time: float, value: float | None) -> None:
        """Record ``value`` for ``key`` at ``time``; None (unknown) records nothing."""
        if value is None:
            return
        series = self._series.get(key)
        if series is None:
            series = Series(self._raw_capacity, self._tiers)
            self._series[key] = series
            while len(self._series) > self.max_series:
                self._series.popitem(last=False)
        else:
            self._series.move_to_end(key)
        series.add(time, value)

    def add_many(self, time: float, values: Iterable[tuple[Hashable, float | None]]) -> None:
        """:meth:`add` of each ``(key, value)`` in ``values`` at ``time``, in order: one call
        for a poll's figures (dozens of series a poll: the per-call overhead was most of it)."""
        series_of = self._series
        get, touch = series_of.get, series_of.move_to_end
        for key, value in values:
            if value is None:
                continue
            series = get(key)
            if series is None:
                self.add(key, time, value)
                continue
            touch(key)
            series.add(time, value)

    def drop(self, key: Hashable) -> None:
        """Forget ``key``'s series (e.g. its PID now names another process)."""
        self._series.pop(key, None)

    def get(self, key: Hashable) -> Series | None:
        """The series for ``key`` or None."""
        return self._series.get(key)

    def points(self, key: Hashable, since: float | None = None) -> list[tuple[float, float]]:
        """Points of ``key`` (oldest first), empty when unknown."""
        series = self._series.get(key)
        return series.points(since) if series is not None else []

    def __len__(self) -> int:
        return len(self._series)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._series
