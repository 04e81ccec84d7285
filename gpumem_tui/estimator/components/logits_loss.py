"""Logits and loss buffers (bytes): those of a training step as the recipe computes the loss
(the recipe's loss rules, :mod:`gpumem_tui.estimator.recipes.rules`: fp32 upcast or not,
chunks, live beside the formula they change), the logits a training loop keeps by holding the
model output, and the last position's logits of an inference step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpumem_tui.estimator.precision import precision
from gpumem_tui.estimator.recipes import rules as R

if TYPE_CHECKING:
    from gpumem_tui.estimator.architecture import ModelArchitecture
    from gpumem_tui.estimator.spec import TrainingSpec


@dataclass(frozen=True, slots=True)
class LogitsLoss:
    """Bytes of the logits / loss tensors (shape ``(..., V)``) at each moment of a step.

    ``saved``: kept from forward to backward (log-probs, soft-capping tanh);
    ``forward_peak``: live at the end of the forward (logits, fp32 upcast, log-probs);
    ``backward_peak``: live while ``log_softmax`` runs backward (saved + grad of log-probs +
    grad of logits); ``head_grad``: the logits gradient while the LM head runs backward.
    """

    saved: int
    forward_peak: int
    backward_peak: int
    head_grad: int


def logits_loss_bytes(arch: ModelArchitecture, spec: TrainingSpec, b: int, s: int) -> LogitsLoss:
    """Logits and loss buffers (bytes).

    Causal LMs in ``transformers`` (``ForCausalLMLoss``) upcast the ``b x s x V`` logits to
    fp32, take ``log_softmax`` (fp32, saved) and ``nll_loss``; backward materialises the
    gradient of the log-probs and of the logits (fp32) while the log-probs are alive:
    3 x 4bsV, then the 16-bit logits gradient. Measured on a tiny GPT-2: logits + log-probs
    = 2 x 4bsV (ESTIMATOR.md). BERT's MLM loss runs in the compute dtype without upcast.
    Gemma 2's final soft-capping (``tanh(x / c) * c``) keeps the tanh output.

    The recipe's loss (:mod:`gpumem_tui.estimator.recipes.rules`): with ``c`` chunks
    (torchtune ``CEWithChunkedOutputLoss``: 8; LitGPT: one per 128 positions) only one chunk's
    fp32 copy exists at a time in forward (``4 n / c``) and one chunk's two gradients in
    backward (``2 l n / c``, ``l`` the loss dtype), while every chunk's log-probs stay saved
    (``l n``); without the upcast (LitGPT) the loss dtype is the logits dtype. With ``c = 1``
    and the upcast this is the formula above.
    """
    e = R.logits_bytes(spec, precision(spec).compute)
    V = arch.vocab_size
    n = b * s * V
    if arch.head in ("classification", "none"):
        small = b * max(1, arch.num_labels) * 4
        return LogitsLoss(saved=small, forward_peak=2 * small, backward_peak=3 * small, head_grad=small)
    if arch.kind == "encoder" and not precision(spec).amp:
        return LogitsLoss(saved=n * e, forward_peak=2 * n * e, backward_peak=3 * n * e, head_grad=n * e)
    # causal LMs, and BERT's MLM loss under autocast (``cross_entropy`` is on autocast's fp32
    # list): fp32 copy of the logits, fp32 log-probabilities (measured, MemTracker, CPU
    # autocast BERT: ``_log_softmax [b s, V] f32`` + two fp32 gradients at the backward peak)
    upcast = R.loss_upcasts(spec) or precision(spec).amp
    chunks = R.loss_chunks(spec, s)
    loss_e = 4 if upcast else e
    lp = loss_e * n
    saved = lp
    fwd = lp + n * e + (4 * n // chunks if upcast and e != 4 else 0)
    if arch.final_logit_softcapping:
        saved += n * e
        fwd += n * e  # tanh output (saved); the capped logits and the fp32 copy are above
    bwd = saved + 2 * loss_e * n // chunks
    return LogitsLoss(saved=saved, forward_peak=fwd, backward_peak=bwd, head_grad=n * e)


def kept_output_bytes(arch: ModelArchitecture, spec: TrainingSpec, b: int, s: int) -> int:
    """Logits the training loop keeps alive by holding the model output (``spec.keep_outputs``):
    ``b s V`` in the compute dtype (bytes); 0 otherwise, without an LM/MLM head, or for
    inference. transformers' causal-LM loss upcasts a copy and ``log_softmax`` saves its own
    output, so without the loop's reference the logits are freed before backward (measured:
    demo GPT-2, b=4, s=128, V=8192, fp32: +16.0 MiB at the backward peak when the output is
    kept). A KV cache the output also holds (``use_cache=True`` in training) is not counted."""
    if not R.keeps_outputs(spec) or spec.task == "inference" or arch.head not in ("lm", "mlm"):
        return 0
    return int(b * s * arch.vocab_size * R.logits_bytes(spec, precision(spec).compute) / spec.tp)


def inference_logits_bytes(arch: ModelArchitecture, spec: TrainingSpec, b: int) -> int:
    """Logits of the last position only (``generate()`` passes ``logits_to_keep=1``), plus
    its fp32 copy: ``b V (e + 4)`` bytes; 0 for an encoder."""
    e = precision(spec).compute
    if arch.kind != "decoder":
        return 0
    return int(b * arch.vocab_size * (e + 4))
