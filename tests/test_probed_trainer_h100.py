"""``gpumem-tui compare`` of a trace recorded on an H100 while three real Trainer jobs ran with
the ``GpumemCallback`` probe: LoRA over bf16 weights, QLoRA (NF4, k-bit preparation,
checkpointing), GPT-2 under bf16 autocast (``tests/data/probed_h100/README.md`` says how).
The spec comes from what the probe read off each job, not from the test: this is the product's
path from a user's Trainer script to the comparison."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from cli_inprocess import run_cli  # noqa: E402

DATA = Path(__file__).parent / "data" / "probed_h100" / "probed_trainer_h100.jsonl.gz"
#: pid -> (the job, what the probe must have read of it)
JOBS = {
    485: ("LoRA over bf16 weights", {"task": "lora", "dtype": "bf16", "recipe": "hf-trainer", "grad_ckpt": "none"}),
    483: ("QLoRA nf4, checkpointing", {"task": "qlora", "dtype": "bf16", "recipe": "peft-kbit", "grad_ckpt": "full"}),
    484: ("GPT-2, bf16 autocast", {"task": "train", "dtype": "bf16", "recipe": "hf-trainer", "grad_ckpt": "none"}),
}


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("h100") / "probed_trainer_h100.jsonl"
    path.write_bytes(gzip.decompress(DATA.read_bytes()))
    return path


@pytest.mark.parametrize("pid", sorted(JOBS))
def test_compare_predicts_each_probed_trainer_job_within_one_percent(trace: Path, pid: int) -> None:
    done = run_cli("compare", "--json", "--pid", str(pid), str(trace))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["device"] == "cuda" and result["measured_figure"] == "torch allocated"
    assert abs(result["peak_error_percent"]) <= 1.0, (JOBS[pid][0], result["peak_error_percent"])
    # no false alarm: the config is the model that ran (LoRA adapters and 4-bit packing explained)
    assert not [n for n in result["notes"] if "parameters" in n and "differs" in n], result["notes"]


def test_the_probe_read_each_job_as_it_ran(trace: Path) -> None:
    """What the spec is built from: the Trainer's task, precision, recipe and checkpointing,
    and for QLoRA the quantized Linears' format (not a default)."""
    from gpumem_tui.analysis.comparison import spec_from_probe_info
    from gpumem_tui.analysis.probed_job import read_probed_job
    from gpumem_tui.telemetry.trace_file import iter_snapshots, scan_trace

    infos = {}
    for snapshot in iter_snapshots(scan_trace(trace)):
        for info in snapshot.probe_infos:
            infos.setdefault(info.pid, info)
    assert set(infos) == set(JOBS)
    for pid, (job, expected) in JOBS.items():
        fields = read_probed_job(dict(infos[pid].setup)).spec_fields
        _, spec = spec_from_probe_info(infos[pid], **fields)
        seen = {key: getattr(spec, key) for key in expected}
        assert seen == expected, job
        assert spec.device == "cuda"
    _, qlora = spec_from_probe_info(infos[483], **read_probed_job(dict(infos[483].setup)).spec_fields)
    assert qlora.quant == "nf4" and qlora.quant_format is not None and qlora.quant_format.double_quant
    assert qlora.lora_targets == ("q", "v") and qlora.lora_rank == 16
