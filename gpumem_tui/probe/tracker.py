"""Live tensor bytes of one device, counted from the outputs of every torch operation.

torch only (imported by :mod:`gpumem_tui.probe.core` at attach time, never by the dashboard).

How it counts: a ``TorchDispatchMode`` sees the result of every aten operation run on the thread
that entered it (and on the autograd engine's threads, which inherit the mode). Each new tensor
storage on the tracked device type is added once (views and in-place results share their
storage and are not counted again) with a weak reference whose callback subtracts its bytes
when the storage is freed. So ``live_bytes`` is the sum of ``UntypedStorage.nbytes()`` over
live storages that were created since the tracker started, plus any tensors registered with
:meth:`LiveTensorTracker.register` (the model's parameters, buffers, gradients and optimizer
states that existed before). This is the same quantity ``torch.cuda.memory_allocated`` counts
on CUDA, minus the caching allocator's rounding (API: torch.utils._python_dispatch,
torch.UntypedStorage; the technique is the one torch's own
``torch.distributed._tools.mem_tracker.MemTracker`` uses).

Each storage is tagged with the training phase current when it was made, so the probe can
say how many live bytes were made in forward (activations, logits, loss) and how many
elsewhere (temporaries).

Limits, stated: tensors made before the tracker started and not registered, or made on
another thread (a data-loading thread), are not seen; storages resized in place by aten
``resize_`` keep their first size (``UntypedStorage.resize_`` from Python, as FSDP2 frees and
re-allocates its unsharded parameters, is followed: :mod:`gpumem_tui.probe.storage_resize`);
the mode is incompatible with ``torch.compile`` tracing.
Cost: one Python call per aten op (measured by ``benchmarks/probe_overhead.py``).
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Iterable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode

from gpumem_tui.probe.storage_resize import add_listener, remove_listener


_LIFT_FRESH = torch.ops.aten.lift_fresh.default


def _local_shard(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor whose storage this process holds: a DTensor's local shard, else ``tensor``.

    A DTensor (FSDP2 ``fully_shard`` parameters, their gradients and optimizer states, tensor
    parallelism) is a wrapper subclass whose ``untyped_storage()`` reports the GLOBAL tensor's
    bytes (torch 2.x; found by a 2-rank FSDP2 job: every sharded parameter and Adam state was
    counted world_size times too large); the memory this rank holds is its local tensor's
    (API: ``DTensor.to_local()``, torch.distributed.tensor).
    """
    local = getattr(tensor, "_local_tensor", None)  # DTensor's field; to_local() would add an autograd node
    return local if isinstance(local, torch.Tensor) else tensor


class _StorageRef(weakref.ref):
    """A weak reference to a storage that carries what the tracker knows about it: one
    object per live storage (a lambda + tuple per storage would double the objects the
    garbage collector has to look at, and its full collections are what a big training
    process pays for)."""

    __slots__ = ("key", "nbytes", "tag", "sequence")


class LiveTensorTracker(TorchDispatchMode):
    """Counts live tensor storage bytes on one device type (``"cpu"`` or ``"cuda"``).

    Read ``live_bytes``, ``peak_bytes`` (max of live_bytes since :meth:`reset_peak`) and
    :meth:`live_by_tag` from any thread. Set ``tag`` (a short string, e.g. the phase name) to
    label storages created from now on. All figures are bytes.
    """

    def __init__(self, device_type: str = "cpu") -> None:
        super().__init__()
        self.device_type = device_type
        self._cpu = device_type == "cpu"
        self.tag = "init"
        self.step = 0  # set by the probe; remembered with the window's peak
        self.enabled = True
        self.live_bytes = 0
        self.peak_bytes = 0
        self._by_tag: dict[str, int] = {}
        # id(storage) -> its reference; the sequence number orders creations (see retag).
        self._storages: dict[int, _StorageRef] = {}
        self._callback = self._freed  # one bound method for all references
        self._sequence = 0
        # Bumped by every counted allocation and free: a reader that sees the same value before
        # and after reading other state knows no tensor came or went in between.
        self.changes = 0
        self._lock = threading.Lock()
        self._thread: int | None = None
        # The highest live_bytes since the last take_window(), when, and the split by tag then.
        self._window_peak = 0
        self._window_time = 0.0
        self._window_tags: dict[str, int] = {}
        self._window_sequence = 0
        self._window_phase = self.tag
        self._window_step = 0
        self._phase_peak = 0  # highest live_bytes since the last take_phase_peak()

    # -- counting --------------------------------------------------------------------------

    def _freed(self, ref: _StorageRef) -> None:
        with self._lock:
            if self._storages.get(ref.key) is not ref:
                return
            del self._storages[ref.key]
            self.changes += 1
            self.live_bytes -= ref.nbytes
            self._by_tag[ref.tag] -= ref.nbytes

    def _add(self, tensor: torch.Tensor, tag: str | None = None) -> None:
        tensor = _local_shard(tensor)
        if not tensor.is_cpu if self._cpu else tensor.device.type != self.device_type:
            return
        try:
            storage = tensor.untyped_storage()
        except (RuntimeError, NotImplementedError):  # tensors without storage (sparse, ...)
            return
        key = id(storage)
        if key in self._storages:
            return
        nbytes = storage.nbytes()
        if nbytes == 0:
            return
        tag = tag or self.tag
        ref = _StorageRef(storage, self._callback)
        ref.key, ref.nbytes, ref.tag = key, nbytes, tag
        with self._lock:
            if key in self._storages:
                return
            self._sequence += 1
            ref.sequence = self._sequence
            self._storages[key] = ref
            self.changes += 1
            self.live_bytes += nbytes
            self._by_tag[tag] = self._by_tag.get(tag, 0) + nbytes
            self._raise_peaks_locked()

    def _raise_peaks_locked(self) -> None:
        """Carry live_bytes into the peaks it passed (the lock is held)."""
        if self.live_bytes > self.peak_bytes:
            self.peak_bytes = self.live_bytes
        if self.live_bytes > self._phase_peak:
            self._phase_peak = self.live_bytes
        if self.live_bytes > self._window_peak:
            self._window_peak = self.live_bytes
            self._window_time = time.time()
            self._window_tags = self._by_tag.copy()
            self._window_sequence = self._sequence
            self._window_phase = self.tag
            self._window_step = self.step

    def _resized(self, storage: Any, old: int, new: int) -> None:
        """A counted storage resized in place (FSDP2 frees and re-allocates its unsharded
        parameters so, see :mod:`gpumem_tui.probe.storage_resize`): count its new size."""
        if not self.enabled or old == new:
            return
        with self._lock:
            entry = self._storages.get(id(storage))
            if entry is None or entry() is not storage:
                return
            delta = new - entry.nbytes
            entry.nbytes = new
            self.changes += 1
            self.live_bytes += delta
            self._by_tag[entry.tag] = self._by_tag.get(entry.tag, 0) + delta
            if delta > 0:  # allocated again now: ordered as a new storage (see retag)
                self._sequence += 1
                entry.sequence = self._sequence
                self._raise_peaks_locked()

    def register(self, tensors: Iterable[Any], tag: str | None = None) -> None:
        """Count tensors that already exist (parameters, buffers, gradients, states)."""
        for tensor in tensors:
            if isinstance(tensor, torch.Tensor):
                self._add(tensor, tag)

    def retag(self, tensors: Iterable[Any], tag: str) -> None:
        """Label the storages of ``tensors`` with ``tag`` from now on (counting any not yet
        seen), e.g. a gradient once autograd stored it in ``param.grad``."""
        for tensor in tensors:
            if not isinstance(tensor, torch.Tensor):
                continue
            tensor = _local_shard(tensor)
            if tensor.device.type != self.device_type:
                continue
            try:
                key = id(tensor.untyped_storage())
            except (RuntimeError, NotImplementedError):
                continue
            with self._lock:
                entry = self._storages.get(key)
                if entry is not None and entry.tag != tag:
                    nbytes, old = entry.nbytes, entry.tag
                    entry.tag = tag
                    self._by_tag[old] -= nbytes
                    self._by_tag[tag] = self._by_tag.get(tag, 0) + nbytes
                    if entry.sequence <= self._window_sequence:
                        # Alive then and now, so alive at the window's peak: relabel it there too.
                        window = self._window_tags
                        window[old] = window.get(old, 0) - nbytes
                        window[tag] = window.get(tag, 0) + nbytes
            if entry is None:
                self.register((tensor,), tag=tag)

    def take_window(self) -> tuple[int, float, dict[str, int], str, int]:
        """``(peak_bytes, epoch_time, bytes_by_tag_then, tag_current_then, step_then)`` of the
        highest live bytes since the previous call; then starts a new window at the current
        live bytes."""
        with self._lock:
            window = (self._window_peak, self._window_time, self._window_tags, self._window_phase,
                      self._window_step)
            self._window_peak = self.live_bytes
            self._window_time = time.time()
            self._window_tags = self._by_tag.copy()
            self._window_sequence = self._sequence
            self._window_phase = self.tag
            self._window_step = self.step
        return window

    def take_phase_peak(self) -> int:
        """The highest live bytes since the previous call (or since the tracker started);
        the next period starts at the current live bytes. The probe calls it at every phase
        boundary, so each phase's high-water mark is exact whatever the sampling interval."""
        with self._lock:
            peak = max(self._phase_peak, self.live_bytes)
            self._phase_peak = self.live_bytes
        return peak

    def live_by_tag(self) -> dict[str, int]:
        """Live bytes per creation tag (a copy)."""
        with self._lock:
            return {k: v for k, v in self._by_tag.items() if v}

    def reset_peak(self) -> None:
        """Start a new peak (and a new window) from the current live bytes."""
        with self._lock:
            self.peak_bytes = self.live_bytes
        self.take_window()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        # Views share their input's storage and in-place ops return their input: neither
        # allocates, and skipping them early halves the per-op cost of a training step.
        # lift_fresh is the exception: it is how torch.tensor(data) first shows its new storage.
        if not self.enabled:
            return out
        if func is _LIFT_FRESH:
            self._add(out)
        elif func.is_view:
            return out
        elif isinstance(out, torch.Tensor):
            if not (args and out is args[0]):
                self._add(out)
        elif isinstance(out, (tuple, list)):
            for item in out:
                if isinstance(item, torch.Tensor):
                    self._add(item)
        return out

    # -- lifetime --------------------------------------------------------------------------

    def start(self) -> None:
        """Push the mode on this thread's dispatch stack (stays until :meth:`stop`)."""
        self._thread = threading.get_ident()
        add_listener(self._resized)
        self.__enter__()

    def stop(self) -> None:
        """Stop counting; pop the mode if this thread pushed it and it is on top."""
        self.enabled = False
        remove_listener(self._resized)
        if self._thread == threading.get_ident() and _get_current_dispatch_mode() is self:
            self.__exit__(None, None, None)
            self._thread = None
