"""Tensor parallelism as torch's DTensor API does it without sequence parallelism.

``parallelize_module`` with ``ColwiseParallel`` on q, k, v, gate, up and ``RowwiseParallel`` on
o, down (Megatron's split, Shoeybi et al. 2019, arXiv 1909.08053), embeddings, norms and the LM
head left replicated, every rank running the whole batch: a rank holds ``1/t`` of each layer
Linear's weight, gradient and optimizer states and ``1/t`` of the activations inside the
attention and MLP regions (``LayerActivations.parallel``), and the rest whole -- the norm
inputs and outputs, the residual stream, the embeddings, the LM head and the logits. Given
as per-moment reductions of the one-device estimate (``t = 1``), by ``(1 - 1/t)`` of the
split part. Measured, ``gpumem-tui measure --nproc 2|4 --strategy tp --on cpu`` (torch 2.13,
MemTracker, tiny Llama, ``tests/data/ranks``): parameters, optimizer states and activations
at the peak equal this rule to the byte. With ``--sequence-parallel`` the estimator's own
``tp`` rules (Korthikanti et al. 2022: every layer tensor ``/t``) apply instead.
"""

from __future__ import annotations

from typing import Callable

from gpumem_tui.estimator import components as C
from gpumem_tui.estimator.architecture import ModelArchitecture
from gpumem_tui.estimator.spec import TrainingSpec

_ALL_LAYERS_SAVED = ("end of forward", "log-softmax backward", "LM head backward", "final norm backward",
                     "last layer backward")


def dtensor_tp_extra(arch: ModelArchitecture, spec: TrainingSpec, t: int) -> Callable[[str, str], dict[str, float]]:
    """Per-moment byte changes (negative) of a ``t``-way DTensor tensor-parallel rank against
    the one-device estimate of ``spec`` (``spec.tp == 1``)."""
    f = 1 - 1 / t
    prec = C.precision(spec)
    lin = arch.linear_weight_params
    layer = C.layer_activations(arch, spec, spec.batch, spec.seq)
    split = layer.parallel - (layer.quadratic if spec.grad_ckpt == "selective" else 0)
    full_train = spec.task == "train"
    states = C.optimizer_state_bytes(arch, spec) * (lin / max(1, arch.total_params) if full_train else 0)
    grads = lin * prec.grad if full_train else 0
    L = max(1, arch.num_layers)
    saved_layers = 0 if spec.grad_ckpt == "full" else L

    def extra(phase: str, label: str) -> dict[str, float]:
        out = {"parameters": -lin * prec.param * f, "optimizer_states": -states * f}
        if label in _ALL_LAYERS_SAVED:
            out["activations"] = -max(saved_layers, 1 if "layer" in label else 0) * split * f
        elif label == "first layer backward":
            out["activations"] = -split * f
            out["gradients"] = -grads * f * (L - 1) / L
        if label == "last layer backward":
            out["gradients"] = -grads * f / L
        if label in ("embedding backward", "optimizer step") or (spec.grads_persist and phase != "optimizer_step"):
            out["gradients"] = -grads * f
        return out
    return extra
