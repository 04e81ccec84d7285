"""The caching-allocator simulation (gpumem_tui.estimator.devices.cuda_allocator_sim.py): the torch source
rules, and what the shared H100 measurements say about reserved (``dev_truth_h100.jsonl``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpumem_tui.estimator.devices import cuda_allocator_sim as allocator

MIB = 1 << 20
ROOT = Path(__file__).resolve().parents[1]


from shared_data import GPU_DIR, needs_gpu_dir  # noqa: E402


def test_simulation_imports_no_torch() -> None:
    code = ("import sys; import gpumem_tui.estimator.devices.cuda_allocator_sim; "
            "print([m for m in ('torch', 'textual', 'pynvml') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"


def test_small_requests_pack_into_one_2_mib_segment() -> None:
    alloc = allocator.CachingAllocator()
    for i in range(4096):  # 4096 x 512 B = 2 MiB: exactly one small segment
        alloc.malloc(i, 100)
    assert (alloc.state.reserved, alloc.state.segments_small, alloc.state.allocated) == (2 * MIB, 1, 2 * MIB)
    alloc.malloc("next", 100)
    assert alloc.state.reserved == 4 * MIB


def test_medium_requests_share_a_20_mib_segment_and_split() -> None:
    alloc = allocator.CachingAllocator()
    for i in range(3):
        alloc.malloc(i, 5 * MIB)  # 3 x 5 MiB fit in one 20 MiB segment (5 MiB rest > 1 MiB: split)
    assert alloc.state.reserved == 20 * MIB and alloc.state.allocated == 15 * MIB
    alloc.malloc(3, 4 * MIB)  # the last 5 MiB block: rest 1 MiB is not > 1 MiB, no split
    assert alloc.state.allocated == 20 * MIB  # the whole 5 MiB block counts as allocated
    assert alloc.state.reserved == 20 * MIB


def test_freed_blocks_merge_and_are_reused_best_fit() -> None:
    alloc = allocator.CachingAllocator()
    alloc.malloc("a", 100 * MIB)
    alloc.malloc("b", 40 * MIB)
    alloc.free("a")
    alloc.malloc("c", 60 * MIB)  # reuses a's 100 MiB block, split (40 MiB rest)
    assert alloc.state.reserved == 140 * MIB
    alloc.malloc("d", 30 * MIB)  # best fit: a's 40 MiB remainder, not a new segment
    assert alloc.state.reserved == 140 * MIB
    alloc.free("c")
    alloc.free("d")  # c + d merge back to 100 MiB
    alloc.malloc("e", 100 * MIB)
    assert alloc.state.reserved == 140 * MIB and alloc.state.peak_reserved == 140 * MIB


def test_fragmentation_grows_reserved_beyond_allocated() -> None:
    """Frees in a different order than allocations (as recomputation does) leave holes that
    a larger request cannot use: a new segment although enough bytes are free."""
    state = allocator.replay([("alloc", 1, 30 * MIB), ("alloc", 2, 30 * MIB), ("alloc", 3, 30 * MIB),
                              ("free", 1, 0), ("free", 3, 0), ("alloc", 4, 50 * MIB)])
    assert state.allocated == 80 * MIB
    assert state.reserved == 140 * MIB  # 60 MiB free in two 30 MiB holes, 50 MiB needed whole


def test_replay_rejects_bad_events() -> None:
    with pytest.raises(ValueError, match="alloc or free"):
        allocator.replay([("realloc", 1, 10)])
    with pytest.raises(KeyError):
        allocator.replay([("free", 1, 0)])
    with pytest.raises(ValueError, match="already allocated"):
        allocator.replay([("alloc", 1, 10), ("alloc", 1, 10)])


@needs_gpu_dir
def test_measured_reserved_is_made_of_whole_segments() -> None:
    """Every segment is a multiple of 2 MiB (rule 3), so reserved is; and reserved >= allocated."""
    truths = [json.loads(x) for x in (GPU_DIR / "dev_truth_h100.jsonl").read_text().splitlines() if x.strip()]
    truths = [t for t in truths if "error" not in t]
    assert len(truths) >= 20
    for truth in truths:
        case = {"name": truth["case"]}
        assert truth["max_reserved"] % (2 * MIB) == 0, case["name"]
        assert truth["max_reserved"] >= truth["peak_allocated"], case["name"]
        stats = truth["allocator_stats"]
        # the small pool's segments are 2 MiB each and all of them are part of reserved
        assert stats["segment.small_pool.peak"] * 2 * MIB <= truth["max_reserved"], case["name"]


class _PlainAllocator:
    """The module docstring's rules written as plainly as possible (linear scans, no sorted
    pools, no handles): the reference the optimised allocator must match event by event."""

    def __init__(self) -> None:
        self.segments: list[list[list]] = []  # per segment: blocks [size, key or None], address order
        self.small: list[bool] = []  # the pool of each segment
        self.allocated = self.reserved = self.peak_allocated = 0

    def malloc(self, key: object, nbytes: int) -> None:
        rounded = max(512, -(-nbytes // 512) * 512)
        small = rounded <= MIB
        best = None  # (size, segment, index): smallest fit, then lowest address (segment order)
        for s, blocks in enumerate(self.segments):
            if self.small[s] != small:
                continue
            for i, (size, owner) in enumerate(blocks):
                if owner is None and size >= rounded and (best is None or size < best[0]):
                    best = (size, s, i)
        if best is None:
            seg = 2 * MIB if small else 20 * MIB if rounded < 10 * MIB else -(-rounded // (2 * MIB)) * 2 * MIB
            self.segments.append([[seg, None]])
            self.small.append(small)
            self.reserved += seg
            best = (seg, len(self.segments) - 1, 0)
        size, s, i = best
        blocks = self.segments[s]
        rest = size - rounded
        if (rest >= 512) if small else (rest > MIB):
            blocks[i:i + 1] = [[rounded, key], [rest, None]]
        else:
            blocks[i][1] = key
        self.allocated += blocks[i][0]
        self.peak_allocated = max(self.peak_allocated, self.allocated)

    def free(self, key: object) -> None:
        for blocks in self.segments:
            for i, block in enumerate(blocks):
                if block[1] == key:
                    self.allocated -= block[0]
                    block[1] = None
                    if i + 1 < len(blocks) and blocks[i + 1][1] is None:
                        block[0] += blocks.pop(i + 1)[0]
                    if i > 0 and blocks[i - 1][1] is None:
                        blocks[i - 1][0] += blocks.pop(i)[0]
                    return
        raise KeyError(key)


@pytest.mark.parametrize("seed", range(6))
def test_allocator_matches_the_plain_rules_on_random_sequences(seed: int) -> None:
    """Random allocations around every threshold (512 B, 1 MiB, 10 MiB, the 2 MiB rounding),
    freed in random order: allocated, reserved and the peak equal the plain reference's after
    every event, through both the keyed API and the handle API (take / release)."""
    import random

    rng = random.Random(seed)
    sizes = [1, 511, 513, 4000, MIB - 1, MIB, MIB + 1, 3 * MIB, 9 * MIB, 10 * MIB, 10 * MIB + 1, 21 * MIB, 64 * MIB]
    plain, keyed, handled = _PlainAllocator(), allocator.CachingAllocator(), allocator.CachingAllocator()
    live: dict[int, allocator.Block] = {}
    for key in range(600):
        if live and rng.random() < 0.45:
            victim = rng.choice(sorted(live))
            plain.free(victim)
            keyed.free(victim)
            handled.release(live.pop(victim))
        else:
            n = rng.choice(sizes) * rng.choice((1, 1, 2, 3)) + rng.randrange(0, 4096)
            plain.malloc(key, n)
            counted = keyed.malloc(key, n)
            live[key] = handled.take(n)
            assert counted == live[key].size == keyed.block_bytes(key)
        want = (plain.allocated, plain.reserved, plain.peak_allocated)
        assert (keyed.state.allocated, keyed.state.reserved, keyed.state.peak_allocated) == want
        assert (handled.allocated, handled.reserved, handled.peak_allocated) == want
    assert keyed.state.peak_reserved == plain.reserved  # segments are never returned


def test_release_all_skips_none_and_state_is_a_copy() -> None:
    alloc = allocator.CachingAllocator()
    a, b = alloc.take(5 * MIB), alloc.take(5 * MIB)
    before = alloc.state
    alloc.release_all(a, None, b)
    assert alloc.allocated == 0 and before.allocated == 10 * MIB
    assert alloc.state == allocator.AllocatorState(0, 20 * MIB, 10 * MIB, 20 * MIB, 0, 1)
    with pytest.raises(ValueError, match="negative"):
        alloc.take(-1)
