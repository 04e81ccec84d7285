"""How the comparison view and the estimator panel look (pytest-textual-snapshot).

Fixed inputs, no clocks, no focus cursor: the SVGs under tests/__snapshots__ are the reference.
Regenerate after an intended change with ``pytest tests/test_comparison_view_snapshot.py
--snapshot-update`` and look at the new SVGs before committing them.
"""

from __future__ import annotations

import importlib
import pkgutil

from textual.app import App, ComposeResult

from gpumem_tui.ui.comparison_view import ComparisonView
from gpumem_tui.ui.estimator_panel import EstimatorPanel
from gpumem_tui.ui.themes import APP_VARIABLES
from gpumem_tui.support.units import GiB

from test_comparison_view import _result  # noqa: E402  (tests dir is on sys.path under pytest)


class _ViewHost(App[None]):
    def compose(self) -> ComposeResult:
        yield ComparisonView()

    def on_mount(self) -> None:
        self.query_one(ComparisonView).update_comparison(_result())


class _PanelHost(App[None]):
    AUTO_FOCUS = None  # no blinking cursor in the picture

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return dict(APP_VARIABLES)

    def compose(self) -> ComposeResult:
        yield EstimatorPanel(model="gpt2")


def test_comparison_view_snapshot(snap_compare):
    assert snap_compare(_ViewHost(), terminal_size=(64, 22))


def _fixed_estimate(arch, spec):
    """A fixed Estimate scaled by batch, so the picture tests the panel, not the formulas."""
    from gpumem_tui.estimator.estimate import Estimate

    MiB = 1 << 20
    comps = {
        "parameters": 240 * MiB, "gradients": 240 * MiB, "optimizer_states": 480 * MiB,
        "optimizer_intermediates": 0, "activations": 500 * MiB * spec.batch,
        "logits_and_loss": 300 * MiB * spec.batch, "kv_cache": 0, "cuda_context": 500 * MiB,
        "allocator_reserve": 100 * MiB,
    }  # fmt: skip
    total = sum(comps.values())
    return Estimate(model=arch.name, total_params=124_000_000, trainable_params=124_000_000,
                    components_bytes=comps, peak_bytes=total, peak_phase="backward", phases=(),
                    assumptions=("fixed for the snapshot",), allocated_peak_bytes=total - 600 * MiB,
                    device=spec.device)


def _import_the_estimator() -> None:
    """Import every estimator module before ``estimate`` is patched: a module that binds it at
    import (``from ...estimate import estimate``: solve, suggest, methods, parallel.per_rank)
    and is first imported under the patch would keep the fake for the rest of the worker's
    tests (test_probed_job failed so, after this test, in one process)."""
    import gpumem_tui.estimator as package

    for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        importlib.import_module(module.name)


def test_estimator_panel_does_not_fit_snapshot(snap_compare, monkeypatch):
    _import_the_estimator()
    monkeypatch.setattr("gpumem_tui.estimator.estimate.estimate", _fixed_estimate)
    monkeypatch.setattr("gpumem_tui.estimator.solve.max_batch", lambda arch, spec, budget: 1)

    async def settle(pilot, panel):
        for _ in range(200):
            await pilot.app.workers.wait_for_complete()
            await pilot.pause()
            if not panel.solving:
                return

    async def setup(pilot):
        panel = pilot.app.query_one(EstimatorPanel)
        panel.set_gpu_total(4 * GiB, "GPU 0 test")
        panel.set_form(batch=4, seq=1024)  # does not fit in 4 GiB
        await settle(pilot, panel)
        # (an invalid field shows no figure at all: tests/test_estimator_panel.py)

    assert snap_compare(_PanelHost(), terminal_size=(64, 40), run_before=setup)
