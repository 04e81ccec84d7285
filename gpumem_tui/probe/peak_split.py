"""What a CUDA phase's high-water mark is made of, as far as the probe can see (torch only).

``torch.cuda.max_memory_allocated`` says how high a phase went, not with what. Without the
(costly) tensor tracker the probe still knows, at the peak:

- parameters, buffers and optimizer states: counted from the model and the optimizer
  (``numel * element_size``); constant inside a phase once the first optimizer step made the
  states (in the first step's optimizer phase the value at its end is used: an upper bound);
- gradients: constant outside backward. In backward, each parameter's post-accumulate-grad
  hook (torch >= 2.1, ``Tensor.register_post_accumulate_grad_hook``) reads the phase's running
  peak; when it rose since the previous hook the peak fell while the gradients held between
  the previous and the current running total, and the lower one is kept. So the gradients at
  a backward peak are exact to within one parameter's gradient;
- logits and loss buffers (estimator: ``logits_and_loss``): the storages of the model output
  (other than the loss) plus the tensors autograd saved for the loss's own backward (the
  log-softmax of ``cross_entropy``, an fp32 copy of the logits; not the integer labels),
  found by walking the loss's graph from ``loss.grad_fn`` down to the output's nodes (a loss
  computed outside the model is not seen: its buffers stay in the rest); measured when forward returns and
  counted in forward and backward peaks (alive from forward's end to the loss's backward).

What remains is published as ``activations_and_temporaries``: the activations saved for
backward, the gradients being produced that are not yet in ``.grad``, the optimizer step's
intermediates and any other temporary. They are not split further (it would take the tracker).
All figures are bytes.
"""

from __future__ import annotations

import contextlib
from typing import Any

UNSPLIT = "activations_and_temporaries"
MAX_LOSS_NODES = 64  # the loss's own graph is a handful of nodes; stop long before the model's


def _storage_key_bytes(tensor: Any) -> tuple[int, int] | None:
    try:
        storage = tensor.untyped_storage()
    except (RuntimeError, NotImplementedError):
        return None
    return (storage.data_ptr() or id(storage)), int(storage.nbytes())


def output_and_loss_bytes(output_tensors: list[Any], loss: Any, torch: Any) -> int:
    """Bytes of the distinct storages of ``output_tensors`` (the model output without the
    loss) and of the tensors saved by the autograd nodes between ``loss`` and those outputs
    (``_saved_*`` attributes of ``loss.grad_fn`` and the nodes below it, stopping at the
    outputs' own nodes, whose saved tensors are the model's activations)."""
    storages: dict[int, int] = {}
    for tensor in output_tensors:
        found = _storage_key_bytes(tensor)
        if found:
            storages[found[0]] = found[1]
    stop = {id(t.grad_fn) for t in output_tensors if getattr(t, "grad_fn", None) is not None}
    node = getattr(loss, "grad_fn", None)
    pending = [node] if node is not None and id(node) not in stop else []
    seen: set[int] = set()
    while pending and len(seen) < MAX_LOSS_NODES:
        node = pending.pop()
        if node is None or id(node) in seen or id(node) in stop:
            continue
        seen.add(id(node))
        for name in dir(node):
            if not name.startswith("_saved_"):
                continue
            with contextlib.suppress(Exception):  # a freed or non-tensor saved value
                value = getattr(node, name)
                # integer tensors there are the labels / indices: inputs, not loss buffers
                if isinstance(value, torch.Tensor) and value.is_floating_point():
                    found = _storage_key_bytes(value)
                    if found:
                        storages[found[0]] = found[1]
        for child, _ in getattr(node, "next_functions", ()):
            pending.append(child)
    return sum(storages.values())


class PeakSplit:
    """Per-phase bookkeeping for :meth:`split` (see the module docstring). Not thread-safe:
    called from the training thread (hooks) and under the probe's lock."""

    def __init__(self) -> None:
        self.logits_and_loss = 0
        self._start: dict[str, int] = {}
        self._grad_ids: set[int] = set()
        self._running_grads = 0
        self._running_peak = 0
        self._grads_at_peak: int | None = None
        self._had_grad: set[int] = set()

    def phase_started(self, categories: dict[str, int], allocated: int, with_grad: set[int]) -> None:
        """A phase began with these categories (bytes), ``allocated`` (torch allocated) and
        ``with_grad`` (``id`` of each parameter whose ``.grad`` was set then)."""
        self._start = dict(categories)
        self._running_grads = categories.get("gradients", 0)
        self._running_peak = allocated
        self._grads_at_peak = self._running_grads
        self._grad_ids = set()
        self._had_grad = with_grad

    def gradient_stored(self, param: Any, peak_now: int) -> None:
        """A parameter's gradient was accumulated in backward; ``peak_now`` is the phase's
        running peak (torch max allocated since the phase began)."""
        if peak_now > self._running_peak:  # the peak happened since the previous gradient
            self._running_peak = peak_now
            self._grads_at_peak = self._running_grads
        key = id(param)
        if key not in self._grad_ids:
            self._grad_ids.add(key)
            if key not in self._had_grad and param.grad is not None:
                self._running_grads += int(param.grad.numel()) * int(param.grad.element_size())

    def split(self, phase: str, peak: int, end: dict[str, int]) -> dict[str, int]:
        """The peak's parts: parameters, buffers (when any), gradients, optimizer_states,
        logits_and_loss (forward and backward), and the unsplit rest; they sum to ``peak``."""
        start = self._start
        parts = {
            "parameters": end.get("parameters", 0),
            "optimizer_states": max(start.get("optimizer_states", 0), end.get("optimizer_states", 0)),
        }
        if end.get("buffers"):
            parts["buffers"] = end["buffers"]
        if phase == "backward":
            if peak > self._running_peak:  # the peak came after the last gradient
                self._grads_at_peak = self._running_grads
            parts["gradients"] = self._grads_at_peak if self._grads_at_peak is not None else 0
        else:
            parts["gradients"] = max(start.get("gradients", 0), end.get("gradients", 0))
        if phase in ("forward", "backward"):
            parts["logits_and_loss"] = self.logits_and_loss
        known = sum(parts.values())
        if known > peak:  # bounds used above overshoot: keep the exact ones, trim the rest
            over = known - peak
            for name in ("logits_and_loss", "gradients", "optimizer_states"):
                cut = min(over, parts.get(name, 0))
                if cut:
                    parts[name] -= cut
                    over -= cut
        parts[UNSPLIT] = max(0, peak - sum(parts.values()))
        return parts




def output_tensors(output: Any, torch: Any, limit: int = 16) -> list[Any]:
    """Up to ``limit`` tensors that require grad in a (nested) forward output."""
    found: list[Any] = []
    stack = [(output, 0)]
    while stack and len(found) < limit:
        value, depth = stack.pop()
        if isinstance(value, torch.Tensor):
            if value.requires_grad:
                found.append(value)
        elif depth < 4 and isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif depth < 4 and isinstance(value, (list, tuple)):
            stack.extend((v, depth + 1) for v in value)
    return found


__all__ = ["PeakSplit", "UNSPLIT", "output_and_loss_bytes", "output_tensors"]
