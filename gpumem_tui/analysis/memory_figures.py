"""The names of the memory figures a comparison or a job row may show, one name per figure.

NVML "used" (the driver's count for a process: context + allocator reserve + tensors), torch
"allocated" (live tensors, ``torch.cuda.memory_allocated``), torch "reserved" (the caching
allocator's segments, ``torch.cuda.memory_reserved``) and the CPU's live tensor bytes (the probe's
tracker) are different quantities: each figure a value carries says which one it is, so two are
never compared or mixed silently. Headless, stdlib only (the dashboard imports it at start-up).
"""

FIGURE_ALLOCATED = "torch allocated"
FIGURE_RESERVED = "torch reserved"
FIGURE_NVML_USED = "NVML used"
FIGURE_CPU_LIVE = "CPU live tensors"
