"""`gpumem-tui estimate`: output, JSON, --fit, --max-batch, bad input, no heavy imports."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

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


def test_fit_a_gpu_uses_its_free_memory_and_says_so(capsys, fake_nvml) -> None:
    # GPU 0: 80 GiB with 60 GiB used by other jobs; GPU 1: 80 GiB with 10 GiB used
    fake_nvml.gpus[0].memory_total, fake_nvml.gpus[0].memory_used = 80 << 30, 60 << 30
    fake_nvml.gpus[1].memory_total, fake_nvml.gpus[1].memory_used = 80 << 30, 10 << 30
    args = ["llama-3.2-1b", "--batch", "4", "--seq", "2048"]
    code, out, _ = _run([*args, "--fit", "0", "--json"], capsys)
    fit = json.loads(out)["fit"]
    assert code == 0 and fit["budget_kind"] == "free" and fit["gpu_index"] == 0
    assert fit["budget_bytes"] == 20 << 30 and fit["total_bytes"] == 80 << 30 and fit["used_bytes"] == 60 << 30
    assert fit["fits"] is False  # ~34 GiB does not fit in the 20 GiB the other jobs leave
    assert fake_nvml.init_count == 0  # --fit's nvmlInit is paired with nvmlShutdown
    code, out, _ = _run([*args, "--fit", "0"], capsys)
    assert "20.00 GiB free of 80.00 GiB total" in out and "NO" in out
    # --fit GPU, as README and --help write it: the GPU with the most free memory
    code, out, _ = _run([*args, "--fit", "GPU", "--json"], capsys)
    fit = json.loads(out)["fit"]
    assert code == 0 and fit["gpu_index"] == 1 and fit["budget_bytes"] == 70 << 30 and fit["fits"] is True
    code, _, err = _run([*args, "--fit", "7"], capsys)
    assert code == 2 and "no GPU 7" in err


def test_fit_help_and_readme_agree_with_the_code(capsys) -> None:
    from gpumem_tui.estimator.cli import build_parser

    helptext = build_parser().format_help()
    assert "SIZE|N|GPU" in helptext and "free" in helptext
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    for form in re.findall(r"--fit ([^\]`\s]+)", readme):
        for word in form.split("\\|"):
            assert word in ("GPU", "N") or word[0].isdigit(), word


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


def test_generation_with_an_encoder_is_a_named_error_not_a_crash(capsys) -> None:
    # BERT has no next-token loop: the CUDA simulation used to index a KV cache it never built
    code, _, err = _run(["bert-base-uncased", "--task", "inference", "--new-tokens", "64"], capsys)
    assert code == 2 and "is an encoder" in err and "--new-tokens" in err and err.count("\n") == 1
