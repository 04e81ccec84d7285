"""``ZeroRedundancyOptimizer`` over DDP, torch 2.11.

Read from ``torch/distributed/optim/zero_redundancy_optimizer.py``: each rank builds the local
optimizer over its partition of the parameters only (optimizer states and step temporaries
1/d, ZeRO stage 1), then broadcasts its updated parameters in place; the model is wrapped in
DDP, so DDP's flat gradient buckets are there too (:mod:`.ddp`). ``_partition_parameters``
hands out whole tensors, largest first, to the least loaded rank: the most loaded rank holds
more than ``1/d`` (:func:`largest_partition_fraction`).
"""

from gpumem_tui.estimator.architecture import ModelArchitecture
from gpumem_tui.estimator.parallel.description import Strategy

STRATEGY = Strategy(
    kind="zero-redundancy",
    title="ZeroRedundancyOptimizer + DDP: optimizer states sharded, DDP gradient buckets",
    source="torch/distributed/optim/zero_redundancy_optimizer.py; torch/nn/parallel/distributed.py",
    version="torch 2.11",
    shards_states=True,
    flat_grad_buckets=True,
)


def parameter_tensor_sizes(arch: ModelArchitecture) -> list[int]:
    """Element counts of the model's parameter tensors: token / position / token-type
    embeddings, each layer's Linear weights and biases (a layer's experts as one 3-D tensor,
    as transformers stores them) and norms, the final norm, an untied LM head. Exact for
    GPT-2, Llama, Mistral, Qwen2 layouts; it leaves out heads beyond the LM head (BERT's pooler
    and MLM transform), q/k norms and an LM-head bias, and takes every layer as the common one
    (no MLA or leading dense layers): enough for the partition's shape, not a parameter count."""
    h = arch.hidden_size
    norm = [h, h] if arch.norm == "layernorm" else [h]
    sizes = [arch.vocab_size * arch.embed_width]
    sizes += [arch.learned_positions * h] if arch.learned_positions else []
    sizes += [arch.type_vocab_size * h] if arch.type_vocab_size else []
    layer: list[int] = norm * arch.norms_per_layer
    for lin in arch.layer_linears():
        layer.append(lin.count * lin.d_in * lin.d_out)
        layer += [lin.count * lin.d_out] if lin.bias else []
    sizes += layer * arch.num_layers
    sizes += norm if arch.final_norm else []
    if arch.head == "lm" and not arch.tie_word_embeddings:
        sizes.append(arch.vocab_size * arch.embed_width)
    return sizes


def largest_partition_fraction(arch: ModelArchitecture, world: int) -> float:
    """The share of the parameters the most loaded rank's optimizer holds.

    ``ZeroRedundancyOptimizer._partition_parameters`` assigns whole tensors, largest first,
    each to the rank with the fewest elements so far (greedy), so ranks are uneven whenever
    tensors are coarse; returns ``max(rank elements) / all elements`` (``1 / world`` at best).
    """
    sizes = parameter_tensor_sizes(arch)
    return sum(largest_partition(arch, world)) / max(1, sum(sizes))


def largest_partition(arch: ModelArchitecture, world: int) -> list[int]:
    """Element counts of the tensors the most loaded rank's optimizer steps, in its step order.

    ``_partition_parameters`` sorts each group's parameters by ``numel`` (largest first) and
    appends each to the least loaded rank's list, which becomes that rank's local optimizer's
    parameter group: the local step visits them largest first."""
    ranks: list[list[int]] = [[] for _ in range(world)]
    for size in sorted(parameter_tensor_sizes(arch), reverse=True):
        min(ranks, key=sum).append(size)
    return max(ranks, key=sum)
