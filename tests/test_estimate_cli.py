"""`gpumem-tui estimate`: output, JSON, --fit, --max-batch, bad input, no heavy imports."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gpumem_tui.estimator import cli


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_table_states_binary_units(capsys) -> None:
    code, out, err = _run(["gpt2", "--batch", "4", "--seq", "512"], capsys)
    assert code == 0 and err == ""
    assert "MiB = 2^20 B" in out and "PEAK" in out
    assert "124,439,808 parameters" in out


def test_json_shape(capsys) -> None:
    code, out, _ = _run(["llama-3.2-1b", "--batch", "2", "--seq", "1024", "--json"], capsys)
    data = json.loads(out)
    assert code == 0
    assert data["total_params"] == 1_235_814_400
    assert set(data["components_bytes"]) == {
        "parameters", "gradients", "optimizer_states", "optimizer_intermediates", "activations",
        "logits_and_loss", "kv_cache", "cuda_context", "allocator_reserve"}
    assert sum(data["components_bytes"].values()) == data["peak_bytes"]
    assert all(isinstance(p["live_bytes"], int) for p in data["phases"])


def test_fit_and_max_batch(capsys) -> None:
    code, out, _ = _run(["gpt2", "--seq", "1024", "--fit", "24GiB", "--max-batch", "--json"], capsys)
    data = json.loads(out)
    assert code == 0
    assert data["fit"]["budget_bytes"] == 24 << 30 and data["fit"]["fits"] is True
    assert data["fit"]["margin_bytes"] == (24 << 30) - data["peak_bytes"]
    assert data["max_batch"] >= 1
    code, out, _ = _run(["gpt2", "--batch", "4", "--fit", "8GiB", "--max-seq", "--json"], capsys)
    assert code == 0 and 1 <= json.loads(out)["max_seq"] <= 1024  # bounded by n_positions
    code, out, _ = _run(["llama-3.1-70b", "--fit", "24GB"], capsys)
    assert code == 0 and "NO, short by" in out


def test_compare_methods(capsys) -> None:
    code, out, _ = _run(["gpt2", "--compare-methods", "--json"], capsys)
    methods = {row["method"] for row in json.loads(out)["methods"]}
    assert code == 0 and {"detailed", "zero16", "bytes20", "per-token", "korthikanti", "accelerate"} <= methods


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["lama-3.1-8b"], "did you mean llama-3.1-8b"),
        (["gpt2", "--batch", "0"], "--batch must be >= 1"),
        (["gpt2", "--batch", "x"], "invalid int value"),
        (["gpt2", "--seq", "-5"], "--seq must be >= 1"),
        (["gpt2", "--task", "train", "--kv-dtype", "fp8"], "--kv-dtype applies to inference"),
        (["gpt2", "--task", "qlora", "--dtype", "fp32"], "QLoRA computes in 16 bits"),
        (["gpt2", "--fit", "12 bananas"], "unknown size unit"),
        (["gpt2", "--method", "guess"], "unknown --method"),
        (["gpt2", "--tp", "5"], "does not divide"),
        (["gpt2", "--frobnicate"], "unrecognized arguments"),
        ([], "give a model"),
    ],
)
def test_bad_input_is_one_line_exit_2(argv: list[str], needle: str, capsys) -> None:
    code, out, err = _run(argv, capsys)
    assert code == 2
    assert out == ""
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err


def test_bad_config_file_is_named(tmp_path, capsys) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    code, _, err = _run([str(path)], capsys)
    assert code == 2 and "num_attention_heads" in err


def test_fit_gpu_index_without_nvml_is_a_clear_error(capsys, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails like a machine without the binding
    code, _, err = _run(["gpt2", "--fit", "0"], capsys)
    assert code == 1 and "give a size" in err and err.count("\n") == 1


def test_fit_gpu_index_reads_nvml_total(capsys, monkeypatch) -> None:
    from gpumem_tui.telemetry import nvml
    from gpumem_tui.telemetry.model import DeviceSample

    class FakeSource:
        def poll(self):  # noqa: ANN202
            dev = DeviceSample(index=0, name="Fake 24G", uuid=None, memory_total_bytes=24 << 30,
                               memory_used_bytes=0, utilization_gpu_percent=None, temperature_c=None,
                               power_draw_w=None, power_limit_w=None)
            return nvml.NvmlReading(devices=(dev,))

        def close(self) -> None:
            pass

    monkeypatch.setattr(nvml, "NvmlSource", FakeSource)
    code, out, _ = _run(["gpt2", "--fit", "0", "--json"], capsys)
    data = json.loads(out)
    assert code == 0 and data["fit"]["budget_bytes"] == 24 << 30 and "GPU 0" in data["fit"]["budget"]


def test_estimate_imports_neither_torch_nor_textual() -> None:
    code = (
        "import sys, io, contextlib\n"
        "from gpumem_tui.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    rc = main(['estimate', 'llama-3.1-8b', '--max-batch', '--compare-methods'])\n"
        "bad = [m for m in ('torch', 'textual', 'transformers', 'pynvml') if m in sys.modules]\n"
        "print(rc, bad)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.stdout.strip() == "0 []", res.stderr
