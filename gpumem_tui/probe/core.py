"""The probe that runs inside a training script (torch only; see :func:`attach`)."""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
import time
import warnings
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gpumem_tui.probe.info_record import info_record
from gpumem_tui.probe.peak_split import PeakSplit, output_and_loss_bytes, output_tensors
from gpumem_tui.probe.recipe_state import use_cache_of_call
from gpumem_tui.probe.writer import StreamWriter
from gpumem_tui.telemetry.model import Phase
from gpumem_tui.telemetry.probe_source import default_probe_dir

_PHASE_NAMES = {p.value for p in Phase}
# Tracker tag -> category: storages made in forward are activations; any other storage that
# is not a parameter, buffer, gradient or optimizer state is a temporary.
_TAG_CATEGORY = {
    "parameters": "parameters",
    "buffers": "buffers",
    "gradients": "gradients",
    "optimizer_states": "optimizer_states",
    Phase.FORWARD.value: "activations",
}
_active: Probe | None = None
_active_lock = threading.Lock()
_STALE_FILE_SECONDS = 7 * 24 * 3600.0
_CONSISTENT_READ_TRIES = 20  # re-reads of a sample's categories while training allocates


class ProbeError(RuntimeError):
    """The probe cannot attach (no torch, a probe already attached, a bad argument)."""


def _tensor_bytes(tensor: Any) -> int:
    return int(tensor.numel()) * int(tensor.element_size())


def _checked_torch(model: Any, optimizer: Any, interval: float, min_step_interval: float,
                   batch: int | None, seq: int | None) -> Any:
    """The ``torch`` module, once :class:`Probe`'s arguments are checked.

    Raises:
        ProbeError: no torch; ``model`` not a ``torch.nn.Module``; ``optimizer`` neither
            ``None`` nor a ``torch.optim.Optimizer``; ``interval`` <= 0 or
            ``min_step_interval`` < 0; ``batch`` / ``seq`` neither ``None`` nor a positive int.
    """
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - torch is present where a model is
        raise ProbeError("gpumem_tui.probe needs torch (pip install 'gpumem-tui[torch]')") from exc
    if not isinstance(model, torch.nn.Module):
        raise ProbeError(f"model must be a torch.nn.Module, not {type(model).__name__}")
    if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
        raise ProbeError(f"optimizer must be a torch.optim.Optimizer, not {type(optimizer).__name__}")
    if interval <= 0 or min_step_interval < 0:
        raise ProbeError("interval must be > 0 and min_step_interval >= 0 (seconds)")
    for name, value in (("batch", batch), ("seq", seq)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ProbeError(f"{name} must be a positive integer or None, got {value!r}")
    return torch


def _measured_device(torch: Any, params: list[Any], device: Any) -> Any:
    """The ``torch.device`` measured: ``device`` if given, else the first parameter's (CPU
    without parameters); a CUDA device without an index gets the current one."""
    if device is None:
        device = params[0].device if params else torch.device("cpu")
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


class Probe:
    """Marks training phases and streams memory samples of this process. Use :func:`attach`.

    Phases come from hooks (model forward pre/post hooks, an autograd hook on the model
    output's ``grad_fn`` for the start of backward, ``Optimizer.register_step_pre_hook`` /
    ``register_step_post_hook``) or from :meth:`phase` / :meth:`mark`. A step is recorded
    whole (all its marks) when it starts at least ``min_step_interval`` seconds after the last
    recorded step; between lines a background thread writes a sample every ``interval``
    seconds, so fast steps do not flood the stream and slow phases still get a curve.

    Attributes:
        pid: this process. path: the stream file. device: the torch device measured.
        step: the current training step (0 before the first forward).
        phase_name: the current phase ("init", "forward", "backward", "optimizer_step", "idle").
    """

    def __init__(
        self,
        model: Any,
        optimizer: Any = None,
        *,
        batch: int | None = None,
        seq: int | None = None,
        dtype: Any = None,
        task: str = "train",
        config: dict | None = None,
        directory: str | os.PathLike[str] | None = None,
        interval: float = 0.1,
        min_step_interval: float = 0.2,
        track_tensors: bool | None = None,
        hooks: bool = True,
        device: Any = None,
        extra: dict | None = None,
        max_file_bytes: int = 32 << 20,
        reset_peak_stats: bool = True,
        step_start_hook: bool = True,
    ) -> None:
        torch = _checked_torch(model, optimizer, interval, min_step_interval, batch, seq)
        self._torch = torch
        self.model = model
        self.optimizer = optimizer
        self.pid = os.getpid()
        params = list(model.parameters())
        self.device = _measured_device(torch, params, device)
        self._init_phase_state(interval, min_step_interval, reset_peak_stats)
        self._tracker = self._new_tracker(track_tensors)
        directory = Path(directory) if directory is not None else default_probe_dir()
        self.path = directory / f"{self.pid}.jsonl"
        info = info_record(torch, model, optimizer, device=self.device, pid=self.pid,
                           tracked=self._tracker is not None, batch=batch, seq=seq, dtype=dtype,
                           task=task, config=config, extra=extra, params=params)
        self._info = info
        # weak references to the last forward's output tensors (not its loss), checked when
        # backward starts: alive then means the training loop keeps the output
        self._output_refs: tuple[Any, ...] = ()
        self._kept_output_published = False
        self._open_stream(info, max_file_bytes)
        self._track_model(params)
        if hooks:
            self._install_hooks(step_start_hook)
        self.mark(Phase.INIT.value)

        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sampler, name="gpumem-tui-probe", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    def _init_phase_state(self, interval: float, min_step_interval: float, reset_peak_stats: bool) -> None:
        """The step and phase bookkeeping before the first mark: sampling intervals (s),
        the current phase (init) and step, the per-phase high-water marks (:meth:`_end_phase`)
        and the CUDA peak split; no hooks yet."""
        self._interval = float(interval)
        self._min_step_interval = float(min_step_interval)
        self._lock = threading.RLock()
        self._phase = Phase.INIT.value
        self.step = 0
        self._step_done = True
        self._record_step = True
        self._last_step_recorded = -1e18
        self._last_write = 0.0
        self._saw_optimizer_phase = self.optimizer is not None
        # Per-phase high-water marks (see _end_phase): when the current phase started, the
        # peaks of phases of steps that were not recorded (folded into the next recorded
        # one), and the process-wide CUDA peak last read when the stats are not reset.
        self._reset_peak_stats = bool(reset_peak_stats)
        self._phase_start: float | None = None
        # phase -> (start, highest peak, phases folded, split at the peak, bytes at the end)
        self._pending_peaks: dict[str, tuple[float, int, int, dict[str, int] | None, int | None]] = {}
        self._last_cuda_max = 0
        # CUDA: what each phase's peak is made of (probe/peak_split.py); needs the reset stats
        self._split = PeakSplit() if self.device.type == "cuda" and self._reset_peak_stats else None
        self._hook_handles: list[Any] = []
        self._kwargs_handle: Any = None  # the forward pre-hook that reads use_cache, until it fired
        self._closed = False

    def _new_tracker(self, track_tensors: bool | None) -> Any:
        """The live-tensor tracker (probe/tracker.py) when asked, by default on CPU (where
        torch has no allocator statistics); else ``None``."""
        if track_tensors is None:
            track_tensors = self.device.type == "cpu"
        if not track_tensors:
            return None
        from gpumem_tui.probe.tracker import LiveTensorTracker

        return LiveTensorTracker(self.device.type)

    def _open_stream(self, info: dict[str, Any], max_file_bytes: int) -> None:
        """The stream writer at :attr:`path`, ``info`` its first line; streams of dead jobs a
        week old in its directory are removed."""
        # A directory that cannot be written or is refused (another user's) warns once and the
        # job runs on without a stream: the probe must never stop the training.
        self._writer = StreamWriter(self.path, info, max_bytes=max_file_bytes)
        if not self._writer.failed:  # streams of dead jobs, a week old: through the checked directory's fd
            from gpumem_tui.telemetry.probe_source import _process_alive

            self._writer.remove_stale(_STALE_FILE_SECONDS, _process_alive)

    def _track_model(self, params: list[Any]) -> None:
        """With a tracker: tag the tensors that exist before training (parameters, buffers,
        gradients, optimizer states) and start tracking from a reset peak."""
        if self._tracker is not None:
            self._tracker.register(params, tag="parameters")
            self._tracker.register(self.model.buffers(), tag="buffers")
            self._tracker.register((p.grad for p in params if p.grad is not None), tag="gradients")
            self._tracker.register(self._state_tensors(), tag="optimizer_states")
            self._tracker.reset_peak()
            self._tracker.start()


    # -- published setup -------------------------------------------------------------------

    # -- memory ----------------------------------------------------------------------------

    def _on_device(self, tensor: Any) -> bool:
        return tensor.device == self.device

    def _state_tensors(self) -> list[Any]:
        if self.optimizer is None:
            return []
        torch = self._torch
        out = []
        for state in list(self.optimizer.state.values()):
            if isinstance(state, dict):
                out.extend(v for v in list(state.values()) if isinstance(v, torch.Tensor))
        return out

    def categories(self, gradients: int | None = None) -> dict[str, int]:
        """Bytes of parameters, buffers (when any), gradients and optimizer states on the
        measured device (``numel * element_size``; shared parameters counted once); the given
        ``gradients`` bytes instead of reading every ``param.grad`` (:meth:`_consistent_reading`)."""
        params = list(self.model.parameters())
        if gradients is None:
            gradients = sum(_tensor_bytes(p.grad) for p in params if p.grad is not None and self._on_device(p.grad))
        result = {
            "parameters": sum(_tensor_bytes(p) for p in params if self._on_device(p)),
            "gradients": gradients,
            "optimizer_states": sum(_tensor_bytes(t) for t in self._state_tensors() if self._on_device(t)),
        }
        buffers = sum(_tensor_bytes(b) for b in self.model.buffers() if self._on_device(b))
        if buffers:
            result["buffers"] = buffers
        return result

    def _consistent_reading(self) -> tuple[dict[str, int], int | None, int]:
        """(:meth:`categories`, tracker live bytes, bytes made in forward) at one instant (the
        tracker saw no tensor come or go meanwhile; else no split). The sampling thread never
        reads ``param.grad``: autograd stores it without the GIL, and a read then can SIGSEGV
        (about one 30-step run in ten); it uses the tracker's gradient label, or no split in backward."""
        tracker = self._tracker
        sampling = threading.current_thread() is getattr(self, "_thread", None)  # None before start
        for _ in range(_CONSISTENT_READ_TRIES if tracker is not None else 0):
            before, by_tag = tracker.changes, tracker.live_by_tag()
            try:
                categories = self.categories(by_tag.get("gradients", 0) if sampling else None)
            except RuntimeError:
                return {}, tracker.live_bytes, 0
            live = tracker.live_bytes  # read before the check, so it belongs to the same instant
            if tracker.changes == before:
                return categories, live, by_tag.get(Phase.FORWARD.value, 0)
            time.sleep(0)  # let the training thread get on with what it is doing
        if tracker is not None:
            return {}, tracker.live_bytes, 0
        with contextlib.suppress(RuntimeError):  # a dict changed size under us
            if not (sampling and self._phase == Phase.BACKWARD.value):
                return self.categories(), None, 0
        return {}, None, 0

    def memory(self) -> dict[str, Any]:
        """The memory fields of one stream line (see ``gpumem_tui.telemetry.probe_source``)."""
        torch = self._torch
        fields: dict[str, Any] = {"device": str(self.device)}
        tracker = self._tracker
        categories, live, made_in_forward = self._consistent_reading()
        if self.device.type == "cuda":
            allocated = int(torch.cuda.memory_allocated(self.device))
            fields["torch_allocated"] = allocated
            fields["torch_reserved"] = int(torch.cuda.memory_reserved(self.device))
            fields["torch_max_allocated"] = int(torch.cuda.max_memory_allocated(self.device))
            if tracker is None:
                live = allocated
        elif tracker is not None:
            fields["cpu_live_tensors"] = live
            fields["cpu_live_tensors_peak"] = tracker.peak_bytes
        if categories and live is not None:
            rest = max(0, live - sum(categories.values()))
            if tracker is not None:
                categories["activations"] = min(rest, made_in_forward)
                categories["temporaries"] = rest - categories["activations"]
            else:
                categories["activations"] = rest
        if categories:
            fields["categories"] = categories
        return fields

    # -- writing ---------------------------------------------------------------------------

    def _peak_record(self) -> dict[str, Any] | None:
        """A sample at the instant of the highest live bytes since the last line, if that
        peak is clearly above the live bytes now (it fell between two samples)."""
        tracker = self._tracker
        if tracker is None or self.device.type == "cuda":  # CUDA figures come from torch itself
            return None
        peak, when, tags, phase, step = tracker.take_window()
        live = tracker.live_bytes
        if peak - live < max(4096, live // 1000):
            return None
        categories: dict[str, int] = {}
        for tag, nbytes in tags.items():
            name = _TAG_CATEGORY.get(tag, "temporaries")
            categories[name] = categories.get(name, 0) + nbytes
        for name in ("parameters", "gradients", "optimizer_states", "activations", "temporaries"):
            categories.setdefault(name, 0)
        if not categories.get("buffers"):
            categories.pop("buffers", None)
        record: dict[str, Any] = {
            "kind": "sample", "time": when, "step": step,
            "phase": phase if phase in _PHASE_NAMES else self._phase,
            "at_peak": True, "device": str(self.device),
        }
        record["cpu_live_tensors"] = peak
        record["cpu_live_tensors_peak"] = tracker.peak_bytes
        record["categories"] = categories
        return record

    def _write(self, kind: str, extra: dict[str, Any] | None = None) -> None:
        if self._closed or os.getpid() != self.pid:
            return
        with self._lock:
            try:
                peak = self._peak_record()
            except Exception:  # pragma: no cover - defensive
                peak = None
            if peak is not None:
                self._writer.write(peak)
            record: dict[str, Any] = {"kind": kind, "time": time.time(), "step": self.step, "phase": self._phase}
            if extra:
                record.update(extra)
            try:
                record.update(self.memory())
            except Exception as exc:  # never break the training job over a measurement
                record["error"] = f"{type(exc).__name__}: {exc}"
            self._writer.write(record)
            self._last_write = time.monotonic()

    def sample(self) -> None:
        """Write one sample now (in addition to the automatic ones)."""
        self._write("sample")

    def _sampler(self) -> None:
        while not self._stop.wait(self._interval):
            if time.monotonic() - self._last_write >= self._interval * 0.9:
                try:
                    self._write("sample")
                except Exception:  # pragma: no cover - defensive: the thread must not die loudly
                    pass

    # -- phases ----------------------------------------------------------------------------

    def mark(self, phase: str | Phase) -> None:
        """Enter ``phase`` (init, forward, backward, optimizer_step, idle) now.

        Entering forward after an optimizer step (or, without an optimizer, any forward)
        starts a new training step. Marking the phase the probe is already in does nothing.

        Raises:
            ProbeError: an unknown phase name.
        """
        name = phase.value if isinstance(phase, Phase) else str(phase)
        if name not in _PHASE_NAMES:
            raise ProbeError(f"unknown phase {name!r} (expected one of {sorted(_PHASE_NAMES)})")
        if self._closed:
            return
        with self._lock:
            if name == self._phase and name != Phase.INIT.value:
                return
            self._end_phase()
            if self._phase == Phase.OPTIMIZER_STEP.value:
                self._step_done = True
                if self._tracker is not None:
                    self._tracker.retag(self._state_tensors(), "optimizer_states")
            if name == Phase.OPTIMIZER_STEP.value:
                self._saw_optimizer_phase = True
            if name == Phase.FORWARD.value and (self._step_done or not self._saw_optimizer_phase):
                self.step += 1
                self._step_done = False
                now = time.monotonic()
                self._record_step = now - self._last_step_recorded >= self._min_step_interval
                if self._record_step:
                    self._last_step_recorded = now
            self._phase = name
            if self._tracker is not None:
                self._tracker.tag = name
                self._tracker.step = self.step
            if self._record_step or name == Phase.INIT.value:
                self._write("phase")

    def _phase_peak_bytes(self) -> int | None:
        """The highest memory since the previous phase boundary, and start a new period.

        CUDA: ``torch.cuda.max_memory_allocated`` then ``torch.cuda.reset_peak_memory_stats``
        (torch/cuda/memory.py), so every peak statistic of the device restarts at each phase
        boundary. With ``reset_peak_stats=False`` nothing is reset: the process-wide peak is
        read, and a phase gets a high-water mark only when that peak rose inside it (then it
        is exact); otherwise None. CPU: the tracker's highest live bytes since the last call
        (no tracker: None).
        """
        torch = self._torch
        if self.device.type == "cuda":
            peak = int(torch.cuda.max_memory_allocated(self.device))
            if self._reset_peak_stats:
                torch.cuda.reset_peak_memory_stats(self.device)
                return peak
            rose = peak > self._last_cuda_max
            self._last_cuda_max = peak
            return peak if rose else None
        if self._tracker is not None:
            return self._tracker.take_phase_peak()
        return None

    def _allocated_now(self) -> int | None:
        """The probe's figure now (bytes): ``torch.cuda.memory_allocated`` on CUDA, the
        tracker's live tensor bytes on the CPU (None without a tracker)."""
        if self.device.type == "cuda":
            return int(self._torch.cuda.memory_allocated(self.device))
        if self._tracker is not None:
            return int(self._tracker.live_bytes)
        return None

    def _end_phase(self, final: bool = False) -> None:
        """Write the ending phase's high-water mark as a ``peak`` record (see
        ``gpumem_tui.telemetry.probe_source``). Phases of steps that are not recorded
        (``min_step_interval``) are folded into the same phase of the next recorded step:
        its record then says ``steps`` > 1 and starts where the first folded phase started."""
        now = time.time()
        start, self._phase_start = self._phase_start, now
        if start is None:  # attach: start the first period here
            with contextlib.suppress(Exception):
                self._phase_peak_bytes()
                self._start_split()
            return
        try:
            peak = self._phase_peak_bytes()
            end_bytes = self._allocated_now()
        except Exception:  # never break the training job over a measurement
            peak = end_bytes = None
        phase = self._phase
        split: dict[str, int] | None = None
        if self._split is not None and peak is not None:
            with contextlib.suppress(Exception):
                now_categories = self.categories()  # the end of this phase, the start of the next
                split = self._split.split(phase, peak, now_categories)
                self._start_split(now_categories)
        if peak is not None:
            first, high, steps, parts, _ = self._pending_peaks.pop(phase, (start, 0, 0, None, None))
            if split is not None and peak >= high:
                parts = split
            self._pending_peaks[phase] = (first, max(high, peak), steps + 1, parts, end_bytes)
        if final or self._record_step or phase == Phase.INIT.value:
            pending = self._pending_peaks if final else {phase: self._pending_peaks.get(phase)}
            for name, entry in list(pending.items()):
                if entry is None:
                    continue
                first, high, steps, parts, end = entry
                self._pending_peaks.pop(name, None)
                record: dict[str, Any] = {
                    "kind": "peak", "time": now, "start": first, "step": self.step, "phase": name,
                    "device": str(self.device), "peak_bytes": high, "steps": steps,
                }
                if parts:
                    record["categories"] = parts
                if end is not None:
                    record["end_bytes"] = end
                self._writer.write(record)

    def _start_split(self, categories: dict[str, int] | None = None) -> None:
        """Tell the CUDA peak split that a phase begins now (see probe/peak_split.py)."""
        if self._split is None:
            return
        params = list(self.model.parameters())
        self._split.phase_started(
            categories if categories is not None else self.categories(),
            int(self._torch.cuda.memory_allocated(self.device)),
            {id(p) for p in params if p.grad is not None},
        )

    @property
    def phase_name(self) -> str:
        """The current phase's name."""
        return self._phase

    @contextlib.contextmanager
    def phase(self, name: str | Phase) -> Iterator[None]:
        """``with probe.phase("forward"): ...`` marks the block; afterwards the phase before it
        is current again (marked too). Raises ProbeError for an unknown name."""
        previous = self._phase
        self.mark(name)
        try:
            yield
        finally:
            self.mark(previous if previous != Phase.INIT.value else Phase.IDLE.value)

    # -- hooks -----------------------------------------------------------------------------

    def _install_hooks(self, step_start_hook: bool = True) -> None:
        model = self.model
        self._hook_handles.append(model.register_forward_pre_hook(self._forward_pre_hook))
        self._kwargs_handle = model.register_forward_pre_hook(self._forward_kwargs_hook, with_kwargs=True)
        self._hook_handles.append(self._kwargs_handle)
        self._hook_handles.append(model.register_forward_hook(self._forward_hook))
        if self.optimizer is not None:
            pre = [self.optimizer.register_step_pre_hook(self._step_pre_hook)] if step_start_hook else []
            self._hook_handles += [*pre, self.optimizer.register_step_post_hook(self._step_post_hook)]
        if self._tracker is not None or self._split is not None:
            # Label each gradient as such once autograd stored it (torch >= 2.1), so the
            # breakdown at a peak between two samples still names the gradients; on CUDA
            # note how many gradient bytes existed when backward's peak happened.
            for param in model.parameters():
                if param.requires_grad and hasattr(param, "register_post_accumulate_grad_hook"):
                    self._hook_handles.append(param.register_post_accumulate_grad_hook(self._grad_hook))

    def _grad_hook(self, param: Any) -> None:
        tracker = self._tracker
        if tracker is not None and not self._closed and param.grad is not None:
            try:
                tracker.retag((param.grad,), "gradients")
            except Exception:  # pragma: no cover - labelling is best effort, never fatal
                pass
        split = self._split
        if split is not None and not self._closed and self._phase == Phase.BACKWARD.value:
            try:
                split.gradient_stored(param, self._cuda_peak())
            except Exception:  # pragma: no cover - the split is best effort, never fatal
                pass

    def _cuda_peak(self) -> int:
        """torch max allocated of the measured device (bytes). The C entry point that
        ``torch.cuda.memory_stats`` wraps is used when present: the public function flattens
        a nested dict of ~100 entries in Python, and this runs once per parameter in backward
        (torch/cuda/memory.py, memory_stats_as_nested_dict)."""
        torch = self._torch
        stats = getattr(torch._C, "_cuda_memoryStats", None)
        if stats is not None:
            with contextlib.suppress(Exception):
                return int(stats(self.device.index)["allocated_bytes"]["all"]["peak"])
        return int(torch.cuda.max_memory_allocated(self.device))

    def _guard(self, func, *args) -> None:
        try:
            func(*args)
        except Exception as exc:  # a hook must never break the training step
            warnings.warn(f"gpumem_tui.probe disabled after an error: {exc!r}", RuntimeWarning, stacklevel=3)
            self.close()

    def _forward_pre_hook(self, module: Any, args: Any) -> None:
        self._guard(self.mark, Phase.FORWARD.value)

    def _forward_hook(self, module: Any, args: Any, output: Any) -> None:
        self._guard(self._after_forward, output)

    def _after_forward(self, output: Any) -> None:
        torch = self._torch
        if not torch.is_grad_enabled():
            self.mark(Phase.IDLE.value)  # inference: nothing follows this forward
            return
        # The start of backward: prefer the loss the model returned (HF ModelOutput.loss);
        # otherwise whichever output tensor backward reaches first.
        loss = getattr(output, "loss", None)
        has_loss = isinstance(loss, torch.Tensor)
        targets = [loss] if has_loss else output_tensors(output, torch)
        if has_loss and not self._kept_output_published:
            self._output_refs = tuple(weakref.ref(t) for t in output_tensors(output, torch) if t is not loss)
        if self._split is not None:
            outputs = [t for t in output_tensors(output, torch) if t is not loss]
            self._split.logits_and_loss = output_and_loss_bytes(outputs, loss if has_loss else None, torch)
        fired = [False]

        def on_backward(grad_outputs: Any) -> None:
            if not fired[0]:
                fired[0] = True
                self._guard(self.mark, Phase.BACKWARD.value)
                self._guard(self._check_kept_output)

        for tensor in targets:
            node = tensor.grad_fn
            if node is not None:
                node.register_prehook(on_backward)

    def _check_kept_output(self) -> None:
        """At the start of backward: if tensors of the model output other than the loss (the
        logits) are still alive, the training loop holds the output through backward; publish
        ``keep_outputs`` (a TrainingSpec field) and ``kept_output_bytes`` once, in a new info
        line, so the estimator counts the logits it keeps."""
        refs, self._output_refs = self._output_refs, ()
        if self._kept_output_published or not refs:
            return
        alive = [t for t in (r() for r in refs) if t is not None]
        if not alive:
            return
        storages: dict[int, int] = {}
        for tensor in alive:
            with contextlib.suppress(RuntimeError, NotImplementedError):
                storage = tensor.untyped_storage()
                storages[storage.data_ptr() or id(storage)] = int(storage.nbytes())
        self._kept_output_published = True
        self._publish_setup({"keep_outputs": True, "kept_output_bytes": sum(storages.values())})

    def _publish_setup(self, keys: dict[str, Any]) -> None:
        """Add ``keys`` to the published setup: a new info line (readers replace the setup
        they had with the newest info line; probe_source.py ``_handle_info``)."""
        with self._lock:
            if self._closed:
                return
            info = dict(self._info)
            info["setup"] = {**info["setup"], **keys}
            info["time"] = time.time()
            self._info = info
            self._writer.update_info(info)

    def _forward_kwargs_hook(self, module: Any, args: Any, kwargs: Any) -> None:
        """The first forward's ``use_cache`` argument (``register_forward_pre_hook(...,
        with_kwargs=True)``, torch/nn/modules/module.py), published once; then the hook goes."""
        handle, self._kwargs_handle = self._kwargs_handle, None
        if handle is None:
            return
        with contextlib.suppress(Exception):
            handle.remove()
        value = use_cache_of_call(kwargs)
        if value is not None:
            self._guard(self._publish_setup, {"use_cache": value})

    def watch_loss(self, loss: Any) -> None:
        """Mark backward when ``loss.backward()`` starts (for a loss computed outside the
        model; without this, backward is marked when it reaches the model's output)."""
        node = getattr(loss, "grad_fn", None)
        if node is not None:
            def on_backward(grad_outputs: Any) -> None:
                self._guard(self.mark, Phase.BACKWARD.value)  # returns None: gradients untouched

            node.register_prehook(on_backward)

    def _step_pre_hook(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self._guard(self.mark, Phase.OPTIMIZER_STEP.value)

    def _step_post_hook(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self._guard(self.mark, Phase.IDLE.value)

    # -- lifetime --------------------------------------------------------------------------

    def close(self) -> None:
        """Stop: remove hooks, stop the tracker and the sampler, write the end record.
        Idempotent; also runs at interpreter exit."""
        global _active
        if self._closed:
            return
        if os.getpid() != self.pid:  # a forked child: leave the parent's stream alone
            self._closed = True
            return
        with self._lock:
            if self._closed:
                return
            self._end_phase(final=True)
            self._write("sample")
            self._closed = True
            self._writer.write({"kind": "end", "time": time.time(), "step": self.step})
            self._writer.close()
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=2.0)
        for handle in self._hook_handles:
            with contextlib.suppress(Exception):
                handle.remove()
        self._hook_handles.clear()
        if self._tracker is not None:
            with contextlib.suppress(Exception):
                self._tracker.stop()
        with contextlib.suppress(Exception):
            atexit.unregister(self.close)
        with _active_lock:
            if _active is self:
                _active = None

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran (or a hook failed and disabled the probe)."""
        return self._closed

    def __enter__(self) -> Probe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def attach(model: Any, optimizer: Any = None, **kwargs: Any) -> Probe:
    """Start probing this process's training: phases are marked and memory streamed.

    Example (three lines in a training script)::

        import gpumem_tui.probe
        probe = gpumem_tui.probe.attach(model, optimizer, batch=8, seq=512, task="train")
        ...  # train as usual; probe.close() at the end (also runs at exit)

    Publishes once: the HF model config (``model.config.to_dict()``, or ``config=``), batch,
    seq, dtype (default: the first floating parameter's), optimizer class and
    hyperparameters, task, device, pid, and what it reads of the job
    (:func:`gpumem_tui.probe.job_setup.detected_setup`: rank, parallel wrappers, checkpointing,
    quantization, fp32 casts); the first forward's ``use_cache`` in a second info line. Streams, as JSONL to
    ``default_probe_dir()/<pid>.jsonl`` (or ``directory=``), samples at phase boundaries and
    every ``interval`` seconds (default 0.1) in between: CUDA ``torch.cuda.memory_allocated``
    / ``memory_reserved`` / ``max_memory_allocated``; CPU the live tensor bytes of a tracker
    (``gpumem_tui.probe.tracker``; ``track_tensors=False`` turns it off), with the bytes
    split into parameters, gradients, optimizer_states, activations (and temporaries, buffers).

    High-water marks: when a phase ends the probe writes the highest memory reached inside it
    (a ``peak`` record), so a spike shorter than ``interval`` is still measured. On CUDA this
    **resets torch's peak statistics** (``torch.cuda.reset_peak_memory_stats``) at every phase
    boundary: a ``torch.cuda.max_memory_allocated`` / ``max_memory_reserved`` of your own then
    covers only the current phase (and so does the streamed ``torch_max_allocated``).
    ``reset_peak_stats=False`` leaves them alone; a phase then gets a high-water mark only
    when the process-wide peak rose inside it. On the CPU the tracker keeps its own peak;
    nothing of torch's is touched. A CUDA peak record also splits the peak as far as the probe
    can see (:mod:`gpumem_tui.probe.peak_split`: parameters, gradients, optimizer states,
    logits and loss buffers, and the unsplit rest), at the cost of one read of the allocator's
    statistics per parameter in backward.

    Keyword arguments: batch (micro-batch size), seq (sequence length), dtype (of the
    parameters; default the first floating parameter's), task (the estimator's: "train",
    "lora", "qlora", "inference"), config (a HF-style config dict for non-HF models),
    directory, interval, min_step_interval (seconds), track_tensors, hooks (False: mark phases
    only with ``probe.phase``/``probe.mark``), device, max_file_bytes, reset_peak_stats,
    step_start_hook (False: the caller marks the step's start; Lightning's ``optimizer.step(closure)``
    runs forward and backward in it), extra: setup keys as TrainingSpec fields (``{"zero": 2}``).

    Loss computed outside the model: call ``probe.watch_loss(loss)`` before ``backward()`` to
    mark backward at its true start (otherwise it is marked when backward reaches the model's
    output, after the loss's own backward).

    Raises:
        ProbeError: not a Module/Optimizer, bad intervals or batch/seq, or a probe already
            attached in this process (close it first). A stream that cannot be written (or a
            directory refused as unsafe: another user's, or writable by others) is not an
            error: one ``RuntimeWarning`` says why, and the probe marks phases without streaming.
    """
    global _active
    with _active_lock:
        if _active is not None and not _active.closed:
            raise ProbeError("a probe is already attached in this process; call probe.close() first")
        probe = Probe(model, optimizer, **kwargs)
        _active = probe
    return probe


def _after_fork_in_child() -> None:
    # The child inherits the parent's probe object but not its thread; it must not write.
    probe = _active
    if probe is not None:
        probe._closed = True
        if probe._tracker is not None:
            probe._tracker.enabled = False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

__all__ = ["Probe", "ProbeError", "attach"]
