"""Meta-device profile: what ``measure --on meta`` traces (no real memory, real shapes).

The CPU rules (:mod:`.cpu`), except that the meta device has no fused SDPA kernel: SDPA
dispatches to ``_scaled_dot_product_attention_math`` and stores the ``s x s`` probabilities
(measured, ESTIMATOR.md: GPT-2 124M b=2 s=1024 bf16, 3173.6 MiB on CPU vs 4432.7 MiB on meta
with SDPA). Eager attention gives the same bytes on both, which is why the benchmarks measure
eager on meta and SDPA on the CPU.
"""

from __future__ import annotations

from dataclasses import replace

import gpumem_tui.estimator.devices.cpu as cpu

PROFILE = replace(cpu.PROFILE, name="meta", sdpa_always_math=True)
