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
#: known gap (relative error allowed): FSDP1 NO_SHARD's optimizer step over flat parameters
#: keeps a full-size temporary the estimator does not model
_GAPS = {"llama-tiny-fsdp1-no_shard": 0.05}


def test_the_ground_truth_is_there() -> None:
    kinds = {json.loads(p.read_text())["strategy"]["kind"] for p in CASES}
    assert set(_MODELLED) <= kinds


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_largest_rank_matches_the_measured_peak(path: Path) -> None:
    case = json.loads(path.read_text())
    assert case["strategy"]["kind"] in _MODELLED
    arch = architecture_from_config(case["model"], name=path.stem)
    fields = dict(case["spec"])
    fields["lora_targets"] = tuple(fields["lora_targets"])
    job = estimate_job(arch, TrainingSpec(**fields), plan_from_measure(case["strategy"]))
    measured = max(r["peak_bytes"] for r in case["ranks"])
    error = job.largest.estimate.peak_bytes / measured - 1
    case_name = path.stem.rsplit("-w", 1)[0]
    assert abs(error) <= _GAPS.get(case_name, 0.002), f"{path.stem}: {error:+.2%}"
    assert job.largest.ranks == case["strategy"]["world_size"]
