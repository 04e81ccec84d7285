"""The family descriptions (data). Each entry cites the ``transformers`` module it describes;
the saved-tensor rules were checked with MemTracker (``gpumem-tui measure``, torch 2.13 CPU
build and meta device; ``benchmarks/data``)."""

from __future__ import annotations

from gpumem_tui.estimator.families.description import Family

#: GPT-2 (``GPT2LMHeadModel``): fused ``c_attn`` Conv1D, learned positions, pre-LayerNorm,
#: ``gelu_new`` 4h MLP, dropout 0.1 everywhere, tied head.
GPT2 = Family(
    name="gpt2", model_types=("gpt2",),
    hidden=("n_embd", "hidden_size"), layers=("n_layer", "num_hidden_layers"), heads=("n_head", "num_attention_heads"),
    ffn=("n_inner",), ffn_default_mult=4, positions=("n_positions", "max_position_embeddings"), positions_required=True,
    kv_heads="mha", biases=(True, True, True), tie_default=True,
    activation_fields=("activation_function",), activation_default="gelu_new",
    dropout_fields=((("attn_pdrop",), 0.1), (("resid_pdrop",), 0.1), (("embd_pdrop",), 0.1)),
    gated_mlp=False, norm="layernorm", fused_qkv=True, learned_positions=True,
    eager_qkv="fused_bmm", softmax_fp32=False, amp_mask_promotes_softmax=True,
    math_v_view_pins_fused_qkv=True, attn_output_alive_in_mlp=True, buffers="none",
)

#: GPTBigCode (StarCoder, ``GPTBigCodeForCausalLM``): GPT-2 layout with multi-query attention.
GPT_BIGCODE = Family(
    name="gpt_bigcode", model_types=("gpt_bigcode",),
    hidden=GPT2.hidden, layers=GPT2.layers, heads=GPT2.heads, ffn=GPT2.ffn, ffn_default_mult=4,
    positions=GPT2.positions, positions_required=True, kv_heads="multi_query", biases=(True, True, True),
    tie_default=True, activation_fields=GPT2.activation_fields, activation_default="gelu_new",
    dropout_fields=GPT2.dropout_fields, gated_mlp=False, norm="layernorm", fused_qkv=True, learned_positions=True,
    eager_qkv="fused_bmm", softmax_fp32=False, amp_mask_promotes_softmax=True,
    attn_output_alive_in_mlp=True, buffers="none",
)

#: BERT (``BertForMaskedLM`` / ``BertModel``): post-LayerNorm encoder, separate q/k/v,
#: learned absolute + token-type embeddings with an embedding LayerNorm, pooler.
BERT = Family(
    name="bert", model_types=("bert",), kind="encoder",
    hidden=("hidden_size",), layers=("num_hidden_layers",), heads=("num_attention_heads",), ffn=("intermediate_size",),
    positions=("max_position_embeddings",), positions_required=True, kv_heads="mha", biases=(True, True, True),
    tie_default=True, activation_fields=("hidden_act",), activation_default="gelu",
    dropout_fields=((("attention_probs_dropout_prob",), 0.1), (("hidden_dropout_prob",), 0.1),
                    (("hidden_dropout_prob",), 0.1)),
    gated_mlp=False, norm="layernorm", learned_positions=True, type_vocab=True, embedding_norm=True, pooler=True,
    post_norm=True, eager_qkv="separate", softmax_fp32=False, amp_separate_qkv_casts=True, buffers="position_ids",
)

#: Llama (``LlamaForCausalLM``): GQA, rotary, RMSNorm, SwiGLU; ``sliding_window`` ignored.
LLAMA = Family(name="llama", model_types=("llama",))

#: Mistral (``MistralForCausalLM``): Llama layout without biases, sliding window on every layer.
MISTRAL = Family(name="mistral", model_types=("mistral",), biases=(False, False, False), sliding="all")

#: Mixtral (``MixtralForCausalLM``): Mistral attention, MoE with a router and all experts of a
#: layer in one 3-D ``gate_up_proj`` / ``down_proj`` parameter (``MixtralExperts``).
MIXTRAL = Family(
    name="mixtral", model_types=("mixtral",), biases=(False, False, False), sliding="all",
    moe_fields=("num_local_experts", "num_experts_per_tok"), fused_gate_up=True,
)

#: Qwen2 (``Qwen2ForCausalLM``): q/k/v biases; sliding window only with ``use_sliding_window``.
QWEN2 = Family(name="qwen2", model_types=("qwen2",), biases=(True, False, False), sliding="qwen2")

#: Phi-3 (``Phi3ForCausalLM``): fused ``qkv_proj`` and ``gate_up_proj``, residual and
#: embedding dropout fields.
PHI3 = Family(
    name="phi3", model_types=("phi3",), biases=(False, False, False), sliding="all", fused_qkv=True,
    fused_gate_up=True,
    dropout_fields=((("attention_dropout",), 0.0), (("resid_pdrop",), 0.0), (("embd_pdrop",), 0.0)),
)

#: Gemma 2 (``Gemma2ForCausalLM``): sandwich ``(1 + w)`` RMSNorms in fp32, alternating sliding /
#: full layers, logit soft-capping, scaled embeddings, tied head, no SDPA path (eager).
GEMMA2 = Family(
    name="gemma2", model_types=("gemma2",), biases=("attention_bias", "attention_bias", False), tie_default=True,
    sliding="alternate", softcapping=True, norm_offset_fp32=True, norms_per_layer=4, embedding_scaled=True,
    sdpa=False, mask_per_attention_kind=True,
)

#: Phi-1/1.5/2 (``PhiForCausalLM``): one LayerNorm shared by a parallel attention + MLP block,
#: biases everywhere (LM head too), ``gelu_new`` MLP, partial rotary, residual dropout.
PHI = Family(
    name="phi", model_types=("phi",), biases=(True, True, True), norm="layernorm", norms_per_layer=1,
    parallel_residual=True, gated_mlp=False, activation_fields=("hidden_act",), activation_default="gelu_new",
    dropout_fields=((("attention_dropout",), 0.0), (("resid_pdrop",), 0.0), (("embd_pdrop",), 0.0)), head_bias=True,
    rotary_concat=True,
)

#: Qwen3 (``Qwen3ForCausalLM``): Qwen2 without q/k/v biases, with per-head q/k RMSNorms.
QWEN3 = Family(name="qwen3", model_types=("qwen3",), qk_norm="head", sliding="qwen2")

#: OLMo 2 (``Olmo2ForCausalLM``): RMSNorms after attention and MLP (not before), q/k RMSNorms
#: over the whole projections; every RMSNorm multiplies its weight in fp32 (``Olmo2RMSNorm``).
OLMO2 = Family(name="olmo2", model_types=("olmo2",), qk_norm="full", norm_weight_fp32=True)

#: StableLM (``StableLmForCausalLM``): LayerNorms, SwiGLU, partial rotary, optional q/k/v biases.
STABLELM = Family(name="stablelm", model_types=("stablelm",), norm="layernorm", biases=("use_qkv_bias", False, False),
                  rotary_concat=True)

#: GPT-NeoX / Pythia (``GPTNeoXForCausalLM``): fused ``query_key_value`` with biases, two
#: LayerNorms read by a parallel attention + MLP block, GELU MLP, partial rotary, untied head.
GPT_NEOX = Family(
    name="gpt_neox", model_types=("gpt_neox",), norm="layernorm", biases=(True, True, True), fused_qkv=True,
    gated_mlp=False, parallel_residual=True, activation_fields=("hidden_act",), activation_default="gelu",
    dropout_fields=((("attention_dropout",), 0.0), (("hidden_dropout",), 0.0), ((), 0.0)), rotary_concat=True,
    parallel_field="use_parallel_residual",
)

#: Qwen3-MoE (``Qwen3MoeForCausalLM``): Qwen3 attention (per-head q/k norms), every layer a
#: mixture of experts (router + experts stored as 3-D ``gate_up_proj`` / ``down_proj``).
QWEN3_MOE = Family(
    name="qwen3_moe", model_types=("qwen3_moe",), qk_norm="head", sliding="qwen2",
    moe_fields=("num_experts", "num_experts_per_tok"), fused_gate_up=True,
)

#: Gemma 3 text (``Gemma3ForCausalLM``): the Gemma 2 layout with per-head ``(1 + w)`` q/k norms,
#: five sliding-window layers per global one, a rotary table per attention kind, an SDPA path.
GEMMA3 = Family(
    name="gemma3_text", model_types=("gemma3_text",), biases=("attention_bias", "attention_bias", False),
    tie_default=True, sliding="pattern", softcapping=True, norm_offset_fp32=True, norms_per_layer=4,
    embedding_scaled=True, mask_per_attention_kind=True, qk_norm="head", rotary_sets=2,
)

#: Falcon-7B style (``FalconForCausalLM``, ``parallel_attn``, old decoder architecture): one
#: LayerNorm shared by a parallel attention + MLP block, fused multi-query ``query_key_value``,
#: its own eager attention (broadcast matmul over the single KV head, softmax in the compute
#: dtype), GELU 4h MLP, tied head.
FALCON = Family(
    name="falcon", model_types=("falcon",), norm="layernorm", norms_per_layer=1, parallel_residual=True,
    fused_qkv=True, gated_mlp=False, biases=("bias", "bias", "bias"), tie_default=True,
    ffn=("ffn_hidden_size",), ffn_default_mult=4, activation_fields=("activation",), activation_default="gelu",
    dropout_fields=((("attention_dropout",), 0.0), (("hidden_dropout",), 0.0), ((), 0.0)),
    eager_qkv="fused_bmm", softmax_fp32=False, sdpa_broadcast_kv=True,
    parallel_field="parallel_attn", new_layout_field="new_decoder_architecture", alibi_field="alibi",
    rotary_concat=True,
)

#: Qwen2-MoE / Qwen1.5-MoE (``Qwen2MoeForCausalLM``): Qwen2 attention (q/k/v biases), routed
#: experts plus a sigmoid-gated shared expert in every layer.
QWEN2_MOE = Family(
    name="qwen2_moe", model_types=("qwen2_moe",), biases=(True, False, False), sliding="qwen2",
    moe_fields=("num_experts", "num_experts_per_tok"), fused_gate_up=True,
    shared_expert_field="shared_expert_intermediate_size", shared_expert_gate=True,
)

#: OPT (``OPTForCausalLM``): learned positions with an offset of 2 rows computed per sequence,
#: LayerNorm before (125m, 1.3b, ...) or after (350m) each block, ReLU 4h MLP, dropout 0.1,
#: llama-style eager attention (fp32 softmax), optional ``word_embed_proj_dim`` projections,
#: tied head.
OPT = Family(
    name="opt", model_types=("opt",), norm="layernorm", biases=("enable_bias=true",) * 3,
    ffn=("ffn_dim",), positions=("max_position_embeddings",), positions_required=True, learned_positions=True,
    position_offset=2, positions_from_mask=True, embed_proj_field="word_embed_proj_dim",
    pre_norm_field="do_layer_norm_before", gated_mlp=False, tie_default=True, kv_heads="mha",
    activation_fields=("activation_function",), activation_default="relu",
    dropout_fields=((("attention_dropout",), 0.0), (("dropout",), 0.1), ((), 0.0)), buffers="none",
)

#: DeepSeek-V3 (``DeepseekV3ForCausalLM``): multi-head latent attention, leading dense layers,
#: then routed experts (3-D ``gate_up_proj`` / ``down_proj``) plus ``n_shared_experts`` shared
#: ones; MLA's values are narrower than its keys, so SDPA takes the math path.
DEEPSEEK_V3 = Family(
    name="deepseek_v3", model_types=("deepseek_v3",), mla=True,
    moe_fields=("n_routed_experts", "num_experts_per_tok"), fused_gate_up=True,
    shared_expert_field="n_shared_experts*moe_intermediate_size", dense_first_field="first_k_dense_replace",
)

#: A bare parameter count (``--params``): no config, a GPT-style guess (never verified).
PARAMS = Family(name="params", model_types=("params",), verified=False, gated_mlp=False, norm="layernorm")

KNOWN: tuple[Family, ...] = (GPT2, GPT_BIGCODE, BERT, LLAMA, MISTRAL, MIXTRAL, QWEN2, PHI3, GEMMA2, PHI, QWEN3, OLMO2, STABLELM, GPT_NEOX, QWEN3_MOE, GEMMA3, FALCON, QWEN2_MOE, OPT, DEEPSEEK_V3)

BY_MODEL_TYPE: dict[str, Family] = {mt: fam for fam in KNOWN for mt in fam.model_types}
