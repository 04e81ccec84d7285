"""``measure --nproc N``: the training step in N processes over gloo, each rank's peak by category.

torch and transformers only; import lazily.

:func:`launch` starts N processes with ``torch.multiprocessing.start_processes`` (``fork``
where the platform has it: the ranks skip re-importing torch, and what :func:`measure_ranks`
imports first, transformers and the strategy's modules; ``spawn`` otherwise), joins them
into one gloo process group (a ``FileStore`` in a temporary directory, or TCP on
127.0.0.1:PORT when a port is given) and collects what each rank returns. A rank that raises
or dies takes the others down: ``ProcessContext.join`` terminates the rest (SIGTERM, then
SIGKILL after a grace period) and :class:`RankFailure` names the rank and why; collectives
time out after ``timeout_s`` (``init_process_group(timeout=...)``) and the whole run too.

:func:`measure_rank` is the rank's work: the single-process runner's model and training loop
(:func:`gpumem_tui.measure.runner.prepare_model`, :func:`~gpumem_tui.measure.runner.train_steps`)
wrapped per :mod:`gpumem_tui.measure.parallel`, under ``FSDPMemTracker`` (fsdp2) or
``MemTracker`` (the others) through :class:`~gpumem_tui.measure.tracker.PhaseMemTracker`, and
split with :func:`~gpumem_tui.measure.runner.split_live` into the categories
``measure --json`` reports. Byte figures are live tensor storage bytes (torch "allocated"-like).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import signal
import socket
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path
from typing import Any, Callable

from gpumem_tui.measure.parallel import ParallelSpec, make_optimizer, optimizer_state_tensors
from gpumem_tui.measure.parallel import wrap_before_tracker, wrap_in_tracker
from gpumem_tui.measure.runner import MeasureError, MeasureRequest
from gpumem_tui.support.import_gc import ImportsOutOfCollector
from gpumem_tui.support.text import printable

#: seconds given to the surviving ranks to exit after one failed, before SIGTERM / SIGKILL
_GRACE_S = 3.0


class RankFailure(RuntimeError):
    """A rank raised or died. ``rank``: its index; ``bad_input``: it raised ``MeasureError``
    (the request cannot run, CLI exit 2) rather than failing at run time (exit 1)."""

    def __init__(self, rank: int, message: str, bad_input: bool = False) -> None:
        super().__init__(message)
        self.rank = rank
        self.bad_input = bad_input


def check_port_free(port: int) -> None:
    """Raise ``MeasureError`` if TCP ``port`` on 127.0.0.1 cannot be bound (busy or invalid)."""
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise MeasureError(f"--port must be 1..65535, got {port!r}")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as exc:
            raise MeasureError(f"--port {port}: 127.0.0.1:{port} is busy or not allowed ({exc.strerror})") from None


def launch(target: Callable[..., dict[str, Any]], args: tuple[Any, ...], nproc: int, *,
           port: int | None = None, timeout_s: float = 300.0, start_method: str | None = None) -> list[dict[str, Any]]:
    """Run ``target(rank, nproc, *args)`` in ``nproc`` processes in one gloo group; return
    the ranks' return values (JSON-serialisable dicts) in rank order.

    Raises:
        MeasureError: ``port`` is busy.
        RankFailure: a rank raised (its exception type and message), was killed (the signal) or
            exited non-zero, or the ranks were still running after ``timeout_s``.
    """
    import torch.multiprocessing as mp

    if port is not None:
        check_port_free(port)
    method = start_method or ("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    with tempfile.TemporaryDirectory(prefix="gpumem-ranks-") as tmp:
        out_dir = Path(tmp)
        rendezvous = f"tcp://127.0.0.1:{port}" if port is not None else f"file://{out_dir / 'store'}"
        ctx = mp.start_processes(_rank_entry, args=(nproc, rendezvous, str(out_dir), timeout_s, target, args),
                                 nprocs=nproc, join=False, start_method=method)
        try:
            _wait(ctx, out_dir, timeout_s)
        finally:
            _remove_torch_error_files(ctx)
        return [json.loads((out_dir / f"rank{i}.json").read_text()) for i in range(nproc)]


def _wait(ctx: Any, out_dir: Path, timeout_s: float) -> None:
    """Wait for every rank; at the first that fails stop the rest and raise its ``RankFailure``.

    The join is done here rather than by ``ProcessContext.join`` so the cause is told apart from
    its consequences: when one rank dies the others fail too (gloo: "Connection closed by
    peer"), and several may have ended by the time the parent looks.
    """
    from multiprocessing.connection import wait

    procs = ctx.processes
    pending = {proc.sentinel: index for index, proc in enumerate(procs)}
    deadline = time.monotonic() + timeout_s
    while pending:
        failed = False
        for sentinel in wait(list(pending), timeout=1.0):
            proc = procs[pending.pop(sentinel)]
            proc.join()
            failed = failed or proc.exitcode != 0
        if failed:
            ended = [i for i, proc in enumerate(procs) if not proc.is_alive() and proc.exitcode != 0]
            _stop(procs)
            raise _cause(out_dir, procs, ended)
        if pending and time.monotonic() > deadline:
            _stop(procs)
            raise RankFailure(-1, f"the {len(procs)} ranks did not finish within {timeout_s:g} s (--rank-timeout)")


def _remove_torch_error_files(ctx: Any) -> None:
    """Delete the files torch kept for the ranks' tracebacks.

    ``torch.multiprocessing.start_processes`` names one file per rank in the temporary
    directory (``ProcessContext.error_files``); its ``_wrap`` pickles the traceback of a rank
    that raised into it, and nothing removes it (torch/multiprocessing/spawn.py): every failed
    launch left ``/tmp/pytorch-errorfile-*.pickle`` behind. The cause is read from our own
    ``rank{i}.err`` (:func:`_cause`), in a directory that goes with the launch.
    """
    for name in getattr(ctx, "error_files", ()) or ():
        with contextlib.suppress(OSError, TypeError):
            Path(name).unlink(missing_ok=True)


def _stop(procs: list[Any]) -> None:
    """SIGTERM every live rank, SIGKILL those still alive after the grace period."""
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
    for proc in procs:
        proc.join(_GRACE_S)
        if proc.is_alive():
            proc.kill()
            proc.join()


def _cause(out_dir: Path, procs: list[Any], ended: list[int]) -> RankFailure:
    """The failure to report, among the ranks that ``ended`` (non-zero) on their own: a rank
    that left no error record (killed by a signal, or exited) first, since a rank raising
    always records one; otherwise the earliest recorded error (its peers then fail on closed
    connections). Every rank's error record counts, not only those of the ranks that ended:
    a rank that raised writes its record before it exits, and may still be tearing down when
    a peer that failed because of it has already gone."""
    errors = {}
    for index in range(len(procs)):
        with contextlib.suppress(OSError, ValueError):
            errors[index] = json.loads((out_dir / f"rank{index}.err").read_text())
    silent = [i for i in ended if i not in errors]
    if silent:
        index = silent[0]
        code = procs[index].exitcode
        how = f"was killed by {_signal_name(-code)}" if code < 0 else f"exited with code {code}"
        return RankFailure(index, f"rank {index} (pid {procs[index].pid}) {how}; the other ranks were stopped")
    err = min(errors.values(), key=lambda e: e["time"])
    # a rank's message is shown literally, on one line (no terminal control characters)
    return RankFailure(err["rank"], f"rank {err['rank']} failed: {err['type']}: {printable(err['message'], 300)}",
                       bad_input=err["type"] == "MeasureError")


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _rank_entry(rank: int, nproc: int, rendezvous: str, out_dir: str, timeout_s: float,
                target: Callable[..., dict[str, Any]], args: tuple[Any, ...]) -> None:
    """One rank: join the gloo group, run ``target``, write ``rank{i}.json`` (or ``.err``)."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)  # N ranks share the cores; more threads only oversubscribe them
    try:
        if rendezvous.startswith("file://"):
            store = dist.FileStore(rendezvous.removeprefix("file://"), nproc)
            dist.init_process_group("gloo", store=store, rank=rank, world_size=nproc,
                                    timeout=datetime.timedelta(seconds=timeout_s))
        else:
            dist.init_process_group("gloo", init_method=rendezvous, rank=rank, world_size=nproc,
                                    timeout=datetime.timedelta(seconds=timeout_s))
        result = target(rank, nproc, *args)
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(result))
    except Exception as exc:
        message = (str(exc).strip().splitlines() or [""])[0][:300]
        if not message:
            message = traceback.format_exc().strip().splitlines()[-1][:300]
        Path(out_dir, f"rank{rank}.err").write_text(json.dumps(
            {"rank": rank, "type": type(exc).__name__, "message": message, "time": time.monotonic()}))
        raise
    finally:
        if dist.is_initialized():
            with contextlib.suppress(Exception):
                dist.destroy_process_group()


def measure_rank(rank: int, nproc: int, req: MeasureRequest, spec: ParallelSpec) -> dict[str, Any]:
    """One rank's measured training step (see the module docstring); returns
    ``{"rank", "peak_bytes", "peak_phase", "components_bytes", "tracker_categories",
    "detail_bytes", "phases", "top_tensors", "total_params", "trainable_params", "model_class"}``.

    Every rank builds the same model (same seed); data-parallel ranks draw their own batch
    (seed + rank), tensor-parallel ranks the same one.
    """
    import torch

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=UserWarning)
        warnings.filterwarnings("ignore", category=FutureWarning)
        return _measure_rank(rank, req, spec, torch)


def _measure_rank(rank: int, req: MeasureRequest, spec: ParallelSpec, torch: Any) -> dict[str, Any]:
    from gpumem_tui.measure.runner import _torch_dtype, _vocab_size, prepare_model, split_live, train_steps
    from gpumem_tui.measure.tracker import PhaseMemTracker, fsdp_phase_tracker

    model, _ = prepare_model(req, torch)
    total_params = sum(p.numel() for p in model.parameters())
    trainable_params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    vocab = _vocab_size(model)
    model_class = type(model).__name__
    logits_rows = max(1, req.batch * (req.seq - 1))
    model = wrap_before_tracker(model, spec, torch)
    optimizer = None
    if spec.kind == "fsdp2":
        optimizer = make_optimizer(spec, req, [p for p in model.parameters() if p.requires_grad], torch)
        tracker = fsdp_phase_tracker(model, optimizer, vocab, logits_rows)
    else:
        tracker = PhaseMemTracker(vocab_size=vocab, logits_rows=logits_rows)
    autocast = torch.autocast("cpu", dtype=_torch_dtype(torch, req.dtype)) if req.mixed_precision \
        else contextlib.nullcontext()
    phase_order: list[str] = []

    def phase(name: str) -> None:
        tracker.start_phase(name)
        phase_order.append(name)

    with tracker:
        model = wrap_in_tracker(model, spec, on_bucket=lambda buf: tracker.tag_tensors(buf, "grad_buckets"))
        if optimizer is None:
            optimizer = make_optimizer(spec, req, [p for p in model.parameters() if p.requires_grad], torch)
        data_seed = req.seed if spec.kind == "tp" else req.seed + 1 + rank
        step_name = train_steps(req, model, optimizer, tracker, phase, autocast, data_seed=data_seed)
        tracker.tag_tensors(optimizer_state_tensors(optimizer), "optimizer_states")
    measured = list(dict.fromkeys(p for p in phase_order if p.startswith(f"{step_name}.")))
    best = max((tracker.phase_peaks[p] for p in measured), key=lambda pk: pk.peak_bytes)
    components, cats, detail = split_live(tracker, best.live)
    if sum(components.values()) != best.peak_bytes:
        raise RuntimeError(f"internal: components sum {sum(components.values())} != peak {best.peak_bytes}")
    top = sorted(best.live, key=lambda e: e.nbytes, reverse=True)[:8]
    return {
        "rank": rank,
        "peak_bytes": int(best.peak_bytes),
        "peak_phase": best.name.removeprefix(f"{step_name}."),
        "components_bytes": components,
        "tracker_categories": cats,
        "detail_bytes": detail,
        "phases": [{"name": p.removeprefix(f"{step_name}."), "live_bytes": tracker.phase_peaks[p].peak_bytes}
                   for p in measured],
        "top_tensors": [_describe(tracker, e) for e in top],
        "total_params": int(total_params),
        "trainable_params": int(trainable_params),
        "model_class": model_class,
    }


def _describe(tracker: Any, entry: Any) -> dict[str, Any]:
    op, shape, dtype = tracker.describe(entry)
    return {"bytes": entry.nbytes, "category": entry.reftype, "tag": tracker.tag_of(entry),
            "op": op, "shape": list(shape), "dtype": dtype}


#: the torch modules each strategy's ranks import (parallel.py), imported once in the parent
_STRATEGY_MODULES = {
    "fsdp2": ("torch.distributed.fsdp", "torch.distributed._tools.fsdp2_mem_tracker"),
    "fsdp1": ("torch.distributed.fsdp", "torch.distributed.fsdp.wrap"),
    "ddp": ("torch.nn.parallel", "torch.distributed.algorithms.ddp_comm_hooks.default_hooks"),
    "zero-redundancy": ("torch.nn.parallel", "torch.distributed.algorithms.ddp_comm_hooks.default_hooks",
                        "torch.distributed.optim"),
    "tp": ("torch.distributed.device_mesh", "torch.distributed.tensor.parallel"),
}


def _preload(req: MeasureRequest, spec: ParallelSpec) -> None:
    """Import in the parent what every rank would import on its own: transformers, the model's
    modeling module, the tracker and the strategy's torch.distributed modules. Forked ranks
    inherit them, so N ranks pay for these imports once rather than N times (measured: ~3.5 s of
    CPU for transformers and a model module, ~2 s for the distributed modules, per rank).

    Only an optimisation: a failure here is ignored and left for the rank to meet and report
    as it always did. Warnings are silenced as :func:`measure_rank` silences them, so stderr
    keeps its one-line contract.
    """
    import importlib
    import multiprocessing

    if "fork" not in multiprocessing.get_all_start_methods():  # spawned ranks inherit nothing
        return
    # the first time in a process: the collector paused, then what was imported frozen
    # (support/import_gc; the ranks fork with it frozen, the pattern the gc.freeze docs give)
    first = "gpumem_tui.measure.tracker" not in sys.modules
    with contextlib.suppress(Exception), warnings.catch_warnings(), \
            (ImportsOutOfCollector() if first else contextlib.nullcontext()):
        warnings.filterwarnings("ignore", category=UserWarning)
        warnings.filterwarnings("ignore", category=FutureWarning)
        import gpumem_tui.measure.tracker  # noqa: F401 -- torch's MemTracker
        from gpumem_tui.measure.runner import ENCODER_TYPES

        for name in _STRATEGY_MODULES.get(spec.kind, ()):
            importlib.import_module(name)
        from transformers import CONFIG_MAPPING
        from transformers.models.auto import modeling_auto

        model_type = req.config.get("model_type")
        mapping = (modeling_auto.MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING if req.head == "classification"
                   else modeling_auto.MODEL_FOR_MASKED_LM_MAPPING if model_type in ENCODER_TYPES
                   else modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING)
        mapping[CONFIG_MAPPING[model_type]]  # imports the modeling module (transformers loads lazily)


def measure_ranks(req: MeasureRequest, spec: ParallelSpec, *, port: int | None = None,
                  timeout_s: float = 300.0) -> dict[str, Any]:
    """Measure ``req`` under ``spec`` in ``spec.world_size`` ranks; return the ``--json`` shape:
    ``{"ranks": [...per rank, see measure_rank], "peak_bytes": max over ranks, "worst_rank",
    "world_size", "strategy": spec.to_json(), "tracker", "total_params", "trainable_params",
    "model_class", "on", "attention", "measured": true}``.

    Raises:
        MeasureError: invalid request or strategy, busy port.
        RankFailure: a rank failed (see :func:`launch`).
    """
    from gpumem_tui.measure.parallel import validate_parallel
    from gpumem_tui.measure.runner import validate

    validate(req)
    validate_parallel(spec, req)
    _preload(req, spec)
    ranks = launch(measure_rank, (req, spec), spec.world_size, port=port, timeout_s=timeout_s)
    worst = max(ranks, key=lambda r: r["peak_bytes"])
    return {
        "ranks": ranks,
        "peak_bytes": worst["peak_bytes"],
        "worst_rank": worst["rank"],
        "world_size": spec.world_size,
        "strategy": spec.to_json(),
        "tracker": spec.tracker_name,
        "total_params": ranks[0]["total_params"],
        "trainable_params": ranks[0]["trainable_params"],
        "model_class": ranks[0]["model_class"],
        "on": req.on,
        "attention": req.attention,
        "measured": True,
    }
