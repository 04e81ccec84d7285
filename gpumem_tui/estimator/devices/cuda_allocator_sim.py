"""An event-driven simulation of torch's CUDA caching allocator: alloc/free events -> reserved.

Pure Python (no torch). The arithmetic (rounding, pools, segment sizes) is the one of
:mod:`gpumem_tui.estimator.devices.cuda_allocator`; this module adds what an analytic estimate
cannot have: a replay of a whole step's tensor storages in order, with best-fit reuse,
splitting and merging, so that the unusable cached blocks (fragmentation) come out of the
order of allocations instead of a share. :mod:`gpumem_tui.estimator.devices.cuda_step_events`
generates that order from what the estimator knows. Source: ``c10/cuda/CUDACachingAllocator.cpp``
(torch 2.11 - 2.13, ``DeviceCachingAllocator``: ``round_size``, ``get_allocation_size``,
``get_free_block``, ``should_split``, ``alloc_found_block``, ``free_block`` /
``try_merge_blocks``), default configuration (no ``PYTORCH_CUDA_ALLOC_CONF``: no
``max_split_size_mb``, no ``roundup_power2_divisions``, no ``expandable_segments``).

The model, rule by rule:

1. **Block rounding** (``round_size``): a request of ``n`` bytes takes
   ``max(512, ceil(n / 512) * 512)`` bytes (``kMinBlockSize``).
2. **Two pools**: rounded sizes <= 1 MiB (``kSmallSize``) use the *small* pool, larger ones the
   *large* pool; a block never moves between pools.
3. **Segment sizes** (``get_allocation_size``): without a fitting cached block one
   ``cudaMalloc`` makes a segment of 2 MiB (``kSmallBuffer``) for a small request, 20 MiB
   (``kLargeBuffer``) for one below 10 MiB (``kMinLargeAlloc``), else the request rounded up to
   2 MiB (``kRoundLarge``).
4. **Best fit** (``get_free_block``: ``pool.blocks.lower_bound`` with ``BlockComparatorSize``,
   ordered by stream, size, address): the smallest free block of the pool that holds the
   rounded size, the lowest address among equals. One stream here; segments are laid out at
   increasing addresses in creation order (the driver's real addresses are unknown).
5. **Splitting** (``should_split``): the block is cut to the rounded size when the rest is
   >= 512 B (small pool) or > 1 MiB (large pool); otherwise the whole block is handed out and
   counted as allocated (``stats.allocated_bytes`` adds ``block->size``).
6. **Free and merge** (``free_block`` / ``try_merge_blocks``): a freed block merges with free
   neighbours of its segment. Segments go back to the driver only on ``empty_cache()`` or a
   failed ``cudaMalloc`` (not modelled: the step is assumed to fit), so reserved only grows.

Cost: O(log n) search plus a list insert per event (``bisect``); a training step of a
32-layer model is a few thousand events.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from dataclasses import dataclass

from gpumem_tui.estimator.devices.cuda_allocator import MIN_BLOCK, SMALL_SIZE, round_size, segment_bytes


class _Block:
    __slots__ = ("addr", "size", "free", "prev", "next", "small")

    def __init__(self, addr: int, size: int, small: bool) -> None:
        self.addr = addr
        self.size = size
        self.free = True
        self.prev: _Block | None = None
        self.next: _Block | None = None
        self.small = small


@dataclass
class AllocatorState:
    """Figures of a simulated sequence (bytes): ``allocated`` / ``reserved`` now,
    ``peak_allocated`` / ``peak_reserved`` the maxima so far (what
    ``torch.cuda.max_memory_allocated`` / ``max_memory_reserved`` report), and the segments
    made by each pool."""

    allocated: int = 0
    reserved: int = 0
    peak_allocated: int = 0
    peak_reserved: int = 0
    segments_small: int = 0
    segments_large: int = 0


class CachingAllocator:
    """The simulated allocator (one device, one stream); see the module docstring.

    ``malloc(key, nbytes)`` / ``free(key)`` replay a program's tensor storages in order;
    :attr:`state` holds the figures torch would report.
    """

    def __init__(self) -> None:
        self.state = AllocatorState()
        self._pools: dict[bool, list[tuple[int, int]]] = {True: [], False: []}  # (size, addr), sorted
        self._by_addr: dict[int, _Block] = {}
        self._live: dict[object, _Block] = {}
        self._top = 0  # next segment's address

    def malloc(self, key: object, nbytes: int) -> int:
        """Allocate ``nbytes`` under ``key``; returns the bytes counted as allocated.

        Raises:
            ValueError: ``nbytes`` negative, or ``key`` already live.
        """
        if key in self._live:
            raise ValueError(f"storage {key!r} is already allocated")
        rounded = round_size(nbytes)
        small = rounded <= SMALL_SIZE
        pool = self._pools[small]
        i = bisect_left(pool, (rounded, -1))
        st = self.state
        if i < len(pool):
            _size, addr = pool.pop(i)
            block = self._by_addr[addr]
        else:
            size = segment_bytes(rounded)
            block = _Block(self._top, size, small)
            self._by_addr[block.addr] = block
            self._top += size
            st.reserved += size
            if small:
                st.segments_small += 1
            else:
                st.segments_large += 1
        rest = block.size - rounded
        if (rest >= MIN_BLOCK) if small else (rest > SMALL_SIZE):  # should_split
            tail = _Block(block.addr + rounded, rest, small)
            tail.prev, tail.next = block, block.next
            if block.next is not None:
                block.next.prev = tail
            block.next = tail
            block.size = rounded
            self._by_addr[tail.addr] = tail
            insort(pool, (rest, tail.addr))
        block.free = False
        self._live[key] = block
        st.allocated += block.size
        if st.allocated > st.peak_allocated:
            st.peak_allocated = st.allocated
        if st.reserved > st.peak_reserved:
            st.peak_reserved = st.reserved
        return block.size

    def block_bytes(self, key: object) -> int:
        """Bytes of the live block of ``key`` (its counted, rounded size). ``KeyError`` if
        not live."""
        return self._live[key].size

    def free(self, key: object) -> None:
        """Free ``key``'s block and merge it with free neighbours of its segment.

        Raises:
            KeyError: ``key`` is not live.
        """
        block = self._live.pop(key)
        self.state.allocated -= block.size
        block.free = True
        pool = self._pools[block.small]
        for nb in (block.prev, block.next):
            if nb is not None and nb.free:
                pool.pop(bisect_left(pool, (nb.size, nb.addr)))
                del self._by_addr[nb.addr if nb is block.next else block.addr]
                if nb is block.next:
                    block.size += nb.size
                    block.next = nb.next
                    if nb.next is not None:
                        nb.next.prev = block
                else:
                    nb.size += block.size
                    nb.next = block.next
                    if block.next is not None:
                        block.next.prev = nb
                    block = nb
        insort(pool, (block.size, block.addr))


def replay(events: list[tuple[str, object, int]]) -> AllocatorState:
    """Replay ``("alloc", key, nbytes)`` / ``("free", key, 0)`` events; returns the final state.

    Raises:
        ValueError: an unknown event kind (or a bad allocation, see ``malloc``).
        KeyError: freeing a key that is not live.
    """
    alloc = CachingAllocator()
    for kind, key, nbytes in events:
        if kind == "alloc":
            alloc.malloc(key, nbytes)
        elif kind == "free":
            alloc.free(key)
        else:
            raise ValueError(f"event kind must be alloc or free, got {kind!r}")
    return alloc.state
