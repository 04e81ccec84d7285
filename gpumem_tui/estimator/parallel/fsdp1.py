"""FSDP1 (``torch.distributed.fsdp.FullyShardedDataParallel``), torch 2.11.

Read from ``torch/distributed/fsdp/_runtime_utils.py``: ``_post_forward_reshard`` does not free
the root's unsharded flat parameter ("with the intention that they are immediately used for
backward computation"); ``forward_prefetch=False`` (default) gathers one unit at a time in
forward; ``backward_prefetch=BACKWARD_PRE`` (default) gathers the next unit before the current
one's gradient computation, so two units are unsharded in backward; each unit's gradient is a
flat unsharded tensor reduce-scattered into the sharded gradient.

Checked with ``MemTracker`` (``gpumem-tui measure --nproc 2 --strategy fsdp1``, torch 2.13 CPU,
``tests/data/ranks``): FULL_SHARD holds the root's flat parameter alone at the end of forward
and the root plus the prefetched last unit at the log-softmax backward; SHARD_GRAD_OP every
unit. With ``use_orig_params=False`` (torch's and accelerate's default) the optimizer steps the
flat parameters themselves (:func:`flat_parameter_elements`): their states, one ``step``
tensor each, and the single-tensor step's temporaries (:func:`flat_single_tensor_adam_bytes`)
follow the flat sizes; NO_SHARD peaks in that step (``llama-tiny-fsdp1-no_shard``: exact, it
was 4 % low with the unflattened model's ``2 x largest tensor``).
"""

import math

from gpumem_tui.estimator.architecture import ModelArchitecture
from gpumem_tui.estimator.parallel.description import Strategy
from gpumem_tui.estimator.spec import TrainingSpec

STRATEGY = Strategy(
    kind="fsdp1",
    title="FSDP1 FullyShardedDataParallel: flat-parameter units, root kept unsharded, BACKWARD_PRE prefetch",
    source="torch/distributed/fsdp/_runtime_utils.py (_post_forward_reshard, _prefetch_handle)",
    version="torch 2.11",
    shards_states=True,
    gathered_forward_end=0,
    gathered_layer_forward=1,
    gathered_loss_backward=1,
    gathered_layer_backward=2,
    root_stays_gathered=True,
)


def flat_parameter_elements(arch: ModelArchitecture, spec: TrainingSpec, shard_degree: int) -> list[int]:
    """Elements of each ``FlatParameter`` one rank's optimizer steps, in ``parameters()`` order,
    with ``use_orig_params=False`` and one unit per transformer block (``ModuleWrapPolicy``).

    The root unit (embeddings, final norm, untied LM head: every parameter outside the wrapped
    blocks) comes first, since ``FullyShardedDataParallel`` registers its flat parameter on
    the root module itself and ``nn.Module.parameters()`` yields a module's own parameters
    before its children's; then one per block (a MoE model's dense leading blocks first).
    A sharded unit holds ``ceil(numel / d)`` elements on every rank: ``FlatParamHandle``
    chunks the flat parameter into ``d`` pieces and pads each to the first's size
    (``torch/distributed/fsdp/_flat_param.py``, ``_get_shard`` / ``_get_unpadded_shard``);
    ``NO_SHARD`` (``shard_degree=1``) keeps it whole. Tensor parallelism divides the blocks.
    """
    parts = arch.param_breakdown()
    dense = arch.dense_layers
    dense_elems = arch.dense_variant().param_breakdown()["layers"] // max(1, arch.num_layers) if dense else 0
    rest = arch.num_layers - dense
    layer = (parts["layers"] - dense * dense_elems) / max(1, rest)
    units = [parts["embeddings"] + parts["final_norm"] + parts["head"]]
    units += [dense_elems / spec.tp] * dense + [layer / spec.tp] * rest
    return [math.ceil(u / shard_degree) for u in units]


def flat_single_tensor_adam_bytes(units: list[int], state_bytes: int) -> int:
    """Peak temporaries of torch's single-tensor Adam / AdamW (the CPU default) stepping
    ``units`` (elements per parameter, in step order; bytes out).

    ``_single_tensor_adam`` (``torch/optim/adam.py``) computes per parameter
    ``denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)``: the ``sqrt`` result and
    the quotient exist together, while the previous parameter's ``denom`` is still bound to
    the loop's local name (it is released when the new one is assigned). So parameter ``i``
    peaks at ``u[i-1] + 2 u[i]`` elements. With FSDP1's few large flat parameters this exceeds
    the ``2 x largest tensor`` of the unflattened model (MemTracker, torch 2.13 CPU,
    ``tests/data/ranks/llama-tiny-fsdp1-no_shard-w2.json``: the root's ``denom`` beside the
    first block's two temporaries).
    """
    if not units:
        return 0
    peak = 2 * units[0]
    for prev, cur in zip(units, units[1:]):
        peak = max(peak, prev + 2 * cur)
    return peak * state_bytes
