"""Bounded tiered history: size bound, order, and what each tier keeps."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest

from gpumem_tui.ui.history import DEFAULT_TIERS, HistoryStore, Series, Tier


def test_one_hour_at_1hz_is_kept_raw():
    s = Series()
    for t in range(3600):
        s.add(float(t), float(t * 7))
    pts = s.points()
    assert len(pts) == 3600
    assert pts[0] == (0.0, 0.0) and pts[-1] == (3599.0, 3599.0 * 7)
    assert s.tier_points(1) == []


def test_ten_hours_at_1hz_stay_bounded_and_ordered():
    s = Series()
    rng = random.Random(1)
    values = [rng.randrange(0, 1 << 34) for _ in range(36_000)]
    for t, v in enumerate(values):
        s.add(float(t), float(v))
    assert len(s) <= s.max_points
    assert len(s) <= 3600 + 2160 + 1440 + 2
    pts = s.points()
    times = [p[0] for p in pts]
    assert times == sorted(times)
    # raw tier keeps the last hour exactly
    raw = s.tier_points(0)
    assert len(raw) == 3600
    assert raw[0] == (32_400.0, float(values[32_400]))
    assert raw[-1] == (35_999.0, float(values[-1]))
    # 10 s tier: each point is the max of its 10 s bucket, timed at the bucket start
    tier1 = s.tier_points(1)
    assert len(tier1) == 2160
    for t, v in tier1:
        start = int(t)
        assert start % 10 == 0
        assert v == max(values[start : start + 10])
    # 60 s tier: max of each minute of the 10 s maxima, i.e. of the raw minute
    tier2 = s.tier_points(2)
    assert tier2, "after 10 h the 60 s tier must hold something"
    for t, v in tier2:
        start = int(t)
        assert start % 60 == 0
        assert v == max(values[start : start + 60])
    # coverage: more than the raw hour is kept (downsampled), reaching back over 9 hours
    assert pts[0][0] <= 36_000 - 9 * 3600


def test_store_drops_least_recently_touched_series():
    store = HistoryStore(max_series=3, raw_capacity=10, tiers=(Tier(5.0, 4),))
    for pid in range(10):
        store.add(("proc", pid), 1.0, 1.0)
    assert len(store) == 3
    assert ("proc", 9) in store and ("proc", 0) not in store
    store.add(("proc", 7), 2.0, 2.0)  # touch 7: now 8 is oldest
    store.add(("proc", 100), 2.0, 2.0)
    assert ("proc", 8) not in store and ("proc", 7) in store


def test_none_and_backwards_time_are_ignored():
    store = HistoryStore()
    store.add("gpu", 10.0, None)
    assert "gpu" not in store
    store.add("gpu", 10.0, 5.0)
    store.add("gpu", 9.0, 6.0)
    assert store.points("gpu") == [(10.0, 5.0)]
    assert store.points("missing") == []
    assert store.points("gpu", since=11.0) == []


def test_fast_sampling_still_covers_an_hour():
    s = Series()
    # 10 Hz for 70 minutes: raw ring covers 6 minutes, tiers cover the rest
    for i in range(42_000):
        s.add(i / 10.0, float(i))
    pts = s.points()
    assert pts[-1][0] - pts[0][0] >= 3600
    assert len(s) <= s.max_points


def test_bad_tiers_rejected():
    with pytest.raises(ValueError):
        Series(raw_capacity=0)
    with pytest.raises(ValueError):
        Series(tiers=(Tier(0.0, 5),))


def test_history_is_headless():
    code = "import sys, gpumem_tui.ui.history; print('textual' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    assert DEFAULT_TIERS[0].resolution == 10.0


def test_add_many_equals_add_one_by_one():
    """add_many (one call per poll) keeps what add per key keeps: the same series, points,
    touch order (eviction), and drops None, NaN and samples not newer than the newest."""
    rng = random.Random(7)
    one, many = HistoryStore(max_series=5, raw_capacity=8, tiers=(Tier(4.0, 3),)), \
        HistoryStore(max_series=5, raw_capacity=8, tiers=(Tier(4.0, 3),))
    for step in range(200):
        t = float(step // 2)  # every other poll repeats a time: those samples must be dropped
        batch = [(("proc", rng.randrange(8)), rng.choice([None, float("nan"), rng.randrange(1 << 30)]))
                 for _ in range(rng.randrange(1, 6))]
        for key, value in batch:
            one.add(key, t, value)
        many.add_many(t, batch)
        assert list(one._series) == list(many._series)  # the same series, in touch order
    assert len(many) == 5
    for key in one._series:
        assert many.points(key) == one.points(key)
        assert all(v == v for _, v in many.points(key))  # no NaN kept
