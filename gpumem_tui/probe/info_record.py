"""The info record a probe writes first in its stream: the job's published setup.

What the probe reads when it attaches (:class:`gpumem_tui.probe.core.Probe`): the arguments
given, the model's parameters and optimizer, the Hugging Face config, and what
:func:`gpumem_tui.probe.job_setup.detected_setup` finds (rank, parallel wrappers,
checkpointing, quantization, dtypes). Readers: ``telemetry/probe_source.py`` (``_handle_info``).
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from gpumem_tui.probe.distributed import local_optimizer, unwrap
from gpumem_tui.probe.job_setup import detected_setup
from gpumem_tui.probe.job_setup import hf_config as hf_config_of
from gpumem_tui.telemetry.probe_source import PROBE_FORMAT, PROBE_VERSION
from gpumem_tui.telemetry.serialize import jsonable


def dtype_name(dtype: Any) -> str | None:
    """``torch.bfloat16`` -> ``"bfloat16"``; ``None`` stays ``None``."""
    if dtype is None:
        return None
    return str(dtype).removeprefix("torch.")


def info_record(torch: Any, model: Any, optimizer: Any, *, device: Any, pid: int, tracked: bool,
                batch: int | None, seq: int | None, dtype: Any, task: str, config: dict | None,
                extra: dict | None, params: list[Any]) -> dict[str, Any]:
    """The ``info`` line (JSON-safe dict) of the probe stream of process ``pid`` measuring
    ``device`` (a ``torch.device``): format and version, the process's create time (psutil;
    ``None`` if unreadable), the model config and the setup -- the given ``batch``, ``seq``,
    ``task`` and ``dtype`` (else the first floating parameter's), parameter counts, the memory
    figure (torch allocated on CUDA, the live-tensor tracker's bytes on CPU: ``tracked``),
    the optimizer and its hyperparameters, the detected job setup and ``extra`` last.
    The CUDA device name, the detected setup and the create time are left out where reading
    them fails: the job runs on."""
    given_dtype = dtype is not None
    if dtype is None:
        floating = [p.dtype for p in params if p.is_floating_point()]
        dtype = floating[0] if floating else None
    setup: dict[str, Any] = {
        "task": task,
        "batch": batch,
        "seq": seq,
        "dtype": dtype_name(dtype),
        "device": str(device),
        "model_class": type(model).__name__,
        "total_params": sum(int(p.numel()) for p in params),
        "trainable_params": sum(int(p.numel()) for p in params if p.requires_grad),
        "torch_version": torch.__version__,
        "memory_figure": "torch_allocated" if device.type == "cuda" else "cpu_live_tensors",
        "tensor_tracker": tracked,
        "categories_note": (
            "activations = live bytes of tensors made during forward, temporaries = the "
            "rest of the live bytes that are not parameters, buffers, gradients or optimizer states"
            if tracked
            else "activations = torch allocated minus parameters, buffers, gradients and "
            "optimizer states (includes temporaries)"
        ),
    }
    if device.type == "cuda":
        with contextlib.suppress(Exception):
            setup["device_name"] = torch.cuda.get_device_name(device)
    if optimizer is not None:
        opt = local_optimizer(optimizer)
        setup["optimizer"] = type(opt).__name__
        hparams = jsonable(dict(getattr(opt, "defaults", {}) or {}))
        setup["optimizer_hparams"] = hparams
        if isinstance(hparams, dict) and hparams.get("momentum") is not None:
            setup["momentum"] = hparams["momentum"]
    hf_config = config if config is not None else hf_config_of(unwrap(model))
    # rank, parallel wrappers, checkpointing, quantization, dtypes (probe/job_setup.py);
    # whatever it fails to read, the job runs on
    with contextlib.suppress(Exception):
        setup.update(detected_setup(model, optimizer, torch, params, hf_config, given_dtype))
    if extra:
        setup.update(jsonable(dict(extra)))
    create_time = None
    with contextlib.suppress(Exception):
        import psutil

        create_time = psutil.Process(pid).create_time()
    return {
        "kind": "info",
        "format": PROBE_FORMAT,
        "version": PROBE_VERSION,
        "pid": pid,
        "time": time.time(),
        "create_time": create_time,
        "model_config": jsonable(hf_config) if hf_config is not None else None,
        "setup": jsonable(setup),
    }
