"""--suggest: changes that make a job fit, each checked with the same estimator, cheapest first."""

from __future__ import annotations

import json

from cli_inprocess import run_cli

from gpumem_tui.estimator.architecture import load_architecture
from gpumem_tui.estimator.estimate import estimate
from gpumem_tui.estimator.parallel import ParallelPlan
from gpumem_tui.estimator.parallel.per_rank import estimate_job
from gpumem_tui.estimator.spec import TrainingSpec
from gpumem_tui.estimator.suggest import CANDIDATES, suggest


def test_suggestions_fit_and_come_cheapest_first() -> None:
    arch = load_architecture("llama-3.2-1b")
    spec = TrainingSpec(batch=8, seq=2048)
    full = estimate(arch, spec).peak_bytes
    budget = int(full * 0.8)
    found = suggest(arch, spec, None, budget)
    assert found
    assert all(s.peak_bytes <= budget < full for s in found)
    ranks = [s.cost_rank for s in found]
    assert ranks == sorted(ranks)
    ckpt = next(s for s in found if s.flags == "--grad-ckpt full")
    assert ckpt.peak_bytes == estimate(arch, spec.replace(grad_ckpt="full"), simulate_allocator=False).peak_bytes


def test_a_combination_when_no_single_change_fits() -> None:
    arch = load_architecture("llama-3.1-8b")
    spec = TrainingSpec(batch=4, seq=4096, mixed_precision=True)
    plan = ParallelPlan("deepspeed", 8, zero_stage=1)
    budget = 40 << 30
    found = suggest(arch, spec, plan, budget)
    assert len(found) >= 1 and all(s.peak_bytes <= budget for s in found)
    if "+" in found[0].flags:  # a chain: no flag listed twice
        firsts = [f.split()[0] for f in found[0].flags.split(" + ")]
        assert len(firsts) == len(set(firsts))
    base = estimate_job(arch, spec, plan).largest.estimate.peak_bytes
    assert base > budget


def test_candidates_are_ordered_by_cost() -> None:
    ranks = [c[1] for c in CANDIDATES]
    assert ranks == sorted(ranks)


def test_cli_suggest_needs_a_budget_and_reports_json() -> None:
    run = ["estimate", "llama-3.2-1b", "--batch", "8", "--seq", "2048"]
    bad = run_cli(*run, "--suggest")
    assert bad.returncode == 2 and "--fit" in bad.stderr
    out = run_cli(*run, "--suggest", "--fit", "16GiB", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert all(s["peak_bytes"] <= 16 << 30 for s in data["suggestions"])
