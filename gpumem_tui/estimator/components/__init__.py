"""Memory components of one step, one rule per function (bytes); being split by component."""

from gpumem_tui.estimator.components.activations_per_layer import *  # noqa: F401,F403
from gpumem_tui.estimator.components.activations_per_layer import (  # noqa: F401
    _adapter_bytes, _cuda_sdpa_backend, _fused_sdpa, _peft_fp32, _sdpa_output_copied, _targets)
