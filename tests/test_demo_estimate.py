"""The built-in demo job against the estimator: its probed peak must match the prediction.

A regression here means the demo's training step and the step the estimator models have
drifted apart (e.g. the loop keeping the model output -- its b x s x V logits and, with
use_cache, a KV cache -- alive through backward: +9 % at the demo's default size), or the
probe's published setup no longer configures the estimator (attention, dropout, dtype...).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from demo_inprocess import run_demo_job

from gpumem_tui.analysis.comparison import spec_from_probe_info  # noqa: E402
from gpumem_tui.analysis.process_estimate import compare_snapshots  # noqa: E402
from gpumem_tui.telemetry.model import Snapshot  # noqa: E402
from gpumem_tui.telemetry.probe_source import ProbeSource  # noqa: E402

GROUP = "activations+logits_and_loss+optimizer_intermediates"
# the jobs run in this process: the worker that runs the torch tests runs them all (--dist
# loadgroup, tests/conftest.py), so one worker pays for importing torch and transformers
pytestmark = pytest.mark.torch_in_process


def _run_demo_job(tmp_path: Path, model: str, *args: str) -> Snapshot:
    """Run the demo job (``model`` hf or builtin, small) to completion with the probe, in this
    process (tests/demo_inprocess.py: the same figures as a child's, without its imports); one
    snapshot of all it streamed."""
    code = run_demo_job(["--steps", "3", "--probe-dir", str(tmp_path), "--model", model, "--quiet",
                         "--threads", "1", *args])
    assert code == 0
    reading = ProbeSource(tmp_path, alive=lambda pid, create_time: False).poll()
    assert reading.probe_infos and reading.probes
    return Snapshot(time=time.time(), probes=reading.probes, probe_infos=reading.probe_infos,
                    phase_marks=reading.phase_marks)


@pytest.mark.parametrize(
    "size",
    [
        # attention dropout 0.1 (GPT2Config default): CPU SDPA takes the math path
        ("--layers", "2", "--hidden", "64", "--heads", "2", "--vocab", "2048", "--batch", "2", "--seq", "64"),
        # longer sequence: the s x s attention terms weigh more than the logits
        ("--layers", "1", "--hidden", "64", "--heads", "4", "--vocab", "512", "--batch", "1", "--seq", "256"),
    ],
    ids=["logits-heavy", "attention-heavy"],
)
def test_demo_job_peak_matches_the_estimate(tmp_path, size):
    import transformers  # noqa: F401 -- installed by setup (README): missing is a failure
    _check_demo_job(tmp_path, "hf", size)


def test_builtin_demo_model_matches_the_estimate(tmp_path):
    """The hand-written model (used without transformers) runs HF GPT-2's ops: gelu_new op by
    op, the labels shifted rather than the logits, SDPA with dropout."""
    size = ("--layers", "2", "--hidden", "64", "--heads", "2", "--vocab", "2048", "--batch", "2", "--seq", "64")
    _check_demo_job(tmp_path, "builtin", size)


def test_demo_job_keeping_its_output_matches_the_estimate(tmp_path):
    """A loop that holds the model output through backward (``--keep-output``): the probe
    publishes it and the estimator counts the kept logits."""
    import transformers  # noqa: F401 -- installed by setup (README): missing is a failure
    size = ("--layers", "2", "--hidden", "64", "--heads", "2", "--vocab", "2048", "--batch", "2", "--seq", "64")
    snap = _check_demo_job(tmp_path, "hf", size, "--keep-output")
    setup = dict(snap.probe_infos[0].setup)
    assert setup["keep_outputs"] is True
    assert setup["kept_output_bytes"] == 2 * 64 * 2048 * 4  # the fp32 logits


def _check_demo_job(tmp_path, model, size, *more):
    snap = _run_demo_job(tmp_path, model, *size, *more)
    (info,) = snap.probe_infos
    setup = dict(info.setup)
    # the probe publishes what configures the estimator: SDPA, and the config's dropout
    assert setup["attention"] == "sdpa"
    assert info.model_config["attn_pdrop"] > 0
    arch, spec = spec_from_probe_info(info, device="cpu")
    assert (spec.attention, spec.device, spec.dtype, spec.optimizer) == ("sdpa", "cpu", "fp32", "adamw")
    assert arch.attention_dropout > 0

    result = compare_snapshots([snap])
    head = result.headline
    assert head.measured_bytes is not None and head.measured_bytes > 0
    assert abs(head.error_percent) <= 2.0, (head.predicted_bytes, head.measured_bytes)
    group = result.row(GROUP)
    assert group is not None and group.measured_bytes
    assert abs(group.error_percent) <= 5.0, (group.predicted_bytes, group.measured_bytes)
    return snap
