"""The CUDA context of a probed process, measured on this box (issue 9: "when the dashboard
runs on the box, let the panel use the context measured there").

The CUDA context is in NVML's per-process "used" figure and in no torch figure, so it is
measured as a difference: NVML used minus torch reserved (``torch.cuda.memory_reserved``, as
the probe reports it). The two are read at different moments (NVML by the poller, reserved
by the probe every sampling interval), and reserved moves fast inside a step, so a plain
difference of the nearest readings is off by whatever the allocator did in between (on the
shared H100 trace such pairs give 520 MiB to 19 GiB). A reading counts only when it is
*bracketed*: two consecutive probe samples of the process, at most ``MAX_GAP_SECONDS``
apart, on a CUDA device, report the same reserved bytes, and the NVML reading lies between
them; then reserved was that value when NVML read "used" (the allocator's segments only
change by cudaMalloc / cudaFree, which would change reserved). On the H100 trace this gives
676-678 MiB early and 758 MiB (Llama-3.2-1B) / 742 MiB (GPT-2) for the rest, the figures
``../shared/validation/gpu/dev_truth_h100.jsonl`` measured at the peak.

The context grows while a job loads kernels (its first steps) and then stays, so the latest
bracketed reading is the process's context. :func:`init_context` turns it into the part the
estimator calls "after initialisation" by taking off what the estimator's CUDA profile says
the process's step loads, so that the same box figure also serves what-if estimates.

Headless: imports neither Textual nor torch. Bytes throughout.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from gpumem_tui.telemetry.model import ProbeSample, Snapshot

MAX_GAP_SECONDS = 1.0  # two probe samples further apart than this do not bracket a reading
MAX_CONTEXT_BYTES = 64 << 30  # the estimator's bound on a measured context (TrainingSpec)
_PENDING_LIMIT = 64  # NVML readings waiting for the probe sample that closes their bracket


@dataclass
class _Process:
    previous: ProbeSample | None = None  # the last two CUDA probe samples
    last: ProbeSample | None = None
    pending: list[tuple[float, int]] = field(default_factory=list)  # (time, NVML used) not yet bracketed
    context: int | None = None
    context_time: float = float("-inf")


class ContextMeter:
    """Per PID, the CUDA context measured as NVML used minus torch reserved (see module doc).

    Feed it in any order: :meth:`add_probe` for each probe sample, :meth:`add_nvml` for each
    NVML reading of a probed process on one GPU. :meth:`context` gives the latest bracketed
    figure in bytes, or None when there is none yet. Memory is bounded per PID; call
    :meth:`prune` with the PIDs still alive.
    """

    def __init__(self) -> None:
        self._by_pid: dict[int, _Process] = {}

    def add_probe(self, sample: ProbeSample) -> None:
        """A probe sample (only CUDA samples with a reserved figure count)."""
        if sample.reserved_bytes is None or not str(sample.device).lower().startswith("cuda"):
            return
        proc = self._by_pid.setdefault(sample.pid, _Process())
        if proc.last is not None and sample.time <= proc.last.time:
            return  # out of order or repeated: a bracket needs increasing times
        proc.previous, proc.last = proc.last, sample
        waiting, proc.pending = proc.pending, []
        for time, used in waiting:
            if time > sample.time:
                proc.pending.append((time, used))  # its bracket closes later
            else:
                self._try(proc, time, used)

    def add_nvml(self, pid: int, time: float, used_bytes: int | None) -> None:
        """NVML's "used" of ``pid`` read at ``time`` (epoch seconds), on its only GPU."""
        if used_bytes is None or used_bytes < 0:
            return
        proc = self._by_pid.setdefault(pid, _Process())
        if proc.last is not None and time <= proc.last.time:
            self._try(proc, time, used_bytes)
        else:
            proc.pending.append((time, used_bytes))
            del proc.pending[:-_PENDING_LIMIT]

    def add_snapshot(self, snap: Snapshot) -> None:
        """Everything one snapshot says: its probe samples, and the NVML readings of the
        processes that appear on exactly one GPU (a process on two GPUs has one reserved
        figure per device, and NVML's figures cannot be matched to them)."""
        for sample in snap.probes:
            self.add_probe(sample)
        rows: dict[int, list[int | None]] = {}
        for p in snap.processes:
            if p.device_index is not None:
                rows.setdefault(p.pid, []).append(p.used_memory_bytes)
        for pid, used in rows.items():
            if len(used) == 1 and pid in self._by_pid:
                self.add_nvml(pid, snap.time, used[0])

    def __bool__(self) -> bool:
        """True while it follows any PID (a probe sample or an NVML reading of one came)."""
        return bool(self._by_pid)

    def context(self, pid: int) -> int | None:
        """The latest bracketed context of ``pid`` in bytes, or None."""
        proc = self._by_pid.get(pid)
        return None if proc is None else proc.context

    def copy(self) -> ContextMeter:
        """An independent copy (probe samples are immutable and shared)."""
        other = ContextMeter()
        other._by_pid = {pid: replace(proc, pending=list(proc.pending)) for pid, proc in self._by_pid.items()}
        return other

    def prune(self, alive: Iterable[int]) -> None:
        """Forget PIDs not in ``alive`` (a reused PID starts afresh)."""
        keep = set(alive)
        for pid in [p for p in self._by_pid if p not in keep]:
            del self._by_pid[pid]

    @staticmethod
    def _try(proc: _Process, time: float, used: int) -> None:
        before, after = proc.previous, proc.last
        if before is None or after is None or not before.time <= time <= after.time:
            return
        if after.time - before.time > MAX_GAP_SECONDS or before.reserved_bytes != after.reserved_bytes:
            return
        value = used - int(after.reserved_bytes or 0)
        if 0 <= value <= MAX_CONTEXT_BYTES and time >= proc.context_time:
            proc.context, proc.context_time = value, time


def init_context(measured_bytes: int, architecture: Any, spec: Any) -> int:
    """The "after initialisation" part of a context measured while ``spec``'s step ran.

    ``measured_bytes`` is a process's context (NVML used minus reserved); the estimator's
    CUDA profile adds to the part after initialisation what a step of ``spec`` loads
    (:mod:`gpumem_tui.estimator.devices.cuda_context`, part 2). Returned: the measured figure
    minus that part 2, never below 0, so that ``TrainingSpec(measured_context=...)`` gives
    back ``measured_bytes`` for this process's own setup and the box's figure for another.
    """
    from gpumem_tui.estimator.components.context_and_reserve import cuda_context_bytes

    step_part = cuda_context_bytes(replace(spec, device="cuda", measured_context=0), architecture)
    return min(max(measured_bytes - step_part, 0), MAX_CONTEXT_BYTES)
