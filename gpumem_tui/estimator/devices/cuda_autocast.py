"""CUDA autocast: which ops run in fp32 (pure Python; torch 2.13's op lists).

Source: ``aten/src/ATen/autocast_mode.cpp`` (``TORCH_LIBRARY_IMPL(aten, Autocast, m)``: the
``KERNEL_CUDA(..., fp32)`` and ``lower_precision_fp`` registrations) and the PyTorch "Automatic
Mixed Precision package" page, "CUDA Ops that can autocast to float32". The CPU lists differ
(``AutocastCPU``): ``pow``, ``softmax``, ``layer_norm`` and others are not fp32 there, which is
why the CPU profile's ground truth does not carry over.

Under ``torch.autocast("cuda", dtype=bf16)`` an op on :data:`FP32_OPS` casts its floating
inputs to fp32 and returns fp32; elementwise ops that follow it (add, mul, tanh) promote and
stay fp32 (type promotion), so one fp32-listed op at the head of a chain turns the chain fp32.
Ops on :data:`LOWER_PRECISION_OPS` run in the autocast dtype and save their 16-bit input casts.
"""

from __future__ import annotations

#: CUDA ops autocast runs in fp32 (autocast_mode.cpp, KERNEL_CUDA ... fp32)
FP32_OPS = frozenset({
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal",
    "rsqrt", "sinh", "tan", "pow", "softplus", "layer_norm", "native_layer_norm", "group_norm",
    "frobenius_norm", "nuclear_norm", "cosine_similarity", "poisson_nll_loss", "cosine_embedding_loss",
    "nll_loss", "nll_loss2d", "hinge_embedding_loss", "kl_div", "l1_loss", "smooth_l1_loss", "huber_loss",
    "mse_loss", "margin_ranking_loss", "multilabel_margin_loss", "soft_margin_loss", "triplet_margin_loss",
    "multi_margin_loss", "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm",
    "logsumexp", "softmax", "log_softmax", "sum", "prod", "cumprod", "cumsum", "norm",
})

#: CUDA ops autocast runs in the 16-bit dtype (autocast_mode.cpp, lower_precision_fp)
LOWER_PRECISION_OPS = frozenset({
    "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
    "convolution", "prelu", "addmm", "addmv", "addr", "matmul", "einsum", "mm", "mv", "linear", "addbmm",
    "baddbmm", "bmm", "chain_matmul", "linalg_multi_dot", "scaled_dot_product_attention",
    "_thnn_fused_lstm_cell", "_thnn_fused_gru_cell", "lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell",
})


def runs_fp32(op: str) -> bool:
    """True when ``op`` (an aten op name) runs in fp32 under CUDA autocast."""
    return op in FP32_OPS


def gelu_new_saved_bytes_per_element(compute_bytes: int, cuda_amp: bool) -> int:
    """Bytes that HF ``NewGELUActivation`` (``0.5 x (1 + tanh(c (x + 0.044715 x^3))))``) saves
    per element of its ``b s f`` input, counting the input as held by the chain.

    Without CUDA autocast every tensor is in the compute dtype: ``pow``'s input, ``tanh``'s
    output, ``0.5 x`` and ``1 + tanh`` (saved by the final product): ``4 e``. Under CUDA
    autocast ``pow`` is fp32 (:data:`FP32_OPS`): it saves its fp32 cast of ``x``, the chain
    after it is fp32 by promotion (``tanh`` output and ``1 + tanh`` fp32), ``0.5 x`` stays
    16-bit: ``4 + 4 + e + 4``. (The product's fp32 output is cast to 16 bits by the next
    Linear, which saves that cast: counted with the Linear's input, ``e``.)
    Measured: H100 ``dev-gpt2-medium-amp-b4-s1024-sdpa`` (``dev_truth_h100.jsonl``).
    """
    if cuda_amp and compute_bytes < 4:
        return 4 + 4 + compute_bytes + 4
    return 4 * compute_bytes
