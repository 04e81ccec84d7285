"""Per-rank estimates against per-rank ground truth: ``gpumem-tui measure --nproc N --on cpu``
(torch 2.13 CPU over gloo, FSDPMemTracker / MemTracker), saved under ``tests/data/ranks``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpumem_tui.estimator.architecture import architecture_from_config
from gpumem_tui.estimator.parallel.configs_read import plan_from_measure
from gpumem_tui.estimator.parallel.per_rank import estimate_job
from gpumem_tui.estimator.spec import TrainingSpec

CASES = sorted((Path(__file__).parent / "data" / "ranks").glob("*.json"))
_MODELLED = ("fsdp2", "fsdp1", "ddp", "zero-redundancy", "tp")
#: the per-rank target (issue 21): every case within 2 %, every strategy's median within 0.5 %;
#: the cases are held tighter (0.2 %), which implies both
_CASE_TOLERANCE = 0.002


def _job(path: Path):
    case = json.loads(path.read_text())
    arch = architecture_from_config(case["model"], name=path.stem)
    fields = dict(case["spec"])
    fields["lora_targets"] = tuple(fields["lora_targets"])
    return case, estimate_job(arch, TrainingSpec(**fields), plan_from_measure(case["strategy"]))


def test_the_ground_truth_is_there() -> None:
    kinds = {json.loads(p.read_text())["strategy"]["kind"] for p in CASES}
    assert set(_MODELLED) <= kinds


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_largest_rank_matches_the_measured_peak(path: Path) -> None:
    case, job = _job(path)
    assert case["strategy"]["kind"] in _MODELLED
    measured = max(r["peak_bytes"] for r in case["ranks"])
    error = job.largest.estimate.peak_bytes / measured - 1
    assert abs(error) <= _CASE_TOLERANCE, f"{path.stem}: {error:+.2%}"
    assert job.largest.ranks == case["strategy"]["world_size"]


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_every_phase_matches_the_measured_rank(path: Path) -> None:
    """Forward, backward and the optimizer step of the largest rank, not only the peak: the
    FSDP1 flat-parameter step (NO_SHARD peaks there) and FSDP2's sharded-tensor step.
    ZeroRedundancyOptimizer's step is the one phase left out: the most loaded rank's largest
    tensor is not modelled (the estimate is high there, and that phase is not its peak)."""
    case, job = _job(path)
    rank = max(case["ranks"], key=lambda r: r["peak_bytes"])
    estimated = {p.name: p.live_bytes for p in job.largest.estimate.phases}
    skip = {"optimizer_step"} if case["strategy"]["kind"] == "zero-redundancy" else set()
    compared = [p for p in rank["phases"] if p["name"] in estimated and p["name"] not in skip]
    assert {"forward", "backward"} <= {p["name"] for p in compared}
    for phase in compared:
        error = estimated[phase["name"]] / phase["live_bytes"] - 1
        assert abs(error) <= _CASE_TOLERANCE, f"{path.stem} {phase['name']}: {error:+.3%}"
