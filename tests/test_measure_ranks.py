"""gpumem-tui measure --nproc N --strategy KIND: per-rank ground truth over gloo on the CPU.

The saved cases under tests/data/ranks/ are checked for their schema and for invariants each
strategy must satisfy (sharded bytes, replicated bytes, equal ranks); one small case runs live.
"""

from __future__ import annotations

import functools
import json
import math
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from cli_inprocess import run_cli

from gpumem_tui.estimator.spec import TrainingSpec  # noqa: E402
from gpumem_tui.measure.parallel import STRATEGIES, ParallelSpec, max_ranks  # noqa: E402
from gpumem_tui.measure.ranks import RankFailure, launch  # noqa: E402
from gpumem_tui.measure.runner import COMPONENTS  # noqa: E402
from waiting import wait_until  # noqa: E402

# torch_in_process: these tests import torch here; under xdist they share one worker (tests/conftest.py)
pytestmark = [pytest.mark.torch, pytest.mark.torch_in_process]

ROOT = Path(__file__).resolve().parent.parent
RANKS = ROOT / "tests" / "data" / "ranks"
LLAMA = RANKS / "configs" / "llama-tiny.json"
JOB = ["--batch", "2", "--seq", "64", "--dtype", "fp32", "--optimizer", "adamw", "--attention", "sdpa",
       "--device", "cpu"]


def _cases() -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(RANKS.glob("*.json"))}


def _cli(*args: str) -> subprocess.CompletedProcess:
    """``gpumem-tui measure ARGS`` in a fresh interpreter: for the runs that launch ranks."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "gpumem_tui", "measure", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, check=False)


def _refused(*args: str) -> subprocess.CompletedProcess:
    """``gpumem-tui measure ARGS`` in this process (tests/cli_inprocess.py), for input refused
    before any rank starts: the same output and exit code without a child interpreter."""
    return run_cli("measure", *args, cwd=ROOT)


def _in_process(*args: str) -> subprocess.CompletedProcess:
    """``gpumem-tui measure ARGS`` run in this process (tests/cli_inprocess.py), its ranks forked
    from it as the command forks them from its own process: the report on stdout and the exit
    code as a child interpreter gives them, without the ~7 s of CPU a child spends importing
    torch, transformers and torch's memory trackers (this process has them already).
    :func:`test_cli_rank_refusal_names_the_rank_and_exits_2` keeps ``python -m gpumem_tui
    measure --nproc`` as a real process."""
    return run_cli("measure", *args, cwd=ROOT)


def _meta_params(config: dict) -> list[tuple[str, tuple[int, ...], int]]:
    """(name, shape, bytes) of every parameter, built on the meta device independently of measure."""
    return _meta_params_of(json.dumps(config, sort_keys=True))


@functools.lru_cache(maxsize=None)
def _meta_params_of(config_json: str) -> list[tuple[str, tuple[int, ...], int]]:
    import torch
    import transformers

    cfg = json.loads(config_json)
    for key in ("architectures",):
        cfg.pop(key, None)
    cfg = transformers.AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    return [(n, tuple(p.shape), p.numel() * p.element_size()) for n, p in model.named_parameters()]


# --- the saved files ------------------------------------------------------------------------

def test_every_strategy_is_saved_at_world_sizes_2_and_4():
    import importlib.util

    spec = importlib.util.spec_from_file_location("collect_ranks", ROOT / "benchmarks" / "collect_ranks.py")
    collect = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(collect)
    expected = {name for name, _, _ in collect.cases()}
    assert expected <= set(_cases()), sorted(expected - set(_cases()))
    kinds = {(c["strategy"]["kind"], c["strategy"]["world_size"]) for c in _cases().values()}
    assert {(k, n) for k in STRATEGIES for n in (2, 4)} <= kinds


@pytest.mark.parametrize("name", sorted(_cases()))
def test_saved_file_matches_the_schema(name):
    case = _cases()[name]
    assert set(case) == {"how", "model", "spec", "strategy", "ranks"}
    strategy = case["strategy"]
    n = strategy["world_size"]
    assert strategy["kind"] in STRATEGIES
    assert case["how"].startswith("gpumem-tui measure ") and f"--nproc {n} " in case["how"]
    assert f"--strategy {strategy['kind']} " in case["how"] and "gloo" in case["how"]
    assert ("FSDPMemTracker" in case["how"]) == (strategy["kind"] == "fsdp2")
    assert "model_type" in case["model"]
    spec = {k: tuple(v) if isinstance(v, list) else v for k, v in case["spec"].items()}
    built = TrainingSpec(**spec)  # field names and values are the estimator's
    assert (built.task, built.batch, built.seq, built.dtype) == ("train", 2, 64, "fp32")
    option_keys = set(ParallelSpec(strategy["kind"], n).to_json())
    assert set(strategy) == option_keys
    assert [r["rank"] for r in case["ranks"]] == list(range(n))
    for rank in case["ranks"]:
        assert isinstance(rank["peak_bytes"], int) and rank["peak_bytes"] > 0
        assert set(rank["components_bytes"]) == set(COMPONENTS)
        assert sum(rank["components_bytes"].values()) == rank["peak_bytes"]
        assert sum(rank["tracker_categories"].values()) == rank["peak_bytes"]
        assert max(p["live_bytes"] for p in rank["phases"]) == rank["peak_bytes"]


def _by(kind: str, **options) -> list[dict]:
    out = [c for c in _cases().values() if c["strategy"]["kind"] == kind
           and all(c["strategy"].get(k) == v for k, v in options.items())]
    assert out, (kind, options)
    return out


def _twin(case: dict, kind: str, **options) -> dict:
    """The saved case with the same model and world size under another strategy."""
    for other in _by(kind, **options):
        if other["model"] == case["model"] and other["strategy"]["world_size"] == case["strategy"]["world_size"]:
            return other
    raise AssertionError(f"no {kind} twin for {case['how']}")


def test_ddp_ranks_hold_full_parameters_and_equal_peaks():
    for case in _by("ddp"):
        params = sum(b for _, _, b in _meta_params(case["model"]))
        peaks = {r["peak_bytes"] for r in case["ranks"]}
        assert len(peaks) == 1, case["how"]
        for rank in case["ranks"]:
            assert rank["tracker_categories"]["Parameter"] == params
            # AdamW: two fp32 states per parameter plus a step scalar per tensor
            assert 2 * params <= rank["components_bytes"]["optimizer_states"] <= 2 * params + 4096


def test_fsdp2_full_shard_holds_one_padded_shard_per_rank():
    for case in _by("fsdp2"):
        n = case["strategy"]["world_size"]
        params = _meta_params(case["model"])
        total = sum(b for _, _, b in params)
        # FSDP2 shards each parameter on dim 0, padded to ceil(d0 / N) rows per rank
        padded = sum(math.ceil(s[0] / n) * (b // s[0]) for _, s, b in params)
        for rank in case["ranks"]:
            shard = rank["tracker_categories"]["Sharded Param"]
            assert total / n <= shard <= padded, (case["how"], shard, total / n, padded)


def test_sharded_optimizer_states_sum_to_the_unsharded_ones():
    for kind, opts in (("zero-redundancy", {}), ("fsdp2", {"reshard_after_forward": True}),
                       ("fsdp1", {"sharding_strategy": "FULL_SHARD"})):
        for case in _by(kind, **opts):
            ddp = _twin(case, "ddp")
            unsharded = ddp["ranks"][0]["components_bytes"]["optimizer_states"]
            summed = sum(r["components_bytes"]["optimizer_states"] for r in case["ranks"])
            if kind == "zero-redundancy":  # whole parameters per rank, no padding
                assert summed == unsharded, case["how"]
            else:  # AdamW's two fp32 states cover every parameter once, plus padding and step scalars
                states = 2 * sum(b for _, _, b in _meta_params(case["model"]))
                assert states <= summed <= states * 1.02 + 4096, (case["how"], summed, states)
            assert max(r["components_bytes"]["optimizer_states"] for r in case["ranks"]) < unsharded


def test_tensor_parallel_splits_the_projections_and_replicates_the_rest():
    for case in _by("tp"):
        n = case["strategy"]["world_size"]
        split = replicated = 0
        for name, _, b in _meta_params(case["model"]):
            if name.rsplit(".", 2)[-2] in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"):
                split += b
            else:
                replicated += b
        for rank in case["ranks"]:
            assert rank["tracker_categories"]["Parameter"] == replicated + split // n, case["how"]


def test_fsdp1_no_shard_keeps_full_parameters_on_every_rank():
    for case in _by("fsdp1", sharding_strategy="NO_SHARD"):
        ddp = _twin(case, "ddp")
        for rank in case["ranks"]:
            assert rank["components_bytes"]["parameters"] == ddp["ranks"][0]["components_bytes"]["parameters"]


# --- bad input ----------------------------------------------------------------------------------

@pytest.mark.parametrize("args,text", [
    (["--nproc", str(max_ranks() + 1), "--strategy", "ddp"], f"1 to {max_ranks()} ranks"),
    (["--nproc", "0", "--strategy", "ddp"], "1 to"),
    (["--nproc", "2", "--strategy", "pipeline"], "--strategy 'pipeline'"),
    (["--nproc", "2"], "--nproc and --strategy go together"),
    (["--strategy", "fsdp2"], "--nproc and --strategy go together"),
    (["--nproc", "3", "--strategy", "tp"], "must divide by --nproc 3"),
    (["--nproc", "2", "--strategy", "fsdp1", "--sharding-strategy", "HYBRID"], "--sharding-strategy 'HYBRID'"),
    (["--nproc", "2", "--strategy", "ddp", "--bucket-cap-mb", "nan"], "--bucket-cap-mb"),
    (["--nproc", "2", "--strategy", "ddp", "--port", "70000"], "--port must be 1..65535"),
    (["--nproc", "2", "--strategy", "fsdp1", "--task", "lora"], "--task lora with --strategy fsdp1 is not supported"),
    (["--nproc", "2", "--strategy", "ddp", "--task", "inference"], "--nproc measures training steps"),
    (["--nproc", "2", "--strategy", "ddp", "--rank-timeout", "0"], "--rank-timeout must be 1..86400"),
])
def test_cli_bad_rank_flags_exit_2_with_one_line(args, text):
    done = _refused(str(LLAMA), "--on", "cpu", *args, *JOB)
    assert done.returncode == 2, done.stderr
    assert text in done.stderr and done.stderr.count("\n") == 1 and done.stdout == ""


def test_cli_ranks_need_the_real_cpu():
    done = _refused(str(LLAMA), "--on", "meta", "--nproc", "2", "--strategy", "ddp", *JOB)
    assert done.returncode == 2 and "use --on cpu" in done.stderr


def test_cli_busy_port_exits_2():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = _refused(str(LLAMA), "--on", "cpu", "--nproc", "2", "--strategy", "ddp", "--port", str(port), *JOB)
    assert done.returncode == 2
    assert f"127.0.0.1:{port} is busy" in done.stderr and done.stderr.count("\n") == 1


# --- a rank that fails takes the others down ------------------------------------------------------

def _fail_on_rank_1(rank: int, world: int, marker: str, how: str, rank0: str) -> dict:
    import torch.distributed as dist
    if rank == 1:
        if how == "raise":
            raise ValueError("boom on purpose")
        os.kill(os.getpid(), signal.SIGKILL)
    # rank 0 says who it is (written whole, by a rename): the test checks it is gone afterwards
    Path(marker + ".tmp").write_text(str(os.getpid()))
    os.replace(marker + ".tmp", marker + ".pid")
    if rank0 == "barrier":
        dist.barrier()  # fails once rank 1 is gone (gloo: connection closed by peer)
    else:
        while True:  # busy outside any collective: only the launcher can stop it (sleeps: it
            time.sleep(0.1)  # stands for work, no timing is checked; never ends by itself)
    Path(marker).write_text("rank 0 finished by itself")
    return {}


def _gone(pid: int) -> bool:
    """True when ``pid`` is no live process (a zombie awaiting its reaper counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


@pytest.mark.parametrize("rank0", ["barrier", "busy"])
@pytest.mark.parametrize("how,text", [("raise", "rank 1 failed: ValueError: boom on purpose"),
                                      ("kill", "rank 1 (pid ")])
def test_a_failing_rank_is_named_and_stops_the_others(tmp_path, monkeypatch, how, text, rank0):
    marker = tmp_path / "finished"
    temp = tmp_path / "temp"  # where torch names its per-rank traceback files
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    with pytest.raises(RankFailure) as info:
        launch(_fail_on_rank_1, (str(marker), how, rank0), 2, timeout_s=300, start_method="fork")
    # torch pickled rank 1's traceback into one of them ("raise"); the launch leaves none behind
    assert not list(temp.glob("pytorch-errorfile-*")), sorted(p.name for p in temp.iterdir())
    assert info.value.rank == 1 and text in str(info.value), str(info.value)
    assert not info.value.bad_input
    if how == "kill":
        assert "was killed by SIGKILL" in str(info.value)
    assert not marker.exists()  # rank 0 was stopped (or failed in the collective), never finished
    pid_file = marker.with_name("finished.pid")
    if pid_file.exists():  # (absent: rank 0 was stopped before it got that far)
        pid = int(pid_file.read_text())
        wait_until(lambda: _gone(pid), what=f"rank 0 (pid {pid}) to be stopped by the launcher")


@pytest.mark.slow
def test_cli_rank_refusal_names_the_rank_and_exits_2():
    # A child interpreter, not run_cli: the one-line check covers what the ranks write to
    # stderr too (in this process a forked rank's writes would land in its own copy of the capture)
    done = _cli(str(RANKS / "configs" / "gpt2-tiny.json"), "--on", "cpu", "--nproc", "2", "--strategy", "tp", *JOB)
    assert done.returncode == 2
    assert done.stderr.startswith("gpumem-tui measure: rank ") and "needs Llama-style projections" in done.stderr
    assert done.stderr.count("\n") == 1


# --- one case live -------------------------------------------------------------------------------

# (on the torch worker, as every test here: the first live run pays for the imports measure needs
# in this process, torch's memory trackers and the model's modules, the second not)

@pytest.mark.slow
def test_live_ddp_world_2_matches_the_saved_case():
    import torch
    saved = _cases()["llama-tiny-ddp-w2"]
    done = _in_process(str(LLAMA), "--on", "cpu", "--nproc", "2", "--strategy", "ddp", "--bucket-cap-mb", "25", *JOB, "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["world_size"] == 2 and data["strategy"] == saved["strategy"]
    assert data["peak_bytes"] == max(r["peak_bytes"] for r in data["ranks"])
    params = sum(b for _, _, b in _meta_params(saved["model"]))
    for live, old in zip(data["ranks"], saved["ranks"], strict=True):
        assert set(old) <= set(live)
        assert set(live["components_bytes"]) == set(old["components_bytes"])
        assert live["tracker_categories"]["Parameter"] == params
        assert sum(live["components_bytes"].values()) == live["peak_bytes"]
        if torch.__version__.split("+")[0] in saved["how"]:  # same torch: the same bytes
            assert live["peak_bytes"] == old["peak_bytes"]
            assert live["components_bytes"] == old["components_bytes"]
    assert len({r["peak_bytes"] for r in data["ranks"]}) == 1
    assert data["worst_rank"] in (0, 1) and data["tracker"] == "MemTracker"


@pytest.mark.slow
def test_live_text_report_over_tcp_names_every_rank_and_the_worst():
    with socket.socket() as probe:  # a port free a moment ago: the TCP rendezvous path
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = _in_process(str(LLAMA), "--on", "cpu", "--nproc", "2", "--strategy", "fsdp2", "--port", str(port), *JOB)
    assert done.returncode == 0, done.stderr
    rows = [line.split()[0] for line in done.stdout.splitlines() if line[:1].isdigit()]
    assert rows == ["0", "1"]
    assert "worst rank " in done.stdout and "FSDPMemTracker" in done.stdout
