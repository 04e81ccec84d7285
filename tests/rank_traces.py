"""Multi-rank traces for tests: one torchrun-style job of several ranks, written with the
project's own recorder (TraceRecorder -> serialize), from probe-like records.

Each probed rank publishes what the probe publishes in its ProbeInfo setup (model config,
batch, seq, dtype, optimizer, and ``job_id`` / ``rank`` / ``world_size`` / ``local_rank``)
and sends allocated-bytes samples; NVML lists every rank on its GPU. A rank may be left
unprobed: its identity then comes only from its environment, as the host layer records it
(``ProcessSample.launch``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from gpumem_tui.estimator.architecture import CATALOGUE_DIR
from gpumem_tui.telemetry.launch import rank_launch
from gpumem_tui.telemetry.model import (
    DeviceSample,
    ProbeInfo,
    ProbeSample,
    ProcessSample,
    ProcessType,
    Snapshot,
)
from gpumem_tui.telemetry.replay import TraceRecorder

MiB = 1 << 20
GiB = 1 << 30
GPT2 = json.loads((CATALOGUE_DIR / "gpt2.json").read_text())
JOB = "10.0.0.7:29500"
T0 = 1_700_000_000.0


@dataclass(frozen=True)
class Rank:
    """One rank: its PID, rank, GPU, the torch-allocated peak its samples reach and the NVML
    used figure listed for it; ``probed`` False: no probe, identity from its environment."""

    pid: int
    rank: int
    gpu: int
    allocated_peak: int
    nvml_used: int
    probed: bool = True
    world_size: int = 3
    job_id: str = JOB


def default_ranks() -> list[Rank]:
    """Three ranks of one job: two probed (rank 1 uses more memory), one without the probe."""
    return [
        Rank(2001, 0, 0, 2300 * MiB, 2900 * MiB),
        Rank(2002, 1, 1, 2700 * MiB, 3130 * MiB),
        Rank(2003, 2, 2, 0, 3000 * MiB, probed=False),
    ]


def probe_info(r: Rank) -> ProbeInfo:
    setup = {"task": "train", "batch": 2, "seq": 128, "dtype": "float32", "device": f"cuda:{r.gpu}",
             "optimizer": "AdamW", "grad_ckpt": False, "attention": "sdpa",
             "job_id": r.job_id, "rank": r.rank, "world_size": r.world_size, "local_rank": r.rank}
    return ProbeInfo(pid=r.pid, model_config=GPT2, setup=tuple(setup.items()))


def snapshots(ranks: list[Rank], steps: int = 4, other: bool = True) -> list[Snapshot]:
    """``steps`` polls, one second apart; samples rise to each rank's peak at the last one."""
    out = []
    for i in range(steps):
        t = T0 + i
        devices = tuple(DeviceSample(g, "NVIDIA A100-SXM4-40GB", f"GPU-{g}", 40 * GiB, 4 * GiB, 50.0, 50.0, 200.0, 400.0)
                        for g in sorted({r.gpu for r in ranks}))
        processes = [
            ProcessSample(r.pid, r.gpu, ProcessType.COMPUTE, r.nvml_used * (i + 1) // steps, 90.0, "alice",
                          f"python train.py --local-rank {r.rank}", 100.0, 2 * GiB, T0 - 120,
                          launch=None if r.probed else rank_launch(r.job_id, r.rank, r.world_size, r.rank))
            for r in ranks
        ]
        if other:
            processes.append(ProcessSample(3001, 0, ProcessType.COMPUTE, 700 * MiB, 5.0, "bob", "python serve.py",
                                           3.0, 1 * GiB, T0 - 60))
        probes = tuple(ProbeSample(t + 0.5, r.pid, f"cuda:{r.gpu}", r.allocated_peak * (i + 1) // steps,
                                   r.allocated_peak * (i + 1) // steps + 64 * MiB)
                       for r in ranks if r.probed)
        infos = tuple(probe_info(r) for r in ranks if r.probed) if i == 0 else ()
        out.append(Snapshot(time=t + 0.6, driver_version="550.54.15", devices=devices,
                            processes=tuple(processes), probes=probes, probe_infos=infos))
    return out


def write_trace(path: Path, ranks: list[Rank] | None = None, **kwargs: object) -> Path:
    """The job's snapshots written as a trace at ``path`` (returned)."""
    with TraceRecorder(path) as rec:
        for snap in snapshots(ranks if ranks is not None else default_ranks(), **kwargs):  # type: ignore[arg-type]
            rec.write(snap)
    return path
