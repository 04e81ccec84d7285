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
    return case, estimate_job(arch, TrainingSpec(**case["spec"]), plan_from_measure(case["strategy"]))


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
    """Forward, backward and the optimizer step of the rank with the largest peak, not only
    the peak: the FSDP1 flat-parameter step (NO_SHARD peaks there) and FSDP2's sharded-tensor
    step. ZeroRedundancyOptimizer's step is compared with the largest rank in that phase: the
    estimate is the most loaded optimizer partition's rank (it holds the largest tensor),
    while another rank may peak a few bytes higher in backward."""
    case, job = _job(path)
    estimated = {p.name: p.live_bytes for p in job.largest.estimate.phases}
    top = max(case["ranks"], key=lambda r: r["peak_bytes"])
    measured = {p["name"]: p["live_bytes"] for p in top["phases"]}
    if case["strategy"]["kind"] == "zero-redundancy":
        measured["optimizer_step"] = max(p["live_bytes"] for r in case["ranks"] for p in r["phases"]
                                         if p["name"] == "optimizer_step")
    compared = [name for name in measured if name in estimated]
    assert {"forward", "backward", "optimizer_step"} <= set(compared)
    for name in compared:
        error = estimated[name] / measured[name] - 1
        assert abs(error) <= _CASE_TOLERANCE, f"{path.stem} {name}: {error:+.3%}"
