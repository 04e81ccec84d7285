"""The built-in demo: a real training job in a child process, headless record end to end."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from demo_inprocess import run_demo_job

from gpumem_tui.demo import cli as demo
from gpumem_tui.demo import process as demo_process
from gpumem_tui.telemetry.model import Phase
from gpumem_tui.telemetry.replay import read_trace
from waiting import HANG_TIMEOUT, wait_until

# torch is installed by setup (README): missing is a failure. Looked up, not imported: the jobs
# import it in their own processes, and importing it here cost every xdist worker ~2 s of CPU
# while collecting.
if importlib.util.find_spec("torch") is None:
    raise ImportError("torch is not installed: the demo job needs it (pip install -e '.[torch]')")

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["--model", "builtin", "--batch", "2", "--seq", "32"]


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "gpumem_tui", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=ROOT)


def test_headless_demo_records_a_real_job_end_to_end(tmp_path):
    trace = tmp_path / "trace.jsonl"
    proc = run_cli("demo", "--headless", "--steps", "3", "--record", str(trace), "--interval", "0.2", *SMALL)
    assert proc.returncode == 0, proc.stderr
    assert f"trace: {trace.resolve()}" in proc.stdout
    snaps, notices = read_trace(trace)
    assert notices == []
    infos = {i.pid: i for s in snaps for i in s.probe_infos}
    assert len(infos) == 1
    ((pid, info),) = infos.items()
    setup = dict(info.setup)
    assert (setup["batch"], setup["seq"], setup["optimizer"], setup["device"]) == (2, 32, "AdamW", "cpu")
    assert info.model_config["n_layer"] == 4 and info.model_config["vocab_size"] == 8192
    assert snaps[-1].probe_infos[0].ended  # recorded until the job finished
    marks = [(m.phase, m.step) for s in snaps for m in s.phase_marks if m.pid == pid]
    assert marks[0] == (Phase.INIT, 0)
    # Step 1 is always recorded; a later step only if it starts >= min_step_interval after the
    # last recorded one (a timing matter), and a recorded step is recorded whole, in order.
    recorded = sorted({s for _, s in marks if s > 0})
    assert recorded[0] == 1 and set(recorded) <= {1, 2, 3}, marks
    for step in recorded:
        order = [p for p, s in marks if s == step]
        assert order == [Phase.FORWARD, Phase.BACKWARD, Phase.OPTIMIZER_STEP, Phase.IDLE], (step, marks)
    samples = [p for s in snaps for p in s.probes if p.pid == pid]
    assert len(samples) >= 5 and len({p.time for p in samples}) == len(samples)  # no duplicates
    param_bytes = setup["total_params"] * 4
    assert all(dict(p.categories)["parameters"] == param_bytes for p in samples if p.categories)
    split = [p for p in samples if p.categories]  # a sample read while training allocated has none
    assert len(split) >= 5 and all(sum(v for _, v in p.categories) == p.allocated_bytes for p in split)
    peak = max(p.peak_allocated_bytes for p in samples)
    # params + grads + AdamW states (fp32) at least; activations on top
    assert peak > 4 * param_bytes
    assert f"demo job PID {pid}" in proc.stdout


def test_start_and_stop_a_demo_job_cleanly(tmp_path):
    job = demo_process.start_demo_job(steps=0, probe_dir=tmp_path, model="builtin", pause=0.05,
                              extra_args=["--batch", "1", "--seq", "16"])
    try:
        stream = tmp_path / f"{job.pid}.jsonl"
        def in_backward() -> bool:
            if stream.exists() and b'"phase":"backward"' in stream.read_bytes():
                return True
            assert job.running, job.log_tail()
            return False

        # a hang guard, not a speed check: under xdist on a loaded 2-core machine the child's
        # torch import alone once took most of a minute
        wait_until(in_backward, what=lambda: f"the job to reach backward: {job.log_tail()}", timeout=150, poll=0.1)
    finally:
        code = job.stop(timeout=HANG_TIMEOUT, remove_dir=False)  # a hang guard: SIGKILL only if it never ends
    assert code == 0  # SIGTERM ends it after the step, not killed
    last = json.loads(stream.read_text().splitlines()[-1])
    assert last["kind"] == "end"
    assert job.stop() == 0  # idempotent
    assert tmp_path.exists()  # not ours to remove (we passed probe_dir)


def test_owned_probe_dir_is_removed_on_stop():
    job = demo_process.start_demo_job(steps=1, model="builtin", extra_args=["--batch", "1", "--seq", "8", "--no-probe"])
    directory = job.probe_dir
    assert directory.is_dir()
    job.stop(timeout=30)
    assert not directory.exists()


class _Ended(BaseException):
    """Stands for ``os._exit`` in the test process: the job's ``_end_now(code)`` raises it."""


@pytest.mark.torch_in_process  # the job imports torch before it looks at the stop
@pytest.mark.parametrize("stopped_in", ["os.nice", "_use_hf", "_build_builtin"])
def test_a_stop_while_the_job_starts_ends_it_before_the_model_is_built(tmp_path, monkeypatch, stopped_in):
    """SIGTERM while the job loads (the dashboard quit in its first seconds): before torch loads
    (during ``os.nice``), while transformers loads (``_use_hf``) or while the model is built
    (``_build_builtin``), the job ends at once with exit code 0 (``_end_now``, os._exit in a
    real job): no (further) model building, no optimizer (whose first construction imports
    torch._dynamo, seconds of CPU), no probe attached. Run in this process
    (tests/demo_inprocess.py), ``_end_now`` raising instead of ending it; the signal is raised
    on this process while the job's own handler is installed."""
    import torch

    from gpumem_tui.demo import job

    build = job._build_builtin

    def stop_now(*args):
        signal.raise_signal(signal.SIGTERM)  # the job's handler runs before this returns
        return build(*args) if stopped_in == "_build_builtin" else False

    def never(*args, **kwargs):
        raise AssertionError("the job went on loading after it was told to stop")

    def end_now(code):
        raise _Ended(code)

    target = os if stopped_in == "os.nice" else job
    monkeypatch.setattr(job, "_end_now", end_now)
    monkeypatch.setattr(job, "_build_builtin", never)
    monkeypatch.setattr(job, "_build_hf", never)
    monkeypatch.setattr(torch.optim, "AdamW", never)
    monkeypatch.setattr(target, stopped_in.removeprefix("os."), stop_now)
    with pytest.raises(_Ended) as ended:
        run_demo_job(["--steps", "0", "--probe-dir", str(tmp_path), "--model", "builtin", "--nice", "5"])
    assert ended.value.args == (0,)
    assert list(tmp_path.iterdir()) == []  # no probe stream: nothing was attached


def test_demo_job_exits_when_its_parent_is_gone(tmp_path):
    # --parent-pid names a process that is not our parent: the job must not train as an orphan.
    proc = subprocess.run(
        [sys.executable, "-m", "gpumem_tui.demo.job", "--steps", "0", "--model", "builtin", "--no-probe",
         "--parent-pid", "1", "--batch", "1", "--seq", "8"],
        capture_output=True, text=True, timeout=60, env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert proc.returncode == 0 and "step" not in proc.stdout


@pytest.mark.parametrize(
    "argv",
    [["--record", "t.jsonl"], ["--headless", "--steps", "-1"], ["--headless", "--batch", "0"], ["--bogus"]],
)
def test_demo_bad_input_exit_2(argv, capsys):
    assert demo.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_demo_job_bad_input_exit_2(capsys):
    from gpumem_tui.demo import job as demo_job

    assert demo_job.main(["--hidden", "30", "--heads", "4"]) == 2
    assert demo_job.main(["--batch", "zero"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 2


def test_headless_demo_reports_a_failed_job_with_its_log(tmp_path):
    proc = run_cli("demo", "--headless", "--steps", "1", "--device", "cuda", "--record", str(tmp_path / "t.jsonl"),
                   *SMALL)
    if proc.returncode == 0:
        pytest.skip("this machine has CUDA: the job did not fail")
    assert proc.returncode == 1
    assert "the job exited with code 1" in proc.stderr and "no CUDA device" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_failed_jobs_log_is_shown_literally(tmp_path):
    """The log tail printed after "the job exited with code N" holds what torch or the job
    printed: an escape sequence in it is shown as text, each line cut, the last lines kept."""
    log = tmp_path / "job.log"
    log.write_text("first\n" + "x" * 1000 + "\nRuntimeError: \x1b[31mred\x1b[0m\x08over\n")
    job = demo_process.DemoJob.__new__(demo_process.DemoJob)
    job.log_path = log
    tail = job.log_tail(lines=2)
    assert "\x1b" not in tail and "\x08" not in tail
    assert tail.splitlines()[1] == "RuntimeError: \\x1b[31mred\\x1b[0m\\x08over"
    assert len(tail.splitlines()[0]) <= 400 and "first" not in tail
    job.log_path = tmp_path / "missing.log"
    assert job.log_tail() == ""
