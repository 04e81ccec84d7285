"""The family description: one frozen dataclass of data per model family (see the package
docstring)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Family:
    """Description of one model family (frozen data; no behaviour).

    Config reading:
        ``model_types``: the ``model_type`` values it reads; ``verified``: checked against
        ``measure`` (MemTracker) -- an unverified description is a general fallback and the
        estimate says so. ``hidden``/``layers``/``heads``/``ffn``/``positions``: candidate
        field names, first present wins. ``ffn_default_mult``: MLP width as a multiple of
        ``h`` when no ffn field is present (GPT-2's ``n_inner = None`` means 4h); 0 = required.
        ``positions_required``: the learned position table needs its size.
        ``kv_heads``: "config" (``num_key_value_heads``, default MHA), "multi_query"
        (GPTBigCode's boolean, default true) or "mha".
        ``biases``: (q/k/v, o, MLP) -- a bool, or the name of a boolean config field
        defaulting to false. ``tie_default``: ``tie_word_embeddings`` when absent.
        ``activation_fields``/``activation_default``: the MLP activation.
        ``dropout_fields``: (attention, hidden, embedding) -> (field names, default).
        ``sliding``: "none", "all" (every layer when ``sliding_window`` is set), "alternate"
        (Gemma 2: every other layer), "qwen2" (``use_sliding_window`` and layers from
        ``max_window_layers``); a ``layer_types`` list always wins.
        ``softcapping``: reads ``final_logit_softcapping`` / ``attn_logit_softcapping``.
        ``moe_fields``: (experts, experts per token) field names, () for dense.

    Layout: ``kind`` "decoder" | "encoder"; ``gated_mlp``; ``norm`` "layernorm" | "rmsnorm";
    ``norm_offset_fp32``: Gemma's ``(1 + w)`` RMSNorm computing in fp32; ``norms_per_layer``
    (4 = sandwich norms); ``fused_qkv``/``fused_gate_up``; ``learned_positions``;
    ``type_vocab``: token-type embeddings (BERT); ``embedding_norm``: a LayerNorm on the
    embeddings instead of a final norm (BERT); ``embedding_scaled``: embeddings multiplied
    by ``sqrt(h)`` (a new tensor); ``pooler``: the bare model has a pooler (BERT);
    ``post_norm``: LayerNorm after the residual add, so the attention block's input is the
    previous norm's output (BERT); ``head_bias``: the LM head has a bias (Phi);
    ``parallel_residual``: attention and MLP both read the layer input (``x + attn(ln(x)) +
    mlp(ln(x))``; with ``norms_per_layer`` 1 they share one norm output: Phi, Falcon-7B).
    ``parallel_field``: boolean config field (default true) that keeps that parallel block;
    false = a sequential block with two norms (GPT-NeoX ``use_parallel_residual``, Falcon
    ``parallel_attn``: transformers ``GPTNeoXLayer.forward``, ``FalconDecoderLayer.__init__``).
    ``new_layout_field``: Falcon's ``new_decoder_architecture``: KV heads from
    ``num_kv_heads``, ``num_ln_in_parallel_attn`` norms (default 2) in the parallel block, and
    k / v expanded to every query head before attention (``FalconAttention._split_heads``:
    ``broadcast_to`` + ``flatten``, a copy each).
    ``alibi_field``: boolean config field for ALiBi (Falcon ``alibi``): no rotary, and the
    model folds the bias into a ``(b, a, s, s)`` float mask for every attention path
    (``FalconModel.forward``: ``masked_fill(alibi / sqrt(d), causal_mask < -1, min)``).
    ``qk_norm``: RMSNorm on queries and keys before rotary -- "head" (per head, weight of
    ``head_dim``: Qwen3, Gemma 3), "full" (over the whole projection: OLMo 2) or "none".
    ``norm_weight_fp32``: the RMSNorm multiplies its weight in fp32 and casts after
    (``(w * x).to(dtype)``, OLMo 2), so it saves an fp32 normalized copy.
    ``sdpa_broadcast_kv``: the family calls SDPA with keys/values at the KV head count and no
    ``enable_gqa`` (Falcon), which sends MQA/GQA shapes to the math path.
    ``shared_expert_field``: config field with the width of an always-on gated MLP beside
    the routed experts (Qwen2-MoE ``shared_expert_intermediate_size``); ``shared_expert_gate``:
    its output is scaled by ``sigmoid(Linear(h, 1))``.
    ``position_offset``: extra rows of the learned position table (OPT: 2);
    ``positions_from_mask``: position ids are computed per sequence (``cumsum`` of the mask,
    ``b s`` int64, OPT) rather than one ``s`` row; ``embed_proj_field``: config field with
    the embedding width when it differs from ``h`` (OPT ``word_embed_proj_dim``: project_in /
    project_out Linears); ``pre_norm_field``: boolean config field, false = post-norm layers
    and no final norm (OPT ``do_layer_norm_before``).
    ``mla``: multi-head latent attention (DeepSeek-V2/V3: low-rank ``q_a``/``q_b`` and
    ``kv_a``/``kv_b`` projections with RMSNorms on the latents, read from ``q_lora_rank``,
    ``kv_lora_rank``, ``qk_nope_head_dim``, ``qk_rope_head_dim``, ``v_head_dim``);
    ``dense_first_field``: config field counting leading layers with a dense MLP instead of
    experts (``first_k_dense_replace``). ``shared_expert_field`` may be a product ``a*b``.
    ``rotary_sets``: rotary tables per forward (Gemma 3: one per attention kind, local and
    global bases). ``sliding`` "pattern": every ``sliding_window_pattern``-th layer is full
    (Gemma 3). Partial rotary embeddings are read from the config (``partial_rotary_factor`` /
    ``rotary_pct``).

    Saved-tensor rules (each measured with MemTracker, see the component docstrings):
        ``eager_qkv``: what eager attention's batched matmuls keep for q, k, v --
        "fused_bmm" (GPT-2: copies of the heads of the fused ``c_attn`` output, k/v at KV
        width), "separate" (BERT: three ``b s q`` tensors), "repeat_kv" (Llama family: q
        and ``repeat_kv`` copies at ``a`` heads). ``softmax_fp32``: eager softmax in fp32
        then cast (Llama family) vs in the scores' dtype (GPT-2, BERT).
        ``amp_mask_promotes_softmax``: under autocast the fp32 causal mask promotes the
        scores to fp32 (GPT-2). ``amp_separate_qkv_casts``: separate q/k/v Linears each save
        a 16-bit cast of the fp32 input under autocast (BERT).
        ``math_v_view_pins_fused_qkv``: on SDPA's math path at b = 1 the saved v is a view
        pinning the fused qkv output (GPT-2). ``sdpa``: transformers has an SDPA path (Gemma 2
        falls back to eager). ``mask_per_attention_kind``: one float mask per attention kind
        (sliding / full) is built even for SDPA. ``attn_output_alive_in_mlp``: the block
        keeps its attention output bound while the MLP runs (GPT2Block).
        ``buffers``: "rotary" (``inv_freq`` pair), "position_ids" (BERT's int64 id buffers).
        ``rotary_concat``: the rotary embedding splits each head into rotated and pass-through
        dims and joins them with ``torch.cat((rot, pass), -1)`` (GPT-NeoX, Phi, StableLM's
        ``apply_rotary_pos_emb``), so q and k are new ``(b, a, s, d)``-contiguous tensors
        rather than views in the projection's ``(b, s, a, d)`` layout (Falcon gets the same
        layout from ``transpose(1, 2).reshape(b, a, s, d)`` in ``FalconAttention.forward``,
        rotary or ALiBi alike); an SDPA kernel that
        writes its output in the query's layout then makes the o-projection copy it.
    """

    name: str
    model_types: tuple[str, ...]
    kind: str = "decoder"
    verified: bool = True
    # ----- config reading
    hidden: tuple[str, ...] = ("hidden_size", "n_embd", "d_model")
    layers: tuple[str, ...] = ("num_hidden_layers", "n_layer", "num_layers")
    heads: tuple[str, ...] = ("num_attention_heads", "n_head")
    ffn: tuple[str, ...] = ("intermediate_size", "n_inner", "ffn_dim")
    ffn_default_mult: int = 0
    positions: tuple[str, ...] = ("max_position_embeddings", "n_positions")
    positions_required: bool = False
    kv_heads: str = "config"
    biases: tuple[bool | str, bool | str, bool | str] = ("attention_bias", "attention_bias", "mlp_bias")
    tie_default: bool = False
    activation_fields: tuple[str, ...] = ("hidden_activation", "hidden_act")
    activation_default: str = "silu"
    dropout_fields: tuple[tuple[tuple[str, ...], float], ...] = ((("attention_dropout",), 0.0), ((), 0.0), ((), 0.0))
    sliding: str = "none"
    softcapping: bool = False
    moe_fields: tuple[str, ...] = ()
    # ----- layout
    gated_mlp: bool = True
    norm: str = "rmsnorm"
    norm_offset_fp32: bool = False
    norms_per_layer: int = 2
    fused_qkv: bool = False
    fused_gate_up: bool = False
    learned_positions: bool = False
    type_vocab: bool = False
    embedding_norm: bool = False
    embedding_scaled: bool = False
    pooler: bool = False
    head_bias: bool = False
    qk_norm: str = "none"
    norm_weight_fp32: bool = False
    rotary_sets: int = 1
    sdpa_broadcast_kv: bool = False
    shared_expert_field: str = ""
    position_offset: int = 0
    mla: bool = False
    dense_first_field: str = ""
    positions_from_mask: bool = False
    embed_proj_field: str = ""
    pre_norm_field: str = ""
    shared_expert_gate: bool = False
    parallel_residual: bool = False
    parallel_field: str = ""
    new_layout_field: str = ""
    alibi_field: str = ""
    post_norm: bool = False
    # ----- saved-tensor rules
    eager_qkv: str = "repeat_kv"
    softmax_fp32: bool = True
    amp_mask_promotes_softmax: bool = False
    amp_separate_qkv_casts: bool = False
    math_v_view_pins_fused_qkv: bool = False
    sdpa: bool = True
    mask_per_attention_kind: bool = False
    attn_output_alive_in_mlp: bool = False
    buffers: str = "rotary"
    rotary_concat: bool = False
    notes: tuple[str, ...] = field(default=())
