"""What peft's LoRA layers store, as users run them (``peft.get_peft_model``, peft 0.21).

Source: peft ``tuners/lora/layer.py`` ``Linear.forward`` and ``tuners_utils.cast_adapter_dtype``:

- ``get_peft_model(..., autocast_adapter_dtype=True)`` (the default) upcasts fp16 / bf16 adapter
  weights ``lora_A`` (r, d_in) and ``lora_B`` (d_out, r) to fp32, so with a 16-bit base the
  adapters, their gradients and their optimizer states are fp32 (4 bytes per element).
- ``forward``: ``result = base_layer(x)``; ``x = self._cast_input_dtype(x, lora_A.weight.dtype)``;
  ``result = result + lora_B(lora_A(dropout(x))) * scaling``; ``result.to(result_dtype)``. With a
  16-bit ``x`` each adapted Linear makes its OWN fp32 copy of its input (``b s d_in x 4``), which
  ``lora_A`` saves for its weight gradient, and ``lora_B`` saves ``lora_A``'s fp32 output
  (``b s r x 4``). The frozen base Linear saves nothing, so the 16-bit input is no longer held by
  this Linear. Measured on the H100 (``dev_truth_h100.jsonl``, the three LoRA cases without
  checkpointing went from -17 % .. -21 % to within the allocated target with this rule).
- ``lora_dropout=0.0`` (peft's default) is ``nn.Identity``: no mask.

Under torch autocast (fp32 base weights) the input is already fp32: no copy, the rule is off.
Under torch autocast over a 16-bit base (transformers ``Trainer`` with ``bf16=True`` on bf16
weights: accelerate wraps ``model.forward`` in autocast) ``_cast_input_dtype`` still makes the
fp32 copy, but ``lora_A``'s ``F.linear`` is an autocast op (``aten/src/ATen/autocast_mode.cpp``,
``linear`` in ``lower_precision_fp``): it casts that copy back to 16 bits and saves the 16-bit
cast, and the fp32 copy dies with the statement. So each adapted Linear saves
``b s (d_in + r) e`` (its own 16-bit input cast and ``lora_A``'s 16-bit output). Measured on the
H100 (``tests/data/recipes_cuda``): the Trainer LoRA case without checkpointing held 512.8 MiB
less than the same model in the plain loop, 16 layers x 2 adapted Linears x ``b s d_in`` x 2 B
(+3.7 % -> +0.0 % with this rule).
"""

from __future__ import annotations

#: adapter weight bytes per element after peft's ``autocast_adapter_dtype`` (fp16/bf16 -> fp32)
PEFT_ADAPTER_BYTES = 4


def upcasts_input(compute_bytes: int, amp: bool) -> bool:
    """True when each adapted Linear saves its own fp32 cast of a 16-bit input (see module doc)."""
    return compute_bytes != PEFT_ADAPTER_BYTES and not amp


def saved_bytes_per_linear(tokens: int, d_in: int, rank: int, compute_bytes: int, amp: bool,
                           autocast_16bit: bool = False) -> int:
    """Bytes one adapted Linear saves for backward beyond the base layer (``tokens`` = b s).

    Returns ``tokens (d_in + r) 4`` with a 16-bit input (the fp32 input copy and ``lora_A``'s
    output); ``tokens (d_in + r) e`` when that input copy runs under autocast over 16-bit
    weights (``autocast_16bit``: ``lora_A`` saves its 16-bit cast of the copy); else
    ``tokens r e`` (``lora_A``'s output; the input is shared with the layer).
    """
    if upcasts_input(compute_bytes, amp):
        return tokens * (d_in + rank) * (compute_bytes if autocast_16bit else PEFT_ADAPTER_BYTES)
    return tokens * rank * compute_bytes
