"""Bytes per element of each tensor kind (weights, gradients, optimizer states, master copy,
activations) for a :class:`TrainingSpec`: shared by the component rules and the loss rule."""

from __future__ import annotations

from dataclasses import dataclass

from gpumem_tui.estimator.spec import DTYPE_BYTES, TrainingSpec


@dataclass(frozen=True, slots=True)
class Precision:
    """Bytes per element of each tensor kind for a spec.

    ``param``: stored weights; ``grad``: gradients; ``state``: optimizer states; ``master``:
    fp32 master copy (0 when none); ``compute``: activations.
    """

    param: int
    grad: int
    state: int
    master: int
    compute: int
    amp: bool  # torch autocast: fp32 weights, 16-bit compute, per-forward weight casts


def precision(spec: TrainingSpec) -> Precision:
    """Element sizes for the spec.

    Without ``--mixed-precision`` everything is in ``dtype`` (what ``model.to(dtype)`` and a
    plain ``torch.optim`` give). With it, and ZeRO 0, it is torch AMP (``torch.autocast``:
    fp32 weights, gradients and states, 16-bit compute; PyTorch "Automatic Mixed Precision"
    docs). With ZeRO >= 1 it is DeepSpeed's mixed precision: 16-bit weights and gradients,
    fp32 master weights + states, i.e. the ZeRO paper's (2 + 2 + K)Psi with K = 12
    (Rajbhandari et al. 2020, arXiv 1910.02054, Sec. 3.1).
    """
    e = DTYPE_BYTES[spec.dtype]
    if not spec.mixed_precision:
        return Precision(param=e, grad=e, state=e, master=0, compute=e, amp=False)
    if spec.zero == 0:
        return Precision(param=4, grad=4, state=4, master=0, compute=e, amp=True)
    return Precision(param=e, grad=e, state=4, master=4, compute=e, amp=False)
