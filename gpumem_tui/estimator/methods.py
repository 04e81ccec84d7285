"""Named seed methods: the rules of thumb the detailed model is compared with (``--method``).

Each returns an :class:`~gpumem_tui.estimator.estimate.Estimate` with the same JSON shape as
the detailed model, so the CLI and the dashboard can show them side by side. They know only
what their source knows (no logits, no temporaries, no context unless stated).
"""

from __future__ import annotations

from collections.abc import Callable

from gpumem_tui.estimator.architecture import ModelArchitecture
from gpumem_tui.estimator.components.lora import trainable_params
from gpumem_tui.estimator.estimate import COMPONENT_KEYS, Estimate, Phase, estimate
from gpumem_tui.estimator.spec import DTYPE_BYTES, TrainingSpec


def _make(name: str, arch: ModelArchitecture, spec: TrainingSpec, note: str, **parts: float) -> Estimate:
    comps = dict.fromkeys(COMPONENT_KEYS, 0)
    for key, value in parts.items():
        comps[key] = int(value)
    total = sum(comps.values())
    phase = "inference" if spec.task == "inference" else "step"
    return Estimate(
        model=arch.name,
        total_params=arch.total_params,
        trainable_params=trainable_params(arch, spec),
        components_bytes=comps,
        peak_bytes=total,
        peak_phase=phase,
        phases=(Phase(phase, total, comps),),
        assumptions=(note,),
        allocated_peak_bytes=total,
        device=spec.device,
        method=name,
    )


def zero16(arch: ModelArchitecture, spec: TrainingSpec) -> Estimate:
    """Model states only, 16 bytes/param: mixed-precision Adam = 2 (fp16 weights) + 2 (fp16
    gradients) + 12 (fp32 master, momentum, variance). Rajbhandari et al. 2020 (ZeRO, arXiv
    1910.02054), Sec. 3.1 "(2 + 2 + K)Psi, K = 12". Inference: 2 bytes/param."""
    n = arch.total_params
    if spec.task == "inference":
        return _make("zero16", arch, spec, "ZeRO paper: 2 B/param weights", parameters=2 * n)
    return _make("zero16", arch, spec, "ZeRO paper (2+2+12) B/param, no activations",
                 parameters=2 * n, gradients=2 * n, optimizer_states=12 * n)


def bytes20(arch: ModelArchitecture, spec: TrainingSpec) -> Estimate:
    """20 bytes/param: the ZeRO 16 B/param plus 4 B/param for activations and buffers, a
    common rule of thumb for mixed-precision AdamW fine-tuning (e.g. EleutherAI "Transformer
    Math 101"; HF "Model training anatomy" 18 B/param + activations)."""
    n = arch.total_params
    if spec.task == "inference":
        return _make("bytes20", arch, spec, "20 B/param rule (inference: 2 B/param)", parameters=2 * n)
    return _make("bytes20", arch, spec, "20 B/param: 16 model states + 4 activations",
                 parameters=2 * n, gradients=2 * n, optimizer_states=12 * n, activations=4 * n)


def per_token(arch: ModelArchitecture, spec: TrainingSpec) -> Estimate:
    """ZeRO 16 B/param plus a per-token activation heuristic ``A = 4.6894e-4 N + 1.8494e6``
    bytes per token, times ``b s`` (the seed heuristic of issue 3, a linear fit of activation
    bytes per token against parameter count)."""
    n = arch.total_params
    per_tok = 4.6894e-4 * n + 1.8494e6
    act = per_tok * spec.batch * spec.seq
    if spec.task == "inference":
        return _make("per-token", arch, spec, "2 B/param + per-token activations", parameters=2 * n, activations=act)
    return _make("per-token", arch, spec, "16 B/param + A = 4.6894e-4 N + 1.8494e6 B/token",
                 parameters=2 * n, gradients=2 * n, optimizer_states=12 * n, activations=act)


def korthikanti(arch: ModelArchitecture, spec: TrainingSpec) -> Estimate:
    """ZeRO 16 B/param plus Korthikanti et al. 2022 (arXiv 2205.05198) eq. (1): activations
    ``s b h (34 + 5 a s / h)`` bytes per layer (16-bit, with dropout, GPT layer), times ``L``;
    with ``--tp`` eq. (5) with sequence parallelism ``/t``; selective recompute drops
    ``5as/h``; full recompute keeps ``2 s b h`` per layer (Sec. 5)."""
    n = arch.total_params
    b, s, h, a, L = spec.batch, spec.seq, arch.hidden_size, arch.num_heads, arch.num_layers
    if spec.grad_ckpt == "full":
        per = 2 * s * b * h
    elif spec.grad_ckpt == "selective":
        per = s * b * h * 34
    else:
        per = s * b * h * (34 + 5 * a * s / h)
    act = per * L / spec.tp
    if spec.task == "inference":
        return _make("korthikanti", arch, spec, "2 B/param (no activations kept)", parameters=2 * n)
    return _make("korthikanti", arch, spec, "16 B/param + sbh(34 + 5as/h) L",
                 parameters=2 * n, gradients=2 * n, optimizer_states=12 * n, activations=act)


def accelerate_rule(arch: ModelArchitecture, spec: TrainingSpec) -> Estimate:
    """HF ``accelerate estimate-memory``: parameter bytes by dtype; training = 4 x the model
    size with Adam (16 B/param in fp32, 8 B/param in 16-bit); no batch, sequence or activations
    (accelerate docs, "Model memory estimator"; ``accelerate/commands/estimate.py``)."""
    n = arch.total_params
    e = DTYPE_BYTES[spec.dtype]
    if spec.task == "inference":
        return _make("accelerate", arch, spec, "accelerate: weights only", parameters=e * n)
    return _make("accelerate", arch, spec, "accelerate: 4 x model size (Adam), no activations",
                 parameters=e * n, gradients=e * n, optimizer_states=2 * e * n)


METHODS: dict[str, Callable[[ModelArchitecture, TrainingSpec], Estimate]] = {
    "detailed": estimate,
    "zero16": zero16,
    "bytes20": bytes20,
    "per-token": per_token,
    "korthikanti": korthikanti,
    "accelerate": accelerate_rule,
}


def run_method(name: str, arch: ModelArchitecture, spec: TrainingSpec) -> Estimate:
    """Estimate with a named method (see :data:`METHODS`).

    Raises:
        ValueError: unknown method name.
    """
    try:
        fn = METHODS[name]
    except KeyError:
        raise ValueError(f"unknown --method {name!r} (choose from {', '.join(METHODS)})") from None
    return fn(arch, spec)
