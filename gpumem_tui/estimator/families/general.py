"""The closest general description for a ``model_type`` without an exact one.

Most decoders on the Hub are built from the same parts as the exact families: rotary
positions, RMSNorm or LayerNorm, a gated (SwiGLU-style) or plain MLP, MHA/GQA/MQA attention,
the shared eager attention of current ``transformers`` (``eager_attention_forward``: q and
``repeat_kv`` copies of k and v, softmax in fp32 then cast; ``transformers/models/llama/
modeling_llama.py``). :func:`general_family` picks the norm from the epsilon field the config
carries (``rms_norm_eps`` -> RMSNorm, else LayerNorm) and the MLP from the activation
(SiLU/Swish, or an RMSNorm model without a classic ReLU/GELU -> gated, otherwise plain); the
MLP width defaults to 4h when no width field is present (GPT-style configs). The estimate then says which description it used and that it is not verified for
the family.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gpumem_tui.estimator.families.description import Family

#: model types that are encoder-decoder (refused by name; a config may also say
#: ``is_encoder_decoder: true``)
ENCODER_DECODER_TYPES = frozenset({
    "t5", "mt5", "umt5", "longt5", "bart", "mbart", "pegasus", "pegasus_x", "marian", "plbart", "blenderbot",
    "blenderbot_small", "led", "prophetnet", "fsmt", "m2m_100", "nllb_moe", "switch_transformers", "whisper",
    "t5gemma", "t5gemma2", "mvp", "bigbird_pegasus", "seamless_m4t", "speecht5", "encoder_decoder",
})

#: model types that are state-space / recurrent models without attention heads (Mamba:
#: ``transformers/models/mamba/configuration_mamba.py`` has ``state_size``, ``conv_kernel``,
#: ``expand`` and no ``num_attention_heads``); refused by name, or by a config that has state
#: fields and no attention heads. Hybrids with attention layers (Jamba, Bamba) are not here.
STATE_SPACE_TYPES = frozenset({"mamba", "mamba2", "falcon_mamba", "rwkv", "xlstm"})
#: config fields only state-space models have
STATE_SPACE_FIELDS = ("state_size", "ssm_state_size", "d_state", "ssm_cfg", "time_step_rank")
#: config fields that give the attention heads (any family)
HEAD_FIELDS = ("num_attention_heads", "n_head", "num_heads", "n_heads", "encoder_attention_heads")

#: model types read as BERT-style encoders (unverified): same layout as BERT in transformers
ENCODER_TYPES = frozenset({"roberta", "xlm-roberta", "camembert", "electra", "ernie", "megatron-bert"})

_BASE = Family(
    name="general decoder", model_types=(), verified=False,
    biases=("attention_bias|bias|use_bias", "attention_bias|bias|use_bias", "mlp_bias|bias|use_bias"),
    dropout_fields=((("attention_dropout", "attn_pdrop"), 0.0), (("hidden_dropout", "resid_pdrop"), 0.0),
                    (("embd_pdrop",), 0.0)),
    activation_fields=("hidden_activation", "hidden_act", "activation_function", "activation"),
    sliding="config", ffn=("intermediate_size", "n_inner", "ffn_dim", "ffn_hidden_size"), ffn_default_mult=4,
    moe_fields=("num_local_experts|num_experts|n_routed_experts", "num_experts_per_tok|moe_top_k|top_k"),
)

_GATED_ACTS = ("silu", "swish", "swiglu")
_PLAIN_ACTS = ("relu", "gelu_new", "gelu")


def general_family(config: dict[str, Any]) -> Family:
    """The general description closest to ``config`` (see the module docstring); its
    ``name`` spells out the parts chosen, e.g. "general decoder (RMSNorm, gated MLP)"."""
    act = next((str(config[n]) for n in _BASE.activation_fields if config.get(n)), "")
    norm = "rmsnorm" if "rms_norm_eps" in config else "layernorm"
    # RMSNorm decoders are gated (Llama lineage: SwiGLU, GeGLU) unless the activation is one
    # of the classic plain-MLP ones
    gated = act.lower() in _GATED_ACTS or (norm == "rmsnorm" and act.lower() not in _PLAIN_ACTS)
    moe = any(config.get(n) for n in ("num_local_experts", "num_experts", "n_routed_experts"))
    parts = ["RMSNorm" if norm == "rmsnorm" else "LayerNorm", "gated MLP" if gated else "plain MLP"]
    if moe:
        parts.append("mixture of experts, uniform routing")
    return replace(
        _BASE, name=f"general decoder ({', '.join(parts)})", norm=norm, gated_mlp=gated,
        activation_default=act or ("silu" if gated else "gelu"), moe_fields=_BASE.moe_fields if moe else (),
    )
