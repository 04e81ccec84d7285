"""The memory components of one step, one short function per rule, in bytes; each docstring
gives the rule's source. :mod:`gpumem_tui.estimator.estimate` adds them up moment by moment.

One module per component (DESIGN.md terms):

- :mod:`.parameters` -- stored weights and buffers, a quantized weight's transient copy
- :mod:`.gradients` -- stored gradients, the ``(V, h)`` gradient temporaries of backward
- :mod:`.optimizer_states` -- optimizer states and the temporaries of ``optimizer.step()``
- :mod:`.activations` -- the whole model's saved activations, checkpointing, frozen-base savings
- :mod:`.activations_per_layer` -- one layer's saved tensors (norms, attention, MLP, LoRA)
- :mod:`.layer_backward` -- one layer's backward temporaries (temporary buffers)
- :mod:`.logits_loss` -- logits and loss buffers, kept outputs, inference logits
- :mod:`.kv_cache` -- the inference KV cache and a training forward's cache copies
- :mod:`.inference` -- the working set of a no-grad forward
- :mod:`.context_and_reserve` -- CUDA context and allocator reserve
- :mod:`.lora` -- LoRA / QLoRA: trainable parameters, adapter sizes and dtypes
- :mod:`.kernels` -- which attention / dropout kernels run (read by the activation rules)

Notation (ESTIMATOR.md): ``N`` parameters, ``b`` micro-batch, ``s`` sequence length, ``h``
hidden size, ``a`` heads, ``k`` KV heads, ``d`` head dim, ``f`` MLP width, ``L`` layers,
``V`` vocabulary, ``t``/``p``/``dp`` tensor / pipeline / data parallel degrees, ``e`` bytes
per compute element.

This package re-exports every rule, so ``components.parameter_bytes`` and
``components.parameters.parameter_bytes`` are the same function.
"""

from __future__ import annotations

from gpumem_tui.estimator.components.activations import (
    activation_bytes, checkpoint_input_bytes, checkpoint_mask_bytes, checkpoint_recompute_shared_bytes,
    final_saved_bytes, fixed_activation_bytes)
from gpumem_tui.estimator.components.context_and_reserve import allocator_reserve_bytes, cuda_context_bytes
from gpumem_tui.estimator.components.gradients import HeadGradTemps, gradient_bytes, head_gradient_temporaries
from gpumem_tui.estimator.components.inference import inference_working_bytes
from gpumem_tui.estimator.components.kv_cache import kv_cache_bytes, training_cache_copies, training_cache_forward_bytes
from gpumem_tui.estimator.components.activations_per_layer import (
    GELU_FAST_SAVED, LayerActivations, cuda_masked_sdpa_extra_bytes, layer_activations)
from gpumem_tui.estimator.components.layer_backward import LayerBackward, layer_backward_excess
from gpumem_tui.estimator.components.logits_loss import (
    LogitsLoss, inference_logits_bytes, kept_output_bytes, logits_loss_bytes)
from gpumem_tui.estimator.components.lora import lora_params, trainable_params
from gpumem_tui.estimator.components.optimizer_states import optimizer_intermediate_bytes, optimizer_state_bytes
from gpumem_tui.estimator.components.parameters import buffer_bytes, dequant_bytes, parameter_bytes
from gpumem_tui.estimator.devices.cuda import CUDA_CONTEXT_BYTES
from gpumem_tui.estimator.precision import Precision, precision

__all__ = [
    "CUDA_CONTEXT_BYTES", "GELU_FAST_SAVED", "HeadGradTemps", "LayerActivations", "LayerBackward", "LogitsLoss",
    "Precision", "activation_bytes", "allocator_reserve_bytes", "buffer_bytes", "checkpoint_input_bytes",
    "checkpoint_mask_bytes", "checkpoint_recompute_shared_bytes", "cuda_context_bytes",
    "cuda_masked_sdpa_extra_bytes", "dequant_bytes", "final_saved_bytes", "fixed_activation_bytes",
    "gradient_bytes", "head_gradient_temporaries", "inference_logits_bytes", "inference_working_bytes",
    "kept_output_bytes", "kv_cache_bytes", "layer_activations", "layer_backward_excess", "logits_loss_bytes",
    "lora_params", "optimizer_intermediate_bytes", "optimizer_state_bytes", "parameter_bytes", "precision",
    "trainable_params", "training_cache_copies", "training_cache_forward_bytes",
]
