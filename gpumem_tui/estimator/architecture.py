"""Model architecture from a Hugging Face ``config.json`` (no network) or a catalogue name.

A :class:`ModelArchitecture` holds the few shape numbers the estimator needs -- hidden size
``h``, layers ``L``, heads ``a``, KV heads ``k``, ``head_dim``, MLP width ``f``, vocabulary
``V`` -- plus the details that change byte counts: gated (SwiGLU/GeGLU) or plain MLP,
LayerNorm or RMSNorm, biases, learned or rotary positions, tied or untied LM head, sliding
window, mixture of experts, dropout. Parameter counts are exact: they count every tensor
the Hugging Face ``transformers`` implementation of that ``model_type`` creates
(embeddings, positions, biases, norms, LM head), so GPT-2 is 124,439,808 and Llama-3.1-8B
8,030,261,248.

Field names differ per ``model_type`` (``n_embd``/``hidden_size``, ``n_layer``/
``num_hidden_layers``, ...); one reader reads every config by the field names and defaults
of its family description (:mod:`gpumem_tui.estimator.families`). Errors raise
:class:`ArchitectureError` naming the model type or the missing field.
"""

from __future__ import annotations

import difflib
import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gpumem_tui.estimator.families import Family, family_for
from gpumem_tui.estimator.families.general import (
    ENCODER_DECODER_TYPES,
    ENCODER_TYPES,
    HEAD_FIELDS,
    STATE_SPACE_FIELDS,
    STATE_SPACE_TYPES,
    general_family,
)
from gpumem_tui.estimator.families.known import BERT, BY_MODEL_TYPE, PARAMS

CATALOGUE_DIR = Path(__file__).with_name("catalogue")

#: model types with a reader here; others are rejected by name.
SUPPORTED_MODEL_TYPES = tuple(BY_MODEL_TYPE)

#: extra names accepted for catalogue entries (lower case, org prefix removed).
_ALIASES = {
    "gpt2-124m": "gpt2",
    "gpt2-small": "gpt2",
    "gpt2-355m": "gpt2-medium",
    "gpt2-774m": "gpt2-large",
    "gpt2-1.5b": "gpt2-xl",
    "bert-base": "bert-base-uncased",
    "bert-large": "bert-large-uncased",
    "llama-3.2-1b-instruct": "llama-3.2-1b",
    "llama-3.2-3b-instruct": "llama-3.2-3b",
    "llama-3.1-8b-instruct": "llama-3.1-8b",
    "meta-llama-3.1-8b": "llama-3.1-8b",
    "llama-3-8b": "llama-3.1-8b",
    "llama-3.1-70b-instruct": "llama-3.1-70b",
    "mistral-7b-v0.1": "mistral-7b",
    "mixtral-8x7b-v0.1": "mixtral-8x7b",
    "phi-3-mini": "phi-3-mini-4k",
    "phi-3-mini-4k-instruct": "phi-3-mini-4k",
    "gemma-2-2b-it": "gemma-2-2b",
    "octocoder": "starcoder",
    "qwen2.5-0.5b-instruct": "qwen2.5-0.5b",
    "qwen2.5-1.5b-instruct": "qwen2.5-1.5b",
    "qwen2.5-7b-instruct": "qwen2.5-7b",
}

#: Head kinds: "lm" causal-LM head (decoders), "mlm" BERT masked-LM head, "classification"
#: sequence-classification head (pooler + Linear(h, num_labels)), "none" the bare model
#: (for BERT: ``BertModel`` with its pooler).
HEADS = ("lm", "mlm", "classification", "none")


class ArchitectureError(ValueError):
    """A config cannot be read or modelled; the message names the model type or field."""


@dataclass(frozen=True, slots=True)
class LinearShape:
    """One ``nn.Linear`` inside a transformer layer: ``d_in -> d_out`` and its role.

    ``role`` is one of q, k, v, qkv (fused), o, gate, up, gate_up (fused), down, router.
    ``count`` is how many identical copies one layer holds (experts of a MoE layer).
    """

    role: str
    d_in: int
    d_out: int
    bias: bool
    count: int = 1

    @property
    def params(self) -> int:
        return self.count * (self.d_in * self.d_out + (self.d_out if self.bias else 0))


@dataclass(frozen=True, slots=True)
class ModelArchitecture:
    """Shape of a transformer as the estimator sees it (frozen; all sizes are element counts).

    ``params_override`` is set only for a bare parameter count (``--params 7e9``): then the
    shape fields are a rough GPT-style guess and :attr:`coarse` is True.
    """

    name: str
    model_type: str
    kind: str  # "decoder" or "encoder"
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int | None
    tie_word_embeddings: bool
    gated_mlp: bool  # SwiGLU / GeGLU: gate, up, down; else up, down
    activation: str
    norm: str  # "layernorm" (weight + bias) or "rmsnorm" (weight)
    norms_per_layer: int
    qkv_bias: bool
    out_bias: bool
    mlp_bias: bool
    fused_qkv: bool
    fused_gate_up: bool
    learned_positions: int  # rows of a learned position table, 0 for rotary
    type_vocab_size: int
    num_experts: int  # 0 for a dense MLP
    experts_per_token: int
    sliding_window: int | None
    sliding_layers: int  # layers that attend within ``sliding_window``
    attention_dropout: float
    hidden_dropout: float
    embedding_dropout: float
    final_logit_softcapping: float | None
    attn_logit_softcapping: float | None
    head: str  # one of HEADS
    num_labels: int
    family: Family  # the description the config was read by
    rotary_dim: int = 0  # rotated dims per head (partial rotary); 0 = head_dim
    shared_expert_size: int = 0  # width of the always-on shared expert MLP of a MoE layer
    embed_dim: int = 0  # token-embedding / LM-head width when projected to h (OPT); 0 = h
    post_norm: bool = False  # LayerNorm after the residual add (BERT, OPT-350m)
    final_norm: bool = True  # a norm before the head (not BERT, not post-norm OPT)
    mla: tuple[int, ...] = ()  # (q_lora_rank or 0, kv_lora_rank, qk_nope, qk_rope, v_head_dim)
    dense_layers: int = 0  # leading layers with a dense MLP of width dense_ffn (MoE models)
    dense_ffn: int = 0
    use_cache: bool = True  # config ``use_cache``: a training forward fills a DynamicCache
    alibi: bool = False  # ALiBi (Falcon ``alibi``): a (b, a, s, s) float mask, no rotary
    kv_expanded: bool = False  # k, v copied to every query head before attention (Falcon new layout)
    params_override: int | None = None
    notes: tuple[str, ...] = field(default=())

    # ----- derived shapes -------------------------------------------------------------
    @property
    def coarse(self) -> bool:
        """True when only a parameter count is known (shape guessed)."""
        return self.params_override is not None

    @property
    def q_dim(self) -> int:
        """Width of the query projection output: ``a * head_dim``."""
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of one of the key / value projection outputs: ``k * head_dim``."""
        return self.num_kv_heads * self.head_dim

    @property
    def embed_width(self) -> int:
        """Width of the token embedding and the LM-head input (``h`` unless projected)."""
        return self.embed_dim or self.hidden_size

    @property
    def qk_norm_params(self) -> int:
        """Weights of one layer's query and key norms (elements; 0 without them)."""
        if self.family.qk_norm == "head":
            return 2 * self.head_dim
        if self.family.qk_norm == "full":
            return self.q_dim + self.kv_dim
        if self.mla:
            return self.mla[0] + self.mla[1]  # q_a_layernorm (when q is low-rank), kv_a_layernorm
        return 0

    @property
    def rotary_dims(self) -> int:
        """Dimensions per head that rotary embeddings rotate (``head_dim`` unless partial)."""
        return self.rotary_dim or self.head_dim

    @property
    def has_dropout(self) -> bool:
        return self.attention_dropout > 0 or self.hidden_dropout > 0 or self.embedding_dropout > 0

    def layer_linears(self) -> tuple[LinearShape, ...]:
        """The ``nn.Linear`` layers of one transformer layer (experts counted with ``count``)."""
        h, f = self.hidden_size, self.intermediate_size
        out: list[LinearShape] = []
        if self.mla:
            q_rank, kv_rank, nope, rope, v = self.mla
            a = self.num_heads
            if q_rank:
                out.append(LinearShape("q_a", h, q_rank, self.qkv_bias))
                out.append(LinearShape("q_b", q_rank, a * (nope + rope), False))
            else:
                out.append(LinearShape("q", h, a * (nope + rope), False))
            out.append(LinearShape("kv_a", h, kv_rank + rope, self.qkv_bias))
            out.append(LinearShape("kv_b", kv_rank, a * (nope + v), False))
            out.append(LinearShape("o", a * v, h, self.out_bias))
        elif self.fused_qkv:
            out.append(LinearShape("qkv", h, self.q_dim + 2 * self.kv_dim, self.qkv_bias))
        else:
            out.append(LinearShape("q", h, self.q_dim, self.qkv_bias))
            out.append(LinearShape("k", h, self.kv_dim, self.qkv_bias))
            out.append(LinearShape("v", h, self.kv_dim, self.qkv_bias))
        if not self.mla:
            out.append(LinearShape("o", self.q_dim, h, self.out_bias))
        n = max(1, self.num_experts)
        if self.num_experts:
            out.append(LinearShape("router", h, self.num_experts, False))
        if self.gated_mlp and self.fused_gate_up:
            out.append(LinearShape("gate_up", h, 2 * f, self.mlp_bias, n))
        elif self.gated_mlp:
            out.append(LinearShape("gate", h, f, self.mlp_bias, n))
            out.append(LinearShape("up", h, f, self.mlp_bias, n))
        else:
            out.append(LinearShape("up", h, f, self.mlp_bias, n))
        out.append(LinearShape("down", f, h, self.mlp_bias, n))
        if self.shared_expert_size:
            fs = self.shared_expert_size
            out.append(LinearShape("shared_gate", h, fs, False))
            out.append(LinearShape("shared_up", h, fs, False))
            out.append(LinearShape("shared_down", fs, h, False))
            if self.family.shared_expert_gate:
                out.append(LinearShape("shared_expert_gate", h, 1, False))
        return tuple(out)

    # ----- parameter counts -----------------------------------------------------------
    def _norm_params(self) -> int:
        return self.hidden_size * (2 if self.norm == "layernorm" else 1)

    def param_breakdown(self) -> dict[str, int]:
        """Exact parameter counts by group (elements).

        Keys: embeddings (token + learned position + token type + embedding norm), layers
        (all L layers: linears incl. biases and experts, norms), final_norm, head (untied LM
        head weight, MLM transform + decoder bias, or pooler + classifier). Counts follow the
        ``transformers`` modules of each ``model_type``.
        """
        if self.params_override is not None:
            return {"embeddings": 0, "layers": self.params_override, "final_norm": 0, "head": 0}
        h, V = self.hidden_size, self.vocab_size
        wd = self.embed_width
        emb = V * wd + self.learned_positions * h + self.type_vocab_size * h
        if wd != h:
            emb += 2 * wd * h  # project_in and project_out (no bias)
        if self.family.embedding_norm:
            emb += self._norm_params()  # embeddings.LayerNorm
        layers = (self.num_layers - self.dense_layers) * self._layer_params()
        if self.dense_layers:
            layers += self.dense_layers * self.dense_variant()._layer_params()
        final_norm = self._norm_params() if self.final_norm else 0
        if self.head == "lm":
            head = (0 if self.tie_word_embeddings else V * wd) + (V if self.family.head_bias else 0)
        elif self.head == "mlm":
            # BertOnlyMLMHead: transform dense (h*h + h), LayerNorm (2h), decoder tied + bias V
            head = h * h + h + 2 * h + V + (0 if self.tie_word_embeddings else V * h)
        elif self.head == "classification" and self.kind == "decoder":
            # *ForSequenceClassification of decoders (Llama, Mistral, Qwen2, Phi3, Gemma2,
            # GPT-2): the bare model + ``score = nn.Linear(h, num_labels, bias=False)``, pooled
            # at the last non-pad token; no pooler (transformers ``LlamaForSequenceClassification``)
            head = h * self.num_labels
        elif self.head == "classification":
            head = (h * h + h) + (h * self.num_labels + self.num_labels)  # BERT: pooler + classifier
        elif self.family.pooler:
            head = h * h + h  # BertModel's pooler
        else:
            head = 0
        return {"embeddings": emb, "layers": layers, "final_norm": final_norm, "head": head}

    def _layer_params(self) -> int:
        return (sum(lin.params for lin in self.layer_linears())
                + self.norms_per_layer * self._norm_params() + self.qk_norm_params)

    def dense_variant(self) -> ModelArchitecture:
        """The architecture of a dense leading layer of a MoE model (same attention, a dense
        gated MLP of width ``dense_ffn``, separate gate / up / down Linears)."""
        return replace(self, num_experts=0, experts_per_token=0, shared_expert_size=0, dense_layers=0,
                       intermediate_size=self.dense_ffn, fused_gate_up=False)

    @property
    def total_params(self) -> int:
        """Exact number of parameter elements of the model with its head."""
        return sum(self.param_breakdown().values())

    @property
    def linear_weight_params(self) -> int:
        """Elements in the transformer layers' ``nn.Linear`` weights (what QLoRA quantizes)."""
        if self.params_override is not None:
            return self.params_override
        def weights(arch: ModelArchitecture) -> int:
            return sum(lin.count * lin.d_in * lin.d_out for lin in arch.layer_linears())

        dense = self.dense_layers * (weights(self.dense_variant()) - weights(self)) if self.dense_layers else 0
        return self.num_layers * weights(self) + dense

    @property
    def largest_param_elements(self) -> int:
        """Elements of the largest single parameter tensor (sizes per-tensor temporaries).

        Mixture-of-experts weights count as one tensor per projection: ``transformers``
        stores all experts of a layer in one 3-D parameter (``MixtralExperts``).
        """
        if self.params_override is not None:
            return max(1, self.params_override // max(1, 12 * self.num_layers))
        sizes = [self.vocab_size * self.embed_width]
        for lin in self.layer_linears():
            sizes.append(lin.count * lin.d_in * lin.d_out)
        return max(sizes)

    @property
    def param_tensor_count(self) -> int:
        """Number of parameter tensors (each gets its own optimizer ``step`` counter)."""
        if self.params_override is not None:
            return 2 + 8 * self.num_layers
        norm_tensors = 2 if self.norm == "layernorm" else 1
        emb = 1 + (1 if self.learned_positions else 0) + (1 if self.type_vocab_size else 0)
        emb += 2 if self.embed_width != self.hidden_size else 0
        if self.family.embedding_norm:
            emb += norm_tensors
        def layer_tensors(arch: ModelArchitecture) -> int:
            n = arch.norms_per_layer * norm_tensors + ((1 + bool(arch.mla[0])) if arch.mla else 2 if arch.qk_norm_params else 0)
            return n + sum(2 if lin.bias else 1 for lin in arch.layer_linears())

        per_layer = layer_tensors(self)
        final = norm_tensors if self.final_norm else 0
        if self.head == "lm":
            head = (0 if self.tie_word_embeddings else 1) + (1 if self.family.head_bias else 0)
        elif self.head == "mlm":
            head = 2 + 2 + 1 + (0 if self.tie_word_embeddings else 1)
        elif self.head == "classification":
            head = 1 if self.kind == "decoder" else 4  # score weight; BERT: pooler + classifier
        else:
            head = 2 if self.family.pooler else 0
        dense = self.dense_layers * (layer_tensors(self.dense_variant()) - per_layer) if self.dense_layers else 0
        return emb + per_layer * self.num_layers + dense + final + head

    def with_head(self, head: str, num_labels: int = 2) -> ModelArchitecture:
        """Copy with another head kind (see :data:`HEADS`)."""
        if head not in HEADS:
            raise ArchitectureError(f"unknown head {head!r} (choose from {', '.join(HEADS)})")
        return replace(self, head=head, num_labels=num_labels)


# ----- config readers ----------------------------------------------------------------


def _get(cfg: dict[str, Any], model_type: str, *names: str, default: Any = ...) -> Any:
    for name in names:
        if name in cfg and cfg[name] is not None:
            return cfg[name]
    if default is ...:
        raise ArchitectureError(f"config lacks field {names[0]!r} (model_type {model_type!r})")
    return default


def _int(cfg: dict[str, Any], model_type: str, *names: str, default: Any = ..., minimum: int = 1) -> int:
    value = _get(cfg, model_type, *names, default=default)
    if value is None:
        return value  # type: ignore[return-value]
    if isinstance(value, int) and not isinstance(value, bool) and value > 10**9:
        # checked before any float(): a 3000-digit integer overflows the conversion
        raise ArchitectureError(f"config field {names[0]!r} is implausibly large ({len(str(value))} digits)")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value != int(value):
        raise ArchitectureError(f"config field {names[0]!r} must be an integer, got {value!r}")
    value = int(value)
    if value < minimum:
        raise ArchitectureError(f"config field {names[0]!r} must be >= {minimum}, got {value}")
    if value > 10**9:
        raise ArchitectureError(f"config field {names[0]!r} is implausibly large: {value}")
    return value


def _float(cfg: dict[str, Any], model_type: str, *names: str, default: float = 0.0) -> float:
    value = _get(cfg, model_type, *names, default=default)
    if value is None:
        return default
    if isinstance(value, int) and not isinstance(value, bool) and value > 1e300:
        raise ArchitectureError(f"config field {names[0]!r} is implausibly large ({len(str(value))} digits)")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ArchitectureError(f"config field {names[0]!r} must be a non-negative number, got {value!r}")
    return float(value)


def _rotary_fraction(cfg: dict[str, Any], model_type: str) -> float:
    """The share of each head's dims that rotary embeddings rotate (1.0 = all).

    transformers 5 keeps it in ``rope_parameters`` (``partial_rotary_factor``; per attention
    kind, e.g. ``{"full_attention": {...}}``, in some families); older configs have it at the
    top level (``partial_rotary_factor``, GPT-NeoX's ``rotary_pct``). It sizes the rotary
    ``inv_freq`` buffer and the cos / sin tables (Pythia: 0.25 of each head).

    Raises:
        ArchitectureError: the factor is not a non-negative number.
    """
    rope = cfg.get("rope_parameters")
    if isinstance(rope, dict):
        kinds = [rope] + [v for v in rope.values() if isinstance(v, dict)]
        for params in kinds:
            if params.get("partial_rotary_factor") is not None:
                return _float(params, model_type, "partial_rotary_factor")
    return _float(cfg, model_type, "partial_rotary_factor", "rotary_pct", default=1.0)


def _bool(cfg: dict[str, Any], model_type: str, name: str, default: bool) -> bool:
    value = cfg.get(name, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ArchitectureError(f"config field {name!r} must be true or false, got {value!r}")
    return value


def _optional_softcap(cfg: dict[str, Any], model_type: str, name: str) -> float | None:
    value = cfg.get(name)
    if value is None:
        return None
    return _float(cfg, model_type, name) or None


def _head_from_config(cfg: dict[str, Any], kind: str) -> tuple[str, int]:
    archs = cfg.get("architectures") or []
    arch = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else ""
    labels = cfg.get("num_labels")
    if labels is None and isinstance(cfg.get("id2label"), dict):
        labels = len(cfg["id2label"])
    num_labels = labels if isinstance(labels, int) and not isinstance(labels, bool) and 1 <= labels <= 10**6 else 2
    if arch.endswith("ForSequenceClassification"):
        return "classification", num_labels
    if kind == "encoder":
        if arch.endswith("Model"):
            return "none", num_labels
        return "mlm", num_labels
    return "lm", num_labels


def _check_heads(model_type: str, heads: int, kv_heads: int, hidden: int, head_dim: int | None) -> int:
    if kv_heads > heads or heads % kv_heads:
        raise ArchitectureError(
            f"{model_type}: num_key_value_heads ({kv_heads}) must divide num_attention_heads ({heads})"
        )
    if head_dim is None:
        if hidden % heads:
            raise ArchitectureError(
                f"{model_type}: hidden size {hidden} is not divisible by {heads} heads and config has no head_dim"
            )
        head_dim = hidden // heads
    return head_dim


def _bias(cfg: dict[str, Any], mt: str, rule: bool | str) -> bool:
    """A bias rule of a family: a bool, or boolean config field names ``a|b`` (first present
    wins), default false, or true with a ``=true`` suffix."""
    if isinstance(rule, bool):
        return rule
    names, _, default = rule.partition("=")
    name = next((n for n in names.split("|") if cfg.get(n) is not None), None)
    return default == "true" if name is None else _bool(cfg, mt, name, False)


def _sliding_layers(cfg: dict[str, Any], mt: str, family: Family, num_layers: int) -> tuple[int | None, int]:
    """Sliding window size and how many layers use it, by the family's rule; a
    ``layer_types`` list in the config always wins."""
    window = cfg.get("sliding_window")
    if family.sliding == "none" or family.sliding == "qwen2" and not cfg.get("use_sliding_window", False):
        return None, 0
    if family.sliding == "config" and cfg.get("use_sliding_window") is False:
        return None, 0
    if window is None:
        return None, 0
    window = _int(cfg, mt, "sliding_window")
    layer_types = cfg.get("layer_types")
    if isinstance(layer_types, list) and len(layer_types) == num_layers:
        return window, sum(1 for t in layer_types if t == "sliding_attention")
    if family.sliding == "pattern":
        # every n-th layer attends globally (transformers Gemma3TextConfig: layer_types from
        # sliding_window_pattern, default 6)
        n = _int(cfg, mt, "sliding_window_pattern", default=6)
        return window, sum(1 for i in range(num_layers) if (i + 1) % n)
    if family.sliding == "alternate":
        return window, (num_layers + 1) // 2  # even-indexed layers slide (Gemma 2 report, Sec. 2)
    if family.sliding == "qwen2":
        return window, max(0, num_layers - _int(cfg, mt, "max_window_layers", default=num_layers, minimum=0))
    return window, num_layers


def _mla(cfg: dict[str, Any], mt: str) -> tuple[int, ...]:
    """Multi-head latent attention sizes (DeepSeek-V2/V3 config fields)."""
    q_rank = _int(cfg, mt, "q_lora_rank", default=0, minimum=0)
    return (q_rank, _int(cfg, mt, "kv_lora_rank"), _int(cfg, mt, "qk_nope_head_dim"),
            _int(cfg, mt, "qk_rope_head_dim"), _int(cfg, mt, "v_head_dim"))


def _block_layout(cfg: dict[str, Any], mt: str, family: Family) -> Family:
    """``family`` with the block layout this config selects (``Family.parallel_field``,
    ``Family.new_layout_field``): a sequential block has two norms and no shared input;
    Falcon's new decoder architecture has ``num_ln_in_parallel_attn`` norms (default 2).
    Sources: transformers ``GPTNeoXLayer.forward`` (``use_parallel_residual``),
    ``FalconDecoderLayer.__init__`` (``parallel_attn``, ``num_ln_in_parallel_attn``)."""
    if family.parallel_field and not _bool(cfg, mt, family.parallel_field, True):
        return replace(family, parallel_residual=False, norms_per_layer=2)
    if family.new_layout_field and _bool(cfg, mt, family.new_layout_field, False):
        norms = _int(cfg, mt, "num_ln_in_parallel_attn", default=2)
        if norms not in (1, 2):
            raise ArchitectureError(f"{mt}: num_ln_in_parallel_attn must be 1 or 2, got {norms}")
        return replace(family, norms_per_layer=norms)
    return family


def _falcon_kv_heads(cfg: dict[str, Any], mt: str, family: Family, a: int) -> int:
    """Falcon's KV heads: ``num_kv_heads`` (default ``a``) under the new decoder
    architecture, else 1 with ``multi_query`` (default true), else ``a``
    (transformers ``FalconAttention.__init__``: ``qkv_out_dim``)."""
    if _bool(cfg, mt, family.new_layout_field, False):
        return _int(cfg, mt, "num_kv_heads", default=a)
    return 1 if _bool(cfg, mt, "multi_query", True) else a


def _read(cfg: dict[str, Any], name: str, mt: str, family: Family) -> ModelArchitecture:
    """Read ``cfg`` by the field names and defaults of ``family`` (see :class:`Family`)."""
    family = _block_layout(cfg, mt, family)
    h = _int(cfg, mt, *family.hidden)
    a = _int(cfg, mt, *family.heads)
    L = _int(cfg, mt, *family.layers)
    V = _int(cfg, mt, "vocab_size")
    if family.ffn_default_mult:
        f = _int(cfg, mt, *family.ffn, default=family.ffn_default_mult * h)
    else:
        f = _int(cfg, mt, *family.ffn)
    P = _int(cfg, mt, *family.positions, default=... if family.positions_required else None)
    if family.learned_positions and cfg.get("position_embedding_type", "absolute") not in (None, "absolute"):
        raise ArchitectureError(
            f"{mt}: position_embedding_type {cfg['position_embedding_type']!r} is not modelled (only 'absolute')"
        )
    if family.kv_heads == "multi_query":
        k = 1 if _bool(cfg, mt, "multi_query", True) else a
    elif family.kv_heads == "mha":
        k = a
    elif family.new_layout_field:
        k = _falcon_kv_heads(cfg, mt, family, a)
    else:
        # GQA count; Falcon spells it num_kv_heads, or says multi_query (one KV head)
        k = _int(cfg, mt, "num_key_value_heads", "num_kv_heads", default=1 if cfg.get("multi_query") is True else a)
    hd = _check_heads(mt, a, k, h, _int(cfg, mt, "head_dim", default=None) if family.kv_heads == "config" else None)
    experts = per_tok = 0
    f_dense = 0
    if family.mla:
        hd = _int(cfg, mt, "qk_nope_head_dim") + _int(cfg, mt, "qk_rope_head_dim")
    if family.moe_fields:
        experts = _int(cfg, mt, *family.moe_fields[0].split("|"))
        per_tok = _int(cfg, mt, *family.moe_fields[1].split("|"))
        if per_tok > experts:
            raise ArchitectureError(
                f"{mt}: experts per token ({per_tok}) exceed the number of experts ({experts})"
            )
        # the experts' own width where the config separates it from the dense MLP's
        f_dense = f
        f = _int(cfg, mt, "moe_intermediate_size", default=f)
    window, sliding_layers = _sliding_layers(cfg, mt, family, L)
    act = next((str(cfg[n]) for n in family.activation_fields if cfg.get(n)), family.activation_default)
    drop = [_float(cfg, mt, *fields, default=d) if fields else d for fields, d in family.dropout_fields]
    head, labels = _head_from_config(cfg, family.kind)
    post_norm = family.post_norm or bool(family.pre_norm_field) and not _bool(cfg, mt, family.pre_norm_field, True)
    rotary_fraction = _rotary_fraction(cfg, mt)
    if rotary_fraction > 1:
        raise ArchitectureError(f"{mt}: partial_rotary_factor must be <= 1, got {rotary_fraction}")
    return ModelArchitecture(
        name=name, model_type=mt, kind=family.kind, hidden_size=h, num_layers=L, num_heads=a, num_kv_heads=k,
        head_dim=hd, intermediate_size=f, vocab_size=V, max_position_embeddings=P,
        tie_word_embeddings=_bool(cfg, mt, "tie_word_embeddings", family.tie_default), gated_mlp=family.gated_mlp,
        activation=act, norm=family.norm, norms_per_layer=family.norms_per_layer,
        qkv_bias=_bias(cfg, mt, family.biases[0]), out_bias=_bias(cfg, mt, family.biases[1]),
        mlp_bias=_bias(cfg, mt, family.biases[2]), fused_qkv=family.fused_qkv, fused_gate_up=family.fused_gate_up,
        learned_positions=P + family.position_offset if family.learned_positions else 0,
        type_vocab_size=_int(cfg, mt, "type_vocab_size", default=2, minimum=0) if family.type_vocab else 0,
        num_experts=experts, experts_per_token=per_tok, sliding_window=window, sliding_layers=sliding_layers,
        attention_dropout=drop[0], hidden_dropout=drop[1], embedding_dropout=drop[2],
        final_logit_softcapping=_optional_softcap(cfg, mt, "final_logit_softcapping") if family.softcapping else None,
        attn_logit_softcapping=_optional_softcap(cfg, mt, "attn_logit_softcapping") if family.softcapping else None,
        head=head, num_labels=labels, family=family,
        rotary_dim=_int(cfg, mt, "qk_rope_head_dim") if family.mla else int(hd * rotary_fraction),
        shared_expert_size=math.prod(_int(cfg, mt, n, default=0, minimum=0) for n in family.shared_expert_field.split("*"))
        if family.shared_expert_field else 0,
        mla=_mla(cfg, mt) if family.mla else (),
        dense_layers=min(L, _int(cfg, mt, family.dense_first_field, default=0, minimum=0)) if family.dense_first_field else 0,
        dense_ffn=f_dense,
        embed_dim=_int(cfg, mt, family.embed_proj_field, default=h) if family.embed_proj_field else 0,
        post_norm=post_norm, final_norm=not family.embedding_norm and not (post_norm and family.pre_norm_field),
        use_cache=_bool(cfg, mt, "use_cache", True),
        alibi=bool(family.alibi_field) and _bool(cfg, mt, family.alibi_field, False),
        kv_expanded=bool(family.new_layout_field) and _bool(cfg, mt, family.new_layout_field, False) and k != a,
    )


def architecture_from_config(config: Any, name: str = "config.json") -> ModelArchitecture:
    """Build a :class:`ModelArchitecture` from a parsed Hugging Face ``config.json`` dict.

    Raises:
        ArchitectureError: not a dict, no/unsupported ``model_type`` (a state-space model such
            as Mamba is named as an unsupported family, pointing at ``--params``), a missing
            or invalid field (the message names it), or an inconsistent shape (e.g. KV heads
            that do not divide the attention heads). Every message starts with ``name``
            (the file or catalogue name) and a colon.
    """
    if not isinstance(config, dict):
        raise ArchitectureError(f"{name}: config must be a JSON object, got {type(config).__name__}")
    mt = config.get("model_type")
    if not isinstance(mt, str) or not mt:
        raise ArchitectureError(f"{name}: config lacks field 'model_type'")
    if mt in ENCODER_DECODER_TYPES or config.get("is_encoder_decoder") is True:
        raise ArchitectureError(
            f"{name}: model_type {mt!r} is an encoder-decoder model; encoder-decoder models are not modelled yet "
            "(decoder-only and encoder-only configs are)"
        )
    family = family_for(mt)
    if family is None and (mt in STATE_SPACE_TYPES or (
            any(config.get(f) is not None for f in STATE_SPACE_FIELDS) and not any(f in config for f in HEAD_FIELDS))):
        raise ArchitectureError(
            f"{name}: model_type {mt!r} is a state-space model (no attention heads): this family is not supported; "
            "give its parameter count instead (--params 1.4e9 for 1.4 B)"
        )
    note = None
    if family is None:
        family = replace(BERT, verified=False, name="general encoder (BERT layout)") if mt in ENCODER_TYPES \
            else general_family(config)
        note = (f"model_type {mt!r} has no exact description: read with the {family.name} description, "
                "not verified for this family")
        ignored = [what for field, what in _GENERAL_IGNORES if config.get(field)]
        if ignored:
            note += "; not modelled: " + ", ".join(ignored)
    if note is None and not family.verified:
        note = (f"model_type {mt!r}: the {family.name} description has exact parameters but is not verified "
                "against measure for activations")
    if not family.moe_fields and config.get("num_local_experts"):
        raise ArchitectureError(f"{name}: {mt} config with experts is not modelled")
    _check_rope_scaling(config.get("rope_scaling"), name)
    try:
        arch = _read(config, name, mt, family)
    except ArchitectureError as exc:  # the readers name the field; the file comes first, as above
        raise ArchitectureError(f"{name}: {exc}") from None
    _check_plausible(arch, name)
    return arch if note is None else replace(arch, notes=arch.notes + (note,))


#: config fields whose structure the general description does not model (named in the note)
_GENERAL_IGNORES = (
    ("kv_lora_rank", "multi-head latent attention (approximated as MHA)"),
    ("q_lora_rank", "low-rank query projection"),
    ("first_k_dense_replace", "dense first layers (all layers taken as MoE)"),
    ("n_shared_experts", "shared experts"),
    ("shared_expert_intermediate_size", "shared experts"),
    ("use_parallel_residual", "parallel attention + MLP block"),
    ("parallel_attn", "parallel attention + MLP block"),
)

#: more parameters than this is a typo or an overflow, not a model (the largest published
#: dense and MoE models have ~2e12)
_MAX_PARAMS = 10**14


def _check_plausible(arch: ModelArchitecture, name: str) -> None:
    """Raise :class:`ArchitectureError` for sizes no model has (products that overflow any
    device: e.g. ``hidden_size`` 1e9 with a vocabulary of 1e6)."""
    total = arch.total_params
    if total > _MAX_PARAMS:
        raise ArchitectureError(
            f"{name}: the config's sizes give {total:.3g} parameters (hidden {arch.hidden_size}, "
            f"layers {arch.num_layers}, vocab {arch.vocab_size}); more than 1e14 is not a plausible model"
        )


def _check_rope_scaling(value: Any, name: str) -> None:
    """``rope_scaling`` does not change memory, but transformers builds the model from it
    (``ROPE_INIT_FUNCTIONS[rope_type]``): a config that ``measure`` cannot build is refused
    here too, so ``estimate`` and ``measure`` accept the same files."""
    if value is None:
        return
    if not isinstance(value, dict):
        raise ArchitectureError(f"{name}: config field 'rope_scaling' must be an object or null, got {type(value).__name__}")
    for key in ("rope_type", "type"):
        kind = value.get(key)
        if kind is not None and not isinstance(kind, str):
            raise ArchitectureError(f"{name}: config field 'rope_scaling.{key}' must be a string, got {kind!r}"[:200])
    factor = value.get("factor")
    if factor is not None and (isinstance(factor, bool) or not isinstance(factor, (int, float))
                               or not 0 < factor < 1e6 or factor != factor):
        raise ArchitectureError(f"{name}: config field 'rope_scaling.factor' must be a number > 0, got {factor!r}"[:200])


def architecture_from_params(n_params: float, name: str | None = None) -> ModelArchitecture:
    """A coarse architecture from a bare parameter count (``--params 7e9``).

    The shape is guessed from the GPT-3 family's aspect ratio (Brown et al. 2020, Table 2.1:
    ``N ~= 12 L h^2`` with ``h ~= 128 L``), vocabulary 32000, 4h MLP; activations and logits
    derived from it are rough, and :attr:`ModelArchitecture.coarse` flags it.

    Raises:
        ArchitectureError: the count is not a finite number in [1e5, 1e13].
    """
    if isinstance(n_params, bool) or not isinstance(n_params, (int, float)) or not math.isfinite(n_params):
        raise ArchitectureError(f"--params must be a number, got {n_params!r}")
    if not 1e5 <= n_params <= 1e13:
        raise ArchitectureError(f"--params must be between 1e5 and 1e13, got {n_params:g}")
    n = int(n_params)
    # N = 12 L h^2, h = 128 L  =>  L = (N / (12 * 128^2))^(1/3)
    layers = max(1, round((n / (12 * 128 * 128)) ** (1 / 3)))
    hidden = max(64, int(round(math.sqrt(n / (12 * layers)) / 64)) * 64)
    heads = max(1, hidden // 128)
    return ModelArchitecture(
        name=name or f"{n_params:g} params", model_type="params", kind="decoder", hidden_size=hidden,
        num_layers=layers, num_heads=heads, num_kv_heads=heads, head_dim=hidden // heads,
        intermediate_size=4 * hidden, vocab_size=32000, max_position_embeddings=None, tie_word_embeddings=False,
        gated_mlp=False, activation="gelu", norm="layernorm", norms_per_layer=2, qkv_bias=False, out_bias=False,
        mlp_bias=False, fused_qkv=False, fused_gate_up=False, learned_positions=0, type_vocab_size=0,
        num_experts=0, experts_per_token=0, sliding_window=None, sliding_layers=0, attention_dropout=0.0,
        hidden_dropout=0.0, embedding_dropout=0.0, final_logit_softcapping=None, attn_logit_softcapping=None,
        head="lm", num_labels=2, family=PARAMS, params_override=n,
        notes=(f"shape guessed from the parameter count: L={layers}, h={hidden}, V=32000 (coarse)",),
    )


# ----- catalogue ---------------------------------------------------------------------


def catalogue_names() -> list[str]:
    """Names of the bundled ``config.json`` files, sorted."""
    return sorted(p.stem for p in CATALOGUE_DIR.glob("*.json"))


def _normalise(name: str) -> str:
    key = name.strip().lower()
    if "/" in key:
        key = key.rsplit("/", 1)[1]
    return _ALIASES.get(key, key)


def load_architecture(source: str) -> ModelArchitecture:
    """Load a catalogue entry by name (case-insensitive, ``org/`` prefix ignored) or a
    ``config.json`` path (file, or a directory holding one).

    Raises:
        ArchitectureError: unknown name (with close catalogue names suggested), unreadable
            file, invalid JSON, or a config that cannot be modelled.
    """
    config, name = load_config(source)
    return architecture_from_config(config, name=name)


def load_config(source: str) -> tuple[Any, str]:
    """The parsed ``config.json`` of ``source`` (see :func:`load_architecture`) and its name.

    Raises:
        ArchitectureError: as :func:`load_architecture`, before the config is modelled.
    """
    if not isinstance(source, str) or not source.strip():
        raise ArchitectureError("model must be a catalogue name or a path to config.json")
    path = Path(source).expanduser()
    looks_like_path = source.endswith(".json") or "/" in source and path.exists() or path.is_dir()
    if looks_like_path:
        if path.is_dir():
            path = path / "config.json"
        from gpumem_tui.support.safe_files import read_json  # regular files, size-limited, any nesting

        try:
            config = read_json(path)
        except FileNotFoundError:
            raise ArchitectureError(f"{path}: no such config file") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ArchitectureError(f"{path}: cannot read it: {exc.strerror if isinstance(exc, OSError) and exc.strerror else exc}") from None
        except json.JSONDecodeError as exc:
            raise ArchitectureError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
        except ValueError as exc:  # nested too deeply
            raise ArchitectureError(f"{path}: {exc}") from None
        return config, str(path)
    key = _normalise(source)
    names = catalogue_names()
    if key not in names:
        close = difflib.get_close_matches(key, names + list(_ALIASES), n=3, cutoff=0.5)
        suggestions = list(dict.fromkeys(_ALIASES.get(c, c) for c in close))
        hint = f"; did you mean {', '.join(suggestions)}?" if suggestions else ""
        raise ArchitectureError(
            f"unknown model {source!r}{hint} (catalogue: {', '.join(names)}; or give a path to config.json)"
        )
    return json.loads((CATALOGUE_DIR / f"{key}.json").read_text(encoding="utf-8")), key
