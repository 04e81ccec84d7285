"""Gradients: the stored gradients of the trainable parameters, and the backward temporaries
of the vocabulary-sized ``(V, h)`` weight gradients (bytes)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpumem_tui.estimator.architecture import ModelArchitecture
from gpumem_tui.estimator.components.lora import adapter_bytes, trainable_params
from gpumem_tui.estimator.precision import precision
from gpumem_tui.estimator.spec import TrainingSpec


def gradient_bytes(arch: ModelArchitecture, spec: TrainingSpec) -> int:
    """Bytes of all gradients after backward: one per trainable parameter in the gradient
    dtype; divided by ``dp`` from ZeRO-2 on (Rajbhandari et al. 2020, Sec. 5.2) and by
    ``t * p`` for model parallelism. ``zero_grad(set_to_none=True)`` frees them, so they are
    absent during the next forward (PyTorch ``Optimizer.zero_grad`` docs)."""
    if spec.task == "inference":
        return 0
    g = trainable_params(arch, spec) * adapter_bytes(spec, precision(spec).grad) / (spec.tp * spec.pp)
    if spec.zero >= 2:
        g /= spec.dp
    return int(math.ceil(g))


@dataclass(frozen=True, slots=True)
class HeadGradTemps:
    """Backward temporaries of the vocabulary-sized weights (bytes, one device).

    ``pending``: the LM head's ``(V, h)`` weight-gradient contribution of a *tied* embedding,
    held by autograd from the LM-head backward until the embedding backward (reported with the
    activations); ``head_new``: an *untied* LM head's new weight gradient at the LM-head
    backward when a ``.grad`` already exists (accumulated in place right after);
    ``embedding``: what the embedding backward adds on top of the stored gradients.
    """

    pending: int
    head_new: int
    embedding: int


def head_gradient_temporaries(arch: ModelArchitecture, spec: TrainingSpec) -> HeadGradTemps:
    """Temporaries of the ``(V, h)`` gradients in backward (bytes), with and without stored
    gradients (``spec.grads_persist``: micro-batch >= 2 of ``--grad-accum``, or
    ``--keep-grads``).

    A tied weight is used twice (embedding and LM head); autograd's ``InputBuffer::add``
    (``torch/csrc/autograd/input_buffer.cpp``) holds the first contribution (the LM head's
    ``mm``) until the second arrives (``embedding_dense_backward``) and sums them out of place
    (``add``); ``AccumulateGrad::accumulateGrad`` (``torch/csrc/autograd/functions/
    accumulate_grad.h``) then *steals* the sum when no ``.grad`` exists, or adds it in place
    (``variable_grad += new_grad``) when one does. So the embedding backward holds
    mm + dense + sum = 2 V h more than the stored gradients without a ``.grad`` (the sum
    becomes it), and 3 V h more with one (measured, MemTracker on meta, torch 2.13:
    llama-3.2-1b L1 fp32 accum 4: ``mm``, ``embedding_dense_backward`` and two ``add
    [128256, 2048]`` live with the stored ``.grad``; notes 22-23 of notes/accuracy.md). Untied
    weights with a stored ``.grad``: each new weight gradient (LM-head ``mm``, the embedding's
    dense gradient) is a temporary of its own size before the in-place add.
    """
    if spec.task != "train" or arch.head not in ("lm", "mlm"):
        return HeadGradTemps(0, 0, 0)
    prec = precision(spec)
    # autograd builds each (V, h) gradient whole; ZeRO-2/3 and FSDP shard it only after the
    # backward of the parameter (measured, MemTracker / FSDPMemTracker, tied tiny GPT-2 under
    # FSDP on 2 and 4 ranks: the missing bytes were V h 4 (1 - 1/d))
    vh = arch.vocab_size * arch.embed_width * prec.grad / (spec.tp * spec.pp)
    if arch.tie_word_embeddings:
        return HeadGradTemps(pending=int(vh), head_new=0, embedding=int((3 if spec.grads_persist else 2) * vh))
    if spec.grads_persist:
        return HeadGradTemps(pending=0, head_new=int(vh), embedding=int(vh))
    return HeadGradTemps(0, 0, 0)
