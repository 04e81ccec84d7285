"""Temporary buffers of one layer's backward: the input and weight gradients autograd
allocates, walked in autograd order, above the layer's saved activations (bytes)."""

from __future__ import annotations

from dataclasses import dataclass

from gpumem_tui.estimator.architecture import ModelArchitecture
from gpumem_tui.estimator.components.kernels import (
    attention_elem, dropout_mask_bytes, fused_sdpa, sdpa_math, v_pins_fused_qkv, v_pins_fused_qkv_eager)
from gpumem_tui.estimator.components.lora import lora_targets
from gpumem_tui.estimator.precision import precision
from gpumem_tui.estimator.spec import TrainingSpec


class _Walk:
    """Running live bytes through a sequence of allocations and frees; keeps the maximum
    and how much of it was weight gradients."""

    def __init__(self) -> None:
        self.cur = 0.0
        self.grads = 0.0
        self.peak = 0.0
        self.peak_grads = 0.0

    def alloc(self, n: float, grad: bool = False) -> None:
        self.cur += n
        if grad:
            self.grads += n
        if self.cur > self.peak:
            self.peak, self.peak_grads = self.cur, self.grads

    def free(self, n: float) -> None:
        self.cur -= n


@dataclass(frozen=True, slots=True)
class LayerBackward:
    """Peak bytes above a layer's saved activations during its backward: ``total`` bytes, of
    which ``grads`` are the layer's weight gradients allocated by then."""

    total: int
    grads: int


@dataclass(slots=True)  # not frozen: a frozen init costs ~10x, and this is built per call
class _Backward:
    """One layer's backward walk: the model, the spec, shapes, ``e`` compute and ``g``
    gradient bytes per element, the adapted roles under LoRA, and the running walk ``w``."""

    arch: ModelArchitecture
    spec: TrainingSpec
    b: int
    s: int
    bs: int
    e: int
    g: int
    lora: bool
    targets: frozenset[str]
    w: _Walk

    def saves_input(self, role: str) -> bool:
        """Whether the Linear of ``role`` saved its input (every one; only adapted ones under LoRA)."""
        return not self.lora or role in self.targets

    def wgrad(self, d_in: int, d_out: int, count: int = 1) -> None:
        """A Linear's weight gradient (none for a frozen one under LoRA)."""
        n = 0 if self.lora else d_in * d_out * self.g * count
        if self.spec.grads_persist:
            # a .grad already exists: the new gradient is a temporary that AccumulateGrad adds
            # in place and frees (torch/csrc/autograd/functions/accumulate_grad.h)
            self.w.alloc(n)
            self.w.free(n)
        else:
            self.w.alloc(n, grad=True)


def layer_backward_excess(arch: ModelArchitecture, spec: TrainingSpec, b: int, s: int) -> LayerBackward:
    """Peak bytes above the saved activations while one layer runs backward (bytes),
    including the layer's weight gradients as autograd allocates them.

    A walk through the layer's backward in autograd order (the reverse of the
    ``transformers`` forward): each node allocates its input gradients (and weight gradient)
    and then frees its saved tensors and its output gradient (PyTorch autograd releases saved
    variables once a node has run, ``retain_graph=False``). The incoming gradient of the
    hidden state is counted by the caller. GPT-2 measured (MemTracker, ESTIMATOR.md method):
    the MLP peak holds the c_proj input gradient + two ``gelu_new`` product gradients
    (3 bsf e); the attention peak one ``b a s^2`` temporary after the MLP's saved tensors are
    gone.
    """
    prec = precision(spec)
    e, g = prec.compute, prec.grad
    bs = b * s
    h, f = arch.hidden_size, arch.intermediate_size
    if arch.coarse:
        return LayerBackward(total=int(2 * bs * f * e + 12 * h * h * g), grads=int(12 * h * h * g))
    lora = spec.task in ("lora", "qlora")
    c = _Backward(arch=arch, spec=spec, b=b, s=s, bs=bs, e=e, g=g, lora=lora, w=_Walk(),
                  targets=frozenset(l.role for l in lora_targets(arch, spec)) if lora else frozenset())
    # a Gemma-2 RMSNorm keeps x and (trained weight only) x*rsqrt in fp32
    gemma_norm = (1 if lora else 2) * bs * h * 4 + bs * 4
    if arch.norms_per_layer == 4:  # Gemma 2: post-feedforward norm runs backward first
        c.w.alloc(4 * bs * h * 4)
        c.w.free(4 * bs * h * 4 + gemma_norm)
    if arch.gated_mlp:
        _gated_mlp_backward(c)
    else:
        _plain_mlp_backward(c)
    # norm between the blocks: a few fp32 (RMSNorm) or compute-dtype temporaries
    norm_tmp = (4 * bs * h * 4) if arch.norm == "rmsnorm" else 2 * bs * h * e
    c.w.alloc(norm_tmp)
    c.w.free(norm_tmp)
    _norm_freed(c, gemma_norm)
    _attention_backward(c)
    c.w.alloc(bs * h * e)
    c.w.alloc(norm_tmp)
    return LayerBackward(total=int(c.w.peak), grads=int(c.w.peak_grads))


def _gated_mlp_backward(c: _Backward) -> None:
    """Gated MLP (SwiGLU / GeGLU): down projection, product, activation, up and gate
    projections; MoE experts run backward one at a time, each on ~k/E of the tokens (uniform
    routing)."""
    arch, w, bs, e = c.arch, c.w, c.bs, c.e
    h, f = arch.hidden_size, arch.intermediate_size
    mult = arch.experts_per_token / arch.num_experts if arch.num_experts else 1
    n_exp = max(1, arch.num_experts)
    bsf = bs * f * e * mult
    w.alloc(bsf)  # grad of the down-projection input
    c.wgrad(f, h, n_exp)
    w.free(bsf if c.saves_input("down") else 0)  # saved product
    w.alloc(2 * bsf)
    w.free(3 * bsf)  # product grad, saved act output and up output
    w.alloc(bs * h * e)
    c.wgrad(h, f, n_exp)
    w.free(bsf)  # up grad
    w.alloc(bsf)
    w.free(2 * bsf)  # act grad, saved gate output
    w.alloc(bs * h * e)
    c.wgrad(h, f, n_exp)
    w.free(bsf)
    w.alloc(bs * h * e)
    w.free(2 * bs * h * e)


def _plain_mlp_backward(c: _Backward) -> None:
    """Plain MLP: residual dropout, output dense, the activation (``gelu_new`` op by op: product
    backward, then tanh / polynomial backward), input dense."""
    arch, w, bs, e = c.arch, c.w, c.bs, c.e
    h, f = arch.hidden_size, arch.intermediate_size
    p_hid = arch.hidden_dropout > 0 and c.spec.task != "inference"
    bsf = bs * f * e
    if p_hid:  # residual dropout backward: grad x mask, then the mask is freed
        w.alloc(bs * h * e)
        w.free(bs * h * dropout_mask_bytes(c.spec, e))
    c.wgrad(f, h)
    w.alloc(bsf)  # c_proj / output dense input gradient
    w.free((bs * h * e if p_hid else 0) + (bsf if c.saves_input("down") else 0))
    if arch.activation == "gelu_new":
        # gelu_new = 0.5 x (1 + tanh(c (x + 0.044715 x^3))): product backward (2 grads),
        # then tanh / polynomial backward; 4 saved intermediates + the input
        w.alloc(2 * bsf)
        w.free(3 * bsf)  # incoming grad, saved 0.5x and (1 + tanh)
        w.alloc(bsf)
        w.free(2 * bsf)  # tanh grad path, saved tanh
        w.alloc(bsf)
        w.free(bsf)
    else:
        w.alloc(bsf)
        w.free(2 * bsf)  # incoming grad, saved GELU input... (input freed below)
    w.alloc(bs * h * e)
    c.wgrad(h, f)
    w.free(2 * bsf if arch.activation == "gelu_new" else 0)


def _norm_freed(c: _Backward, gemma_norm: int) -> None:
    """The norm between the blocks has run backward: its saved tensors are freed (and, in the
    Llama family, the residual add's two input gradients for their sum)."""
    arch, bs, h, e = c.arch, c.bs, c.arch.hidden_size, c.e
    if arch.norms_per_layer == 4:  # pre-feedforward norm (+ its output) and post-attention norm
        c.w.free(2 * gemma_norm + bs * h * e)
    elif arch.norm == "rmsnorm":
        c.w.free(bs * h * 4 + bs * 4 + (0 if c.lora else bs * h * e) + bs * h * e)  # norm's saved tensors
        # the residual add sums the norm's input gradient with the incoming one: the two are
        # freed for their sum (measured: 2 bsh e fewer than without this step, Llama family)
        c.w.free(2 * bs * h * e)
    else:
        c.w.free(2 * bs * h * e + 2 * bs * 4)


def _attention_backward(c: _Backward) -> None:
    """Attention: o-projection, the core (fused kernel, SDPA's math path or eager), the q/k/v
    projections."""
    arch, spec, w, bs, e = c.arch, c.spec, c.w, c.bs, c.e
    h, q, kv = arch.hidden_size, arch.q_dim, arch.kv_dim
    fused = fused_sdpa(arch, spec)
    c.wgrad(q, h)
    w.alloc(bs * q * e)
    # o-projection input (fused: it is the kept attention output)
    w.free(bs * q * e if not fused and c.saves_input("o") else 0)
    if fused:
        extra = bs * q * 4 if e != 4 else 0  # fp32 accumulators of the CPU/CUDA flash backward
        w.alloc(bs * (q + 2 * kv) * e + extra)
        w.free(extra + bs * q * e)
    elif sdpa_math(arch, spec):
        _math_attention_backward(c)
    else:
        _eager_attention_backward(c)
    c.wgrad(h, q + 2 * kv)


def _math_attention_backward(c: _Backward) -> None:
    """SDPA's math path, autograd order (TorchDispatchMode trace, torch 2.13 CPU): cast of the
    output gradient to fp32 (16-bit inputs), bmm backward, dropout, softmax, bmm backward,
    unscaling, casts of the q/k/v gradients back; tensors at ``a`` heads."""
    arch, w, b, bs, e = c.arch, c.w, c.b, c.bs, c.e
    q, kv = arch.q_dim, arch.kv_dim
    sq = b * arch.num_heads * c.s * c.s
    ae = attention_elem(arch, c.spec, e)
    p_attn = arch.attention_dropout > 0
    v_saved = bs * q * ae + (bs * (q + kv) * e if v_pins_fused_qkv(arch, c.spec, b) else 0)
    if ae != e:
        w.alloc(bs * q * ae)
        w.free(bs * q * e)
    w.alloc(sq * ae + bs * q * ae)  # grads of the (dropped) probabilities and of v
    w.free(bs * q * ae + sq * ae + v_saved)  # output grad, saved product and v
    if p_attn:
        w.alloc(sq * ae)  # grad x noise
        w.free(2 * sq * ae)
    w.alloc(sq * ae)  # softmax backward
    w.free(2 * sq * ae)
    w.alloc(2 * bs * q * ae)  # grads of the scaled q and k^T
    w.free(sq * ae + 2 * bs * q * ae)  # scores grad, saved scaled q and k^T
    w.alloc(bs * q * ae)  # unscaling
    w.free(bs * q * ae)
    if ae != e:
        w.alloc(3 * bs * q * e)
        w.free(3 * bs * q * ae)


def _eager_attention_backward(c: _Backward) -> None:
    """Eager attention: the probabilities' and v's gradients, the softmax backward (fp32 in the
    Llama family, with the cast back to the compute dtype), dropout and scale, q and k."""
    arch, w, b, bs, e = c.arch, c.w, c.b, c.bs, c.e
    q, kv = arch.q_dim, arch.kv_dim
    sq = b * arch.num_heads * c.s * c.s
    mb = dropout_mask_bytes(c.spec, e)
    p_attn = arch.attention_dropout > 0 and c.spec.task != "inference"
    pinned = bs * (q + kv) * e if v_pins_fused_qkv_eager(arch, b) else 0  # freed with v
    if arch.family.softmax_fp32 and e != 4:  # fp32 softmax, cast to the compute dtype
        w.alloc(sq * e + bs * q * e)  # grads of the probabilities and of v
        w.free(sq * e + bs * q * e + pinned)  # saved probabilities (cast) and v
        w.alloc(sq * 4)  # cast backward
        w.free(sq * e)
        w.alloc(sq * 4)  # softmax backward
        w.free(2 * sq * 4)  # its input gradient and the saved softmax output
        w.alloc(sq * e)  # back to the scores' dtype
        w.free(sq * 4)
    elif arch.family.softmax_fp32:
        w.alloc(sq * 4 + bs * q * e)
        w.free(bs * q * e + pinned)
        w.alloc(sq * 4)
        w.free(2 * sq * 4)
    else:
        w.alloc(sq * e + bs * q * e)  # grads of the (dropped) probabilities and of v
        w.free(sq * e + bs * q * e)
        if p_attn:
            w.alloc(sq * e)  # grad x mask
            w.free(sq * e + sq * mb)
        w.alloc(sq * e)  # softmax backward
        w.free(2 * sq * e)
        w.alloc(sq * e)  # scale backward
        w.free(sq * e)
    w.alloc(2 * bs * q * e)  # grads of q and k
    w.free(sq * e + 2 * bs * q * e)
