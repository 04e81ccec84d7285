"""Tell listeners when Python code resizes a tensor storage in place (``UntypedStorage.resize_``).

torch only (imported by :mod:`gpumem_tui.probe.tracker`). A storage resized in place allocates
or frees memory without any aten operation a ``TorchDispatchMode`` could see: FSDP2 frees each
unsharded parameter and all-gather buffer after use with ``storage.resize_(0)`` and allocates
it again with ``storage.resize_(nbytes)`` (torch source:
``torch/distributed/fsdp/_fully_shard/_fsdp_param.py``, ``free_storage`` / ``alloc_storage``).
Without this, the probe's tracker counted every such buffer as live for good: a 2-rank FSDP2
GPT-2 job's backward peak was measured two transformer blocks' parameters too high.

While at least one listener is installed, ``torch.UntypedStorage.resize_`` is replaced by a
wrapper that calls the original, then each listener with ``(storage, old_nbytes,
new_nbytes)``; the original is put back when the last listener is removed. Resizes done inside
torch's C++ code are not seen (none that training relies on, as far as we know).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch

Listener = Callable[[Any, int, int], None]

_lock = threading.Lock()
_listeners: list[Listener] = []
_original: Any = None


def _resize(storage: Any, size: int) -> Any:
    old = storage.nbytes()
    out = _original(storage, size)
    for listener in tuple(_listeners):
        try:
            listener(storage, old, storage.nbytes())
        except Exception:  # noqa: BLE001 - a measurement must never break the user's resize
            pass
    return out


def add_listener(listener: Listener) -> None:
    """Call ``listener(storage, old_nbytes, new_nbytes)`` after every Python-level resize."""
    global _original
    with _lock:
        if not _listeners:
            _original = torch.UntypedStorage.resize_
            torch.UntypedStorage.resize_ = _resize  # type: ignore[method-assign]
        _listeners.append(listener)


def remove_listener(listener: Listener) -> None:
    """Stop calling ``listener``; the last one out restores torch's own ``resize_``."""
    global _original
    with _lock:
        if listener in _listeners:
            _listeners.remove(listener)
        if not _listeners and _original is not None:
            if torch.UntypedStorage.resize_ is _resize:
                torch.UntypedStorage.resize_ = _original  # type: ignore[method-assign]
            _original = None


__all__ = ["add_listener", "remove_listener"]
