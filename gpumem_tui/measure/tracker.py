"""Live-tensor memory tracker: torch's ``MemTracker`` plus per-phase peaks and tensor tags.

torch only; import this module lazily (it imports torch at module level).

``PhaseMemTracker`` subclasses ``torch.distributed._tools.mem_tracker.MemTracker`` (torch >= 2.5),
which attributes every tensor storage created or touched inside its context to one of
Parameter / Buffer / Gradient / Activation / Temp / Optstate and keeps a running total of the
live bytes. This subclass adds what the estimator comparison needs and MemTracker does not give:

- a peak per named phase (``tracker.phase = "step2.backward"``), with the live storages at that
  peak, so the peak can be split further after the run (logits vs other activations, optimizer
  states vs optimizer temporaries, KV cache);
- tags: storages whose tensor's last dimension is the vocabulary size and whose leading
  dimensions hold at least ``logits_rows`` rows are tagged ``logits`` when created (logits, their
  fp32 upcast, log-probabilities and their gradients); ``tag_tensors`` tags others after the fact
  (optimizer states, KV cache);
- for the largest live tensors at a peak: the ATen op that created them, shape and dtype.

Byte figures are storage bytes (``untyped_storage().nbytes()``, no allocator rounding except the
512 B CUDA rounding MemTracker applies on CUDA): comparable to ``torch.cuda.memory_allocated``,
not to reserved memory nor to NVML "used".

It relies on MemTracker internals (``_track``, ``_update_snap``, ``_update_peak_stats``,
``_curr_mem_snap``, ``_WINFO``; ``memory_tracking``, ``_mod_tracker.parents``, ``_peak_mem``,
``_peak_mem_snap``, whose peak update it repeats without walking every module at every op),
checked against torch 2.13; ``check_supported()`` and the constructor raise ``RuntimeError``
with a clear message if they are missing.
"""

from __future__ import annotations

from copy import deepcopy
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.distributed._tools import mem_tracker as _mt
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: F401  (documents the base)
from torch.utils.weak import WeakIdKeyDictionary

_REQUIRED = ("_track", "_update_snap", "_update_peak_stats", "_curr_mem_snap", "_WINFO")
#: what a MemTracker instance holds that :meth:`PhaseMemTracker._update_module_peaks` uses
_REQUIRED_STATE = ("memory_tracking", "_mod_tracker", "_peak_mem", "_peak_mem_snap", "_curr_mem_snap")


@dataclass
class LiveEntry:
    """One live storage at a peak: its bytes, MemTracker category at that moment, and metadata."""

    info: Any  # the MemTracker _WeakRefInfo (identity used for tags set after the peak)
    nbytes: int
    reftype: str


@dataclass
class PhasePeak:
    """Peak of one phase: total live bytes (storage bytes) and the storages live at that moment."""

    name: str
    peak_bytes: int = -1
    live: list[LiveEntry] = field(default_factory=list)


def check_supported() -> None:
    """Raise ``RuntimeError`` if this torch's MemTracker lacks the internals the subclass uses."""
    missing = [name for name in _REQUIRED[:3] if not hasattr(_mt.MemTracker, name)]
    if missing:
        raise RuntimeError(
            f"torch {torch.__version__}: MemTracker lacks {', '.join(missing)}; "
            "gpumem-tui measure is checked against torch 2.13"
        )


class _StatsByModule(WeakIdKeyDictionary):
    """MemTracker's ``memory_tracking`` (module -> its ``_ModMemStats``), which also keeps
    each module name's stats at hand (:attr:`by_fqn`): a peak update then visits the modules
    running now instead of walking every tracked module at every op. Stats of a module that
    died stay in ``by_fqn`` (updating them changes nothing reported)."""

    def __init__(self) -> None:
        super().__init__()
        self.by_fqn: dict[str, list[Any]] = {}

    def __setitem__(self, module: Any, stats: Any) -> None:
        super().__setitem__(module, stats)
        same_name = self.by_fqn.setdefault(stats.mod_fqn, [])
        if not any(known is stats for known in same_name):
            same_name.append(stats)

    def clear(self) -> None:
        super().clear()
        self.by_fqn.clear()


class _NoHandle:
    """Stands in for a hook handle on a frozen parameter (nothing to remove)."""

    def remove(self) -> None:
        return None


class PhaseMemTracker(_mt.MemTracker):
    """MemTracker with named phases, per-phase peaks and tensor tags (see module docstring).

    Args:
        vocab_size: V; tensors shaped (..., V) with at least ``logits_rows`` leading rows are
            tagged ``logits``. 0 disables the rule.
        logits_rows: minimum product of the leading dimensions for the logits rule (b*(s-1) for
            training, so the (V, h) embedding gradient never matches).
    """

    def __init__(self, vocab_size: int = 0, logits_rows: int = 1, *tracker_args: Any) -> None:
        check_supported()
        super().__init__(*tracker_args)  # FSDPPhaseMemTracker passes (module, optimizer) on
        missing = [name for name in _REQUIRED_STATE if not hasattr(self, name)]
        if missing:
            raise RuntimeError(f"torch {torch.__version__}: MemTracker lacks {', '.join(missing)}; "
                               "gpumem-tui measure is checked against torch 2.13")
        self.memory_tracking = _StatsByModule()  # empty until the first module runs
        self.phase: str = "setup"
        self.phase_peaks: dict[str, PhasePeak] = {}
        self._live: dict[int, Any] = {}  # id(winfo) -> winfo
        self.tags: dict[int, str] = {}  # id(winfo) -> tag
        self.meta: dict[int, tuple[str, tuple[int, ...], str]] = {}  # id(winfo) -> (op, shape, dtype)
        self._keep: dict[int, Any] = {}  # keeps tagged winfos alive so ids stay unique
        self._vocab = int(vocab_size)
        self._logits_rows = max(1, int(logits_rows))
        self._func_name = ""
        #: module FQNs whose forward / backward peak moments keep their live storages (diagnosis)
        self.capture_modules: set[str] = set()
        self.module_live: dict[str, list[LiveEntry]] = {}

    # --- hooks into MemTracker -------------------------------------------------------------
    def _update_snap(self, u_type, winfo, old_mem_consumed=None, old_reftype=None):  # type: ignore[no-untyped-def]
        super()._update_snap(u_type, winfo, old_mem_consumed=old_mem_consumed, old_reftype=old_reftype)
        if u_type == _mt._UpdateType.ADD:
            self._live[id(winfo)] = winfo
            self._keep[id(winfo)] = winfo
        elif u_type == _mt._UpdateType.DEL:
            self._live.pop(id(winfo), None)

    def _track(self, reftype, t):  # type: ignore[no-untyped-def]
        storages = _mt.get_untyped_storages(t)
        new = [st for st in storages if self._WINFO.get(st, (None, None))[0] is None]
        super()._track(reftype, t)
        for st in new:
            winfo, _ = self._WINFO.get(st, (None, None))
            if winfo is None or id(winfo) in self.meta:
                continue
            shape = tuple(int(d) for d in t.shape)
            self.meta[id(winfo)] = (self._func_name, shape, str(t.dtype).removeprefix("torch."))
            if self._vocab and len(shape) >= 2 and shape[-1] == self._vocab:
                rows = 1
                for d in shape[:-1]:
                    rows *= d
                if rows >= self._logits_rows:
                    self.tags[id(winfo)] = "logits"

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self._func_name = str(getattr(func, "__name__", func))
        return super().__torch_dispatch__(func, types, args, kwargs)

    def _update_peak_stats(self, peak_state):  # type: ignore[no-untyped-def]
        if self.capture_modules:
            before = {
                st.mod_fqn: dict(st.local_peak) for st in self.memory_tracking.values()
                if st.mod_fqn in self.capture_modules
            }
        self._update_module_peaks(peak_state)
        if self.capture_modules:
            for st in self.memory_tracking.values():
                if st.mod_fqn in before and st.local_peak != before[st.mod_fqn]:
                    key = f"{st.mod_fqn}:{'backward' if peak_state == _mt._ModState.PEAK_BW else 'forward'}"
                    self.module_live[key] = [
                        LiveEntry(w, int(w.mem_consumed), str(getattr(w.reftype, "value", w.reftype)))
                        for w in self._live_now()
                    ]
        total = self.current_bytes()
        peak = self.phase_peaks.get(self.phase)
        if peak is None:
            peak = self.phase_peaks[self.phase] = PhasePeak(self.phase)
        if total > peak.peak_bytes:
            peak.peak_bytes = total
            peak.live = [
                LiveEntry(w, int(w.mem_consumed), str(getattr(w.reftype, "value", w.reftype)))
                for w in self._live_now()
            ]

    def _update_module_peaks(self, peak_state):  # type: ignore[no-untyped-def]
        """``MemTracker._update_peak_stats`` (torch 2.13) with the same updates: each running
        module's peak for ``peak_state`` (with a copy of the snapshot at it) and the global
        peak. torch walks every tracked module at every op (hundreds in a real model, through a
        weak-key dictionary) to find the running ones (``ModTracker.parents``, a few names);
        here the running names are looked up in :attr:`_StatsByModule.by_fqn`."""
        curr_snap = self._curr_mem_snap
        by_fqn = self.memory_tracking.by_fqn
        for name in self._mod_tracker.parents:
            for mod_stats in by_fqn.get(name, ()):
                if peak_state in mod_stats.snapshots:
                    for dev, dev_snap in curr_snap.items():
                        if mod_stats.local_peak.get(dev, 0) < dev_snap[_mt._TOTAL_KEY]:
                            mod_stats.local_peak[dev] = dev_snap[_mt._TOTAL_KEY]
                            mod_stats.snapshots[peak_state][-1][dev] = deepcopy(dev_snap)
        for dev, dev_snap in curr_snap.items():
            if self._peak_mem.get(dev, 0) < dev_snap[_mt._TOTAL_KEY]:
                self._peak_mem[dev] = dev_snap[_mt._TOTAL_KEY]
                self._peak_mem_snap[dev] = deepcopy(dev_snap)

    def _track_module_params_and_buffers(self, module, install_grad_hooks=True):  # type: ignore[no-untyped-def]
        # MemTracker registers a gradient hook on every parameter, which torch refuses for frozen
        # ones (LoRA); a placeholder handle makes it skip them.
        if install_grad_hooks:
            for param in module.parameters():
                if not param.requires_grad and self._param_to_grad_hook_handles.get(param, None) is None:
                    self._param_to_grad_hook_handles[param] = (_NoHandle(), _NoHandle())
        return super()._track_module_params_and_buffers(module, install_grad_hooks=install_grad_hooks)

    def _live_now(self) -> list[Any]:
        """The live storages' infos, copied in one step before anything walks them: building
        the entries allocates, a garbage collection can then free a storage, and its weakref
        callback (:meth:`_update_snap`) removes it from ``_live`` -- mid-walk, "dictionary
        changed size during iteration" (seen once in a rank of ``measure --nproc``). Copying a
        dict's values allocates no tracked object, so no collection runs inside it."""
        return list(self._live.values())

    # --- public helpers ------------------------------------------------------------------------
    def current_bytes(self) -> int:
        """Live tracked bytes now, summed over devices."""
        return int(sum(snap.get(_mt._TOTAL_KEY, 0) for snap in self._curr_mem_snap.values()))

    def start_phase(self, name: str) -> None:
        """Enter phase ``name``; its peak starts at the current live bytes (re-entering a phase,
        e.g. the next micro-batch's forward, keeps the larger peak)."""
        self.phase = name
        total = self.current_bytes()
        peak = self.phase_peaks.get(name)
        if peak is not None and peak.peak_bytes >= total:
            return
        peak = self.phase_peaks[name] = PhasePeak(name)
        peak.peak_bytes = total
        peak.live = [
            LiveEntry(w, int(w.mem_consumed), str(getattr(w.reftype, "value", w.reftype)))
            for w in self._live_now()
        ]

    def tag_tensors(self, tensors: Any, tag: str) -> None:
        """Tag the storages of every tensor in ``tensors`` (any nesting) with ``tag``."""
        flat, _ = torch.utils._pytree.tree_flatten(tensors)
        for t in flat:
            if not isinstance(t, torch.Tensor):
                continue
            for st in _mt.get_untyped_storages(t):
                winfo, _ = self._WINFO.get(st, (None, None))
                if winfo is not None:
                    self.tags[id(winfo)] = tag

    def tag_of(self, entry: LiveEntry) -> str | None:
        """The tag of a live entry, or None."""
        return self.tags.get(id(entry.info))

    def describe(self, entry: LiveEntry) -> tuple[str, tuple[int, ...], str]:
        """(creating op, shape, dtype) of a live entry, ("?", (), "?") if it was never seen by an op."""
        return self.meta.get(id(entry.info), ("?", (), "?"))


def fsdp_phase_tracker(model: Any, optimizer: Any, vocab_size: int = 0, logits_rows: int = 1) -> PhaseMemTracker:
    """A :class:`PhaseMemTracker` built on torch's FSDP2 tracker
    (``torch.distributed._tools.fsdp2_mem_tracker.FSDPMemTracker(model, optimizer)``).

    ``model`` must be the root module after ``fully_shard``. Its categories are FSDP2's
    (``_FSDPRefType``): Sharded Param, Unsharded Param, Buffer, Sharded Grad, Unsharded Grad,
    Activation, Temp, All Gather, Reduce Scatter, OptState, Inputs. FSDPMemTracker's own
    ``__torch_dispatch__`` calls the ``_track`` / ``_update_peak_stats`` hooks the phase tracker
    overrides, so phases and tags work the same (checked on torch 2.13 CPU, gloo).

    Raises:
        AssertionError: ``model`` is not an FSDP2 module (raised by FSDPMemTracker).
        RuntimeError: MemTracker internals missing (:func:`check_supported`).
    """
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker

    class FSDPPhaseMemTracker(PhaseMemTracker, FSDPMemTracker):  # MRO: phase hooks, then FSDP2's
        pass

    return FSDPPhaseMemTracker(vocab_size, logits_rows, model, optimizer)
