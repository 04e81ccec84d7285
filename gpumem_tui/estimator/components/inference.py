"""Activations of an inference step: the transient working set of a no-grad forward (bytes).
The KV cache is in :mod:`.kv_cache`, the logits in :mod:`.logits_loss`."""

from __future__ import annotations

from gpumem_tui.estimator.architecture import ModelArchitecture
from gpumem_tui.estimator.components.kernels import fused_sdpa
from gpumem_tui.estimator.precision import precision
from gpumem_tui.estimator.spec import TrainingSpec


def inference_working_bytes(arch: ModelArchitecture, spec: TrainingSpec, b: int, s: int) -> int:
    """Peak transient activations of a no-grad forward over ``s`` new tokens (bytes).

    Only one layer's temporaries live at a time without autograd. Live at the peak: the token
    embeddings (``transformers`` keeps ``inputs_embeds`` for the whole forward), the residual
    stream and the norm output (``3 bsh e``), learned position embeddings, the float causal
    mask of eager attention (``b s^2 e``), and the larger of
    - attention: eager Llama family -- q, the ``repeat_kv`` copies of k and v (GQA only) and the
      masked scores (``e``) with their fp32 copy and fp32 softmax (``b a s^2 (e + 8)``); eager
      GPT-2/BERT -- the q/k/v projections and two ``b a s^2 e`` score tensors (matmul output and
      its scaled copy); fused kernels -- q, k, v and the output;
    - MLP: gate, up and their product (``3 bsf e``; plain MLP: ``2 bsf e``) plus the
      post-attention residual.
    Measured with MemTracker on the meta device (gpumem-tui measure, prefill peaks).
    """
    fused = fused_sdpa(arch, spec)
    attn, mask = _attention_working(arch, spec, b, s, fused)
    mlp = _mlp_working(arch, spec, b, s, fused)
    return int(_resident_working(arch, spec, b, s) + mask + max(attn, mlp) / spec.tp)


def _resident_working(arch: ModelArchitecture, spec: TrainingSpec, b: int, s: int) -> int:
    """What is alive through every layer: the token embeddings, the residual stream and the
    norm output (``3 bsh e``), learned position embeddings or the rotary cos / sin tables."""
    e = precision(spec).compute
    bs, h = b * s, arch.hidden_size
    base = 3 * bs * h * e + (s * h * e if arch.learned_positions and arch.kind == "decoder" else 0)
    if not arch.learned_positions and arch.kind == "decoder":
        # rotary cos and sin (``(1, s, d)`` in the compute dtype) and the position ids, made
        # once per forward and passed to every layer (transformers ``LlamaModel.forward``;
        # measured, MemTracker, CPU SDPA prefill: 2 s d x 4 + s x 8 in fp32)
        base += arch.family.rotary_sets * 2 * s * arch.rotary_dims * e + s * 8
    if arch.num_layers == 1 and arch.kind == "decoder" and not arch.learned_positions and not arch.family.embedding_scaled:
        # the only layer's input is the embedding output itself (Llama-style models pass
        # ``inputs_embeds`` on unchanged; GPT-2 adds positions and Gemma 2 scales: new tensors)
        base -= bs * h * e
    return base


def _attention_working(arch: ModelArchitecture, spec: TrainingSpec, b: int, s: int, fused: bool) -> tuple[int, int]:
    """``(attention temporaries, float masks)`` of one layer's attention: a fused kernel's q,
    k, v and output; eager attention's projections and score tensors, and its float causal
    mask(s), alive through the whole forward."""
    e = precision(spec).compute
    bs = b * s
    q, kv = arch.q_dim, arch.kv_dim
    sq = b * arch.num_heads * s * s
    if fused:
        return bs * (q + 2 * kv) * e + bs * q * e, 0
    # one float mask per attention kind (Gemma 2: sliding-window and full layers; see
    # checkpoint_mask_bytes), alive through the whole forward
    kinds = 2 if arch.family.mask_per_attention_kind and 0 < arch.sliding_layers < arch.num_layers else 1
    mask = kinds * b * s * s * e if arch.kind == "decoder" else 0
    if arch.family.softmax_fp32:
        rep = 2 * bs * q * e if arch.num_kv_heads != arch.num_heads else 0
        # rotated q, the repeat_kv copies of k and v (GQA), the masked scores, their fp32
        # copy and the fp32 softmax (pre-rotary k and the v projection are dropped once
        # the cache holds its copies; measured, MemTracker prefill, Llama MHA and GQA)
        attn = bs * q * e + rep + sq * (e + 4 + (4 if e != 4 else 0))
        if arch.fused_qkv:
            # Phi-3's fused ``qkv_proj`` output stays bound (``qkv``) through the attention,
            # q/k/v being slices of it (transformers ``Phi3Attention.forward``; measured,
            # MemTracker prefill: ``mm [b s, q + 2 kv]`` next to the rotated q)
            attn += bs * (q + 2 * kv) * e
    else:
        attn = bs * (q + 2 * kv) * e + 2 * sq * e
    return attn, mask


def _mlp_working(arch: ModelArchitecture, spec: TrainingSpec, b: int, s: int, fused: bool) -> float:
    """One layer's MLP temporaries (bytes; a float for MoE's routed share) with what else is
    alive while it runs: the layer input and the post-attention residual, GPT-2's bound
    attention output, eager attention's returned probabilities."""
    e = precision(spec).compute
    bs = b * s
    h, f = arch.hidden_size, arch.intermediate_size
    sq = b * arch.num_heads * s * s
    # MoE: transformers runs the experts one after another, each on its share of the tokens
    # (k/E of them with uniform routing), into an accumulator of the layer output
    mult = arch.experts_per_token / arch.num_experts if arch.num_experts else 1
    moe_acc = bs * h * e if arch.num_experts else 0
    # during the MLP the layer input (still bound in the model's layer loop) and the
    # post-attention residual are both alive: one more bsh e than during attention
    # gelu_new (GPT-2) runs its tanh formula op by op: the Linear output, 0.5 x and two
    # intermediates are alive at once (4 bsf; measured, CPU SDPA prefill)
    # a fused gate_up projection (Phi-3) keeps its whole 2 bsf output (gate and up are chunks
    # of it) next to act(gate) and the product: 4 bsf (``Phi3MLP.forward``; note 18)
    n_mlp = (4 if arch.fused_gate_up else 3) if arch.gated_mlp else (4 if arch.activation == "gelu_new" else 2)
    mlp = n_mlp * bs * f * e * mult + bs * h * e * spec.tp + moe_acc
    if arch.family.attn_output_alive_in_mlp:
        # GPT2Block keeps the attention output bound (``attn_output``) next to the residual sum
        # while its MLP runs (transformers ``GPT2Block.forward``; measured, MemTracker prefill:
        # ``addmm [b s, h]`` of c_proj alive at the MLP peak, note 17)
        mlp += bs * h * e
    if not fused and arch.kind == "decoder":
        # eager attention returns its probabilities (compute dtype: the fp32 softmax output for
        # fp32, else its cast) and the decoder layer binds them to ``_`` until it returns
        # (transformers ``LlamaDecoderLayer.forward``: ``hidden_states, _ = self.self_attn(...)``;
        # ``GPT2Block.forward``: ``attn_output, _ = self.attn(...)``), so they are alive
        # through the MLP of the same layer (measured, MemTracker prefill, notes 14 and 18)
        mlp += sq * e
    return mlp
