"""A model of torch's CUDA caching allocator (pure Python; torch 2.13).

Source: ``c10/cuda/CUDACachingAllocator.cpp`` (``DeviceCachingAllocator``: ``round_size``,
``get_allocation_size``, ``get_free_block``, ``should_split``, ``free_block``).

How the allocator turns tensor bytes (torch *allocated*) into device memory (torch *reserved*):

1. Rounding (``round_size``): every request is rounded up to a multiple of 512 bytes
   (``kMinBlockSize``), so a 1-byte tensor occupies 512 bytes of allocated.
2. Two pools: requests of at most 1 MiB (``kSmallSize``) come from the small pool, larger ones
   from the large pool; a block never moves between pools.
3. Segment sizes (``get_allocation_size``): when no cached block fits, the allocator reserves a
   new segment with ``cudaMalloc``: 2 MiB (``kSmallBuffer``) for a small request, 20 MiB
   (``kLargeBuffer``) for a request below 10 MiB (``kMinLargeAlloc``), otherwise the request
   rounded up to a multiple of 2 MiB (``kRoundLarge``).
4. Splitting and reuse (``get_free_block``, ``should_split``): a request takes the smallest
   cached free block of its pool and stream that is large enough (best fit); the remainder is
   split off as a new free block when it is at least 512 bytes (small pool) or more than 1 MiB
   (large pool). Freed blocks merge with free neighbours of the same segment; segments are only
   returned to the driver on ``empty_cache()`` or when a ``cudaMalloc`` fails.

So reserved exceeds allocated by (a) rounding and the unused tails of segments, and (b) free
cached blocks that the peak's requests could not use: freed earlier in the step, in sizes or
places that did not fit (fragmentation). (a) follows exactly from the sizes
(:func:`segment_bytes`, :func:`packed_reserved_bytes`); (b) depends on the order of every
allocation of the step: ``estimate --device cuda`` generates that order
(:mod:`.cuda_step_events`) and replays it through :mod:`.cuda_allocator_sim`; where the order
is not modelled (ZeRO, model parallelism, MoE, ...) the fallback :func:`fragmentation_bytes`
uses a share of the bytes that are freed and re-requested during the step (transient tensors).
Its share is a measurement: on the H100 cases (``dev_truth_h100.jsonl``) reserved - allocated
over those transient bytes has a median near 0.10, with a wide spread (0.03 .. 0.85: gradient
checkpointing and the first optimizer step leave more behind); see benchmarks/gpu_accuracy.py.
"""

from __future__ import annotations

MiB = 1 << 20
MIN_BLOCK = 512  # kMinBlockSize
SMALL_SIZE = 1 * MiB  # kSmallSize: largest small-pool request
SMALL_BUFFER = 2 * MiB  # kSmallBuffer: small-pool segment
LARGE_BUFFER = 20 * MiB  # kLargeBuffer: segment for requests < kMinLargeAlloc
MIN_LARGE_ALLOC = 10 * MiB  # kMinLargeAlloc
ROUND_LARGE = 2 * MiB  # kRoundLarge

#: share of the step's transient bytes left as cached, unusable blocks at the peak (measured)
FRAGMENTATION_SHARE = 0.10


def round_size(nbytes: int) -> int:
    """Bytes a request occupies in allocated: ``nbytes`` rounded up to 512 (``round_size``).

    Raises:
        ValueError: ``nbytes`` negative.
    """
    if nbytes < 0:
        raise ValueError(f"negative request {nbytes}")
    if nbytes < MIN_BLOCK:
        return MIN_BLOCK
    return -(-nbytes // MIN_BLOCK) * MIN_BLOCK


def is_small(nbytes: int) -> bool:
    """Whether a request is served from the small pool (rounded size <= 1 MiB)."""
    return round_size(nbytes) <= SMALL_SIZE


def segment_bytes(nbytes: int) -> int:
    """Size of the segment ``cudaMalloc``-ed when a request finds no cached block
    (``get_allocation_size``): 2 MiB, 20 MiB, or the request rounded up to 2 MiB."""
    size = round_size(nbytes)
    if size <= SMALL_SIZE:
        return SMALL_BUFFER
    if size < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return -(-size // ROUND_LARGE) * ROUND_LARGE


def packed_reserved_bytes(requests: list[int]) -> int:
    """Reserved bytes after allocating ``requests`` (bytes each) in order and freeing none:
    each request is carved from the open segment of its kind when the rest of that segment
    holds it (block splitting), else a new segment is reserved (:func:`segment_bytes`).

    This is the reserve of long-lived tensors (parameters, gradients, optimizer states)
    allocated once; it never undercounts rounding and segment tails.
    """
    reserved = 0
    free_small = 0  # bytes left in the current 2 MiB small segment
    free_mid = 0  # bytes left in the current 20 MiB segment
    for req in requests:
        size = round_size(req)
        if size <= SMALL_SIZE:
            if size > free_small:
                reserved += SMALL_BUFFER
                free_small = SMALL_BUFFER
            free_small -= size
        elif size < MIN_LARGE_ALLOC:
            if size > free_mid:
                reserved += LARGE_BUFFER
                free_mid = LARGE_BUFFER
            free_mid -= size
            if free_mid <= SMALL_SIZE:  # should_split: a remainder <= 1 MiB stays with the block
                free_mid = 0
        else:
            reserved += segment_bytes(size)
    return reserved


def fragmentation_bytes(transient_bytes: int) -> int:
    """Cached free blocks at the peak that its requests could not use (bytes): the measured
    :data:`FRAGMENTATION_SHARE` of the step's transient bytes (see module doc)."""
    return int(FRAGMENTATION_SHARE * max(0, transient_bytes))
