"""The probe inside a training script (torch, CPU): phases, categories, tracker, stream."""

from __future__ import annotations

import json
import os
import time

import pytest

import gpumem_tui.probe as gprobe  # noqa: E402
from gpumem_tui.telemetry.model import Phase  # noqa: E402
from gpumem_tui.telemetry.probe_source import ProbeSource  # noqa: E402
from waiting import wait_until  # noqa: E402

# torch_in_process: these tests import torch here; under xdist they share one worker (tests/conftest.py)
pytestmark = pytest.mark.torch_in_process


def records(probe) -> list[dict]:
    return [json.loads(line) for line in probe.path.read_text().splitlines()]


def marks(recs: list[dict]) -> list[tuple[str, int]]:
    return [(r["phase"], r["step"]) for r in recs if r["kind"] == "phase"]


def tiny():
    import torch
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 8))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return model, opt


def param_bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def train_step(model, opt, batch=4):
    import torch
    x = torch.randn(batch, 32)
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


@pytest.fixture
def attach(tmp_path):
    probes = []

    def _attach(model, opt=None, **kw):
        kw.setdefault("directory", tmp_path)
        kw.setdefault("min_step_interval", 0.0)
        kw.setdefault("interval", 30.0)  # no periodic samples unless a test asks
        probe = gprobe.attach(model, opt, **kw)
        probes.append(probe)
        return probe

    yield _attach
    for probe in probes:
        probe.close()


def test_phases_in_order_and_categories_exact(attach):
    import torch
    model, opt = tiny()
    probe = attach(model, opt, batch=4, seq=1)
    for _ in range(2):
        train_step(model, opt)
    probe.close()
    recs = records(probe)
    assert marks(recs) == [
        ("init", 0),
        ("forward", 1), ("backward", 1), ("optimizer_step", 1), ("idle", 1),
        ("forward", 2), ("backward", 2), ("optimizer_step", 2), ("idle", 2),
    ]
    assert recs[-1]["kind"] == "end"
    pbytes = param_bytes(model)
    state_bytes = sum(t.numel() * t.element_size() for s in opt.state.values() for t in s.values()
                      if isinstance(t, torch.Tensor))
    for r in recs:
        if r["kind"] not in ("phase", "sample"):
            continue
        cats = r["categories"]
        assert sum(cats.values()) == r["cpu_live_tensors"], r  # categories split the live bytes
        assert cats["parameters"] == pbytes
        assert r["cpu_live_tensors_peak"] >= r["cpu_live_tensors"]
    by_mark = {(r["phase"], r["step"]): r for r in recs if r["kind"] == "phase"}
    # Gradients exist exactly when the optimizer steps, and equal the parameter bytes.
    assert by_mark[("optimizer_step", 1)]["categories"]["gradients"] == pbytes
    assert by_mark[("forward", 2)]["categories"]["gradients"] == 0  # zero_grad(set_to_none)
    assert by_mark[("optimizer_step", 1)]["categories"]["optimizer_states"] == 0  # lazily made
    assert by_mark[("idle", 1)]["categories"]["optimizer_states"] == state_bytes
    # At backward start, the forward's saved tensors are alive: activations > 0.
    assert by_mark[("backward", 2)]["categories"]["activations"] > 0


def test_a_peak_between_samples_is_recorded_with_its_time_and_split(attach):
    import torch
    model, opt = tiny()
    probe = attach(model, opt, hooks=False)
    base = probe._tracker.live_bytes
    probe.mark("forward")
    t0 = time.time()
    big = torch.empty(1_000_000)  # 4 MB made in forward, gone before the next line
    del big
    t1 = time.time()
    probe.mark("backward")
    peaks = [r for r in records(probe) if r.get("at_peak")]
    assert len(peaks) == 1
    (peak,) = peaks
    assert t0 <= peak["time"] <= t1 and peak["phase"] == "forward" and peak["step"] == 1
    assert peak["cpu_live_tensors"] == base + 4_000_000
    assert peak["categories"]["activations"] == 4_000_000
    assert peak["categories"]["parameters"] == param_bytes(model)
    assert sum(peak["categories"].values()) == peak["cpu_live_tensors"]


def test_peak_in_the_first_optimizer_step_names_the_new_states(attach):
    import torch
    model, opt = tiny()
    probe = attach(model, opt)
    train_step(model, opt)
    state_bytes = sum(t.numel() * t.element_size() for s in opt.state.values() for t in s.values()
                      if isinstance(t, torch.Tensor))
    peaks = [r for r in records(probe) if r.get("at_peak") and r["phase"] == "optimizer_step"]
    assert peaks, "AdamW's temporaries make a peak inside the step"
    assert peaks[0]["step"] == 1
    cats = peaks[0]["categories"]
    assert cats["optimizer_states"] == state_bytes  # labelled states, not temporaries
    assert cats["gradients"] == param_bytes(model)


def test_cuda_record_names_the_torch_figures(attach, monkeypatch, tmp_path):
    """No GPU here: the CUDA branch runs against stubbed torch.cuda figures, to check that
    the stream names them for what they are and the reader maps them to allocated/reserved."""
    import torch
    model, opt = tiny()
    probe = attach(model, opt, track_tensors=False)
    figures = {"memory_allocated": 300 << 20, "memory_reserved": 512 << 20, "max_memory_allocated": 400 << 20}
    for name, value in figures.items():
        monkeypatch.setattr(torch.cuda, name, lambda device=None, value=value: value)
    probe.device = torch.device("cuda", 0)
    fields = probe.memory()
    assert (fields["device"], fields["torch_allocated"], fields["torch_reserved"], fields["torch_max_allocated"]) == (
        "cuda:0", 300 << 20, 512 << 20, 400 << 20)
    assert "cpu_live_tensors" not in fields
    # Nothing of the (CPU) model is on cuda:0, so everything allocated is "activations".
    assert fields["categories"]["parameters"] == 0 and fields["categories"]["activations"] == 300 << 20
    probe.mark("forward")
    probe.close()
    reading = ProbeSource(tmp_path).poll()
    cuda = [p for p in reading.probes if p.device == "cuda"]
    assert cuda and (cuda[0].allocated_bytes, cuda[0].reserved_bytes, cuda[0].peak_allocated_bytes) == (
        300 << 20, 512 << 20, 400 << 20)


def test_probe_without_tracker_publishes_marks_but_no_live_figure(attach, tmp_path):
    model, opt = tiny()
    probe = attach(model, opt, track_tensors=False)
    train_step(model, opt)
    probe.close()
    recs = records(probe)
    assert recs[0]["setup"]["tensor_tracker"] is False
    assert all("cpu_live_tensors" not in r for r in recs[1:])
    reading = ProbeSource(tmp_path).poll()
    assert reading.probes == ()  # nothing invented
    assert [m.phase.value for m in reading.phase_marks][:2] == ["init", "forward"]


def test_published_setup(attach):
    model, opt = tiny()
    probe = attach(model, opt, batch=4, seq=16, task="train", extra={"note": "x"})
    info = records(probe)[0]
    assert info["kind"] == "info" and info["format"] == "gpumem-tui-probe" and info["pid"] == os.getpid()
    setup = info["setup"]
    assert (setup["batch"], setup["seq"], setup["dtype"], setup["task"], setup["device"]) == (
        4, 16, "float32", "train", "cpu")
    assert setup["optimizer"] == "AdamW" and setup["optimizer_hparams"]["lr"] == 1e-3
    assert setup["optimizer_hparams"]["betas"] == [0.9, 0.999]
    assert setup["total_params"] == sum(p.numel() for p in model.parameters())
    assert setup["memory_figure"] == "cpu_live_tensors" and setup["note"] == "x"
    assert info["model_config"] is None  # not a Hugging Face model
    assert isinstance(info["create_time"], float)


def test_tracker_counts_new_storages_once_and_frees_them(attach):
    import torch
    model, opt = tiny()
    probe = attach(model, opt)
    tracker = probe._tracker
    before = tracker.live_bytes
    assert before == param_bytes(model)  # registered at attach, nothing else yet
    x = torch.empty(1000, dtype=torch.float64)
    view = x[10:20]
    y = x.view(10, 100)
    assert tracker.live_bytes - before == 8000  # views share the storage
    x.add_(1)  # in place: same storage
    assert tracker.live_bytes - before == 8000
    del x, view, y
    assert tracker.live_bytes == before
    data = torch.tensor([1.0, 2.0, 3.0])  # made from Python data: seen through lift_fresh
    assert tracker.live_bytes - before == 12
    del data
    assert tracker.live_bytes == before
    assert tracker.peak_bytes >= before + 8000


def test_gradient_accumulation_keeps_the_step_and_inference_counts_forwards(attach):
    import torch
    model, opt = tiny()
    probe = attach(model, opt)
    for _ in range(2):  # two micro-batches, one optimizer step
        model(torch.randn(2, 32)).sum().backward()
    opt.step()
    opt.zero_grad()
    assert marks(records(probe))[1:] == [
        ("forward", 1), ("backward", 1), ("forward", 1), ("backward", 1), ("optimizer_step", 1), ("idle", 1)]
    probe.close()

    model2, _ = tiny()
    probe2 = attach(model2, None, task="inference")
    with torch.no_grad():
        model2(torch.randn(2, 32))
        model2(torch.randn(2, 32))
    assert marks(records(probe2))[1:] == [("forward", 1), ("idle", 1), ("forward", 2), ("idle", 2)]


def test_watch_loss_marks_backward_when_the_loss_backward_starts(attach):
    import torch
    model, opt = tiny()
    probe = attach(model, opt, hooks=False)  # no model hooks: only watch_loss can mark it
    probe.mark("forward")
    logits = model(torch.randn(4, 32))
    loss = torch.nn.functional.cross_entropy(logits, torch.tensor([0, 1, 2, 3]))
    seen = {}
    logits.grad_fn.register_prehook(lambda grads: seen.update(phase_at_logits=probe.phase_name))
    probe.watch_loss(loss)
    loss.backward()
    # backward was already marked when the gradient reached the model's output
    assert seen["phase_at_logits"] == "backward"
    assert [p for p, _ in marks(records(probe))] == ["init", "forward", "backward"]


def test_explicit_phase_api_without_hooks(attach):
    import torch
    model, opt = tiny()
    probe = attach(model, opt, hooks=False)
    with probe.phase("forward"):
        loss = model(torch.randn(2, 32)).sum()
    with probe.phase(Phase.BACKWARD):
        loss.backward()
    with probe.phase("optimizer_step"):
        opt.step()
    assert marks(records(probe)) == [
        ("init", 0), ("forward", 1), ("idle", 1), ("backward", 1), ("idle", 1), ("optimizer_step", 1), ("idle", 1)]
    with pytest.raises(gprobe.ProbeError, match="unknown phase"):
        probe.mark("warmup")


def test_fast_steps_are_recorded_whole_at_most_every_min_step_interval(attach):
    model, opt = tiny()
    probe = attach(model, opt, min_step_interval=60.0)
    for _ in range(5):
        train_step(model, opt)
    assert marks(records(probe)) == [
        ("init", 0), ("forward", 1), ("backward", 1), ("optimizer_step", 1), ("idle", 1)]
    assert probe.step == 5


def test_periodic_samples_inside_a_long_phase(attach):
    model, opt = tiny()
    probe = attach(model, opt, interval=0.05)
    def forward_samples() -> list[dict]:
        return [r for r in records(probe) if r["kind"] == "sample" and r["phase"] == "forward"]

    with probe.phase("forward"):  # a long phase: as long as the sampler takes to write three samples
        wait_until(lambda: len(forward_samples()) >= 3, what="three periodic samples inside the phase",
                   poll=0.05, ignore=(ValueError,))  # ValueError: a line read half-written
    samples = forward_samples()
    assert len(samples) >= 3
    times = [r["time"] for r in samples]
    assert times == sorted(times)


def test_one_probe_per_process_and_validation(attach, tmp_path):
    model, opt = tiny()
    probe = attach(model, opt)
    with pytest.raises(gprobe.ProbeError, match="already attached"):
        gprobe.attach(model, opt, directory=tmp_path)
    probe.close()
    assert probe.closed
    with pytest.raises(gprobe.ProbeError, match="torch.nn.Module"):
        gprobe.attach(object(), directory=tmp_path)
    with pytest.raises(gprobe.ProbeError, match="interval"):
        gprobe.attach(model, opt, directory=tmp_path, interval=0)
    with pytest.raises(gprobe.ProbeError, match="batch must be a positive integer"):
        gprobe.attach(model, opt, directory=tmp_path, batch=0)
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.warns(RuntimeWarning, match="not streaming: cannot write"):
        unstreamed = gprobe.attach(model, opt, directory=blocker / "sub")
    unstreamed.close()  # the job ran on without a stream
    again = attach(model, opt)  # allowed once the first is closed
    assert not again.closed


def test_close_removes_hooks_and_stops_tracking(attach):
    model, opt = tiny()
    probe = attach(model, opt)
    probe.close()
    size = probe.path.stat().st_size
    train_step(model, opt)
    assert probe.path.stat().st_size == size
    assert not model._forward_pre_hooks and not model._forward_hooks
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    assert _get_current_dispatch_mode() is None


def test_probe_source_reads_the_stream(attach, tmp_path):
    model, opt = tiny()
    probe = attach(model, opt, batch=4, seq=1)
    train_step(model, opt)
    src = ProbeSource(tmp_path)
    r = src.poll()
    (info,) = r.probe_infos
    assert info.pid == os.getpid() and not info.ended and dict(info.setup)["batch"] == 4
    assert [m.phase for m in r.phase_marks] == [
        Phase.INIT, Phase.FORWARD, Phase.BACKWARD, Phase.OPTIMIZER_STEP, Phase.IDLE]
    assert all(p.device == "cpu" and p.reserved_bytes is None for p in r.probes)
    assert dict(r.probes[0].categories)["parameters"] == param_bytes(model)
    probe.close()
    assert src.poll().probe_infos[0].ended


def test_hf_model_config_is_published(attach):
    import torch
    import transformers
    config = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=16,
                                     bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(config)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    probe = attach(model, opt, batch=2, seq=8)
    ids = torch.randint(0, 64, (2, 8))
    model(input_ids=ids, labels=ids).loss.backward()  # backward marked from output.loss
    opt.step()
    recs = records(probe)
    info = recs[0]
    assert info["model_config"]["n_layer"] == 1 and info["model_config"]["n_embd"] == 32
    assert info["setup"]["optimizer"] == "SGD" and info["setup"]["momentum"] == 0.9
    assert info["setup"]["grad_ckpt"] is False
    assert [p for p, _ in marks(recs)] == ["init", "forward", "backward", "optimizer_step", "idle"]
    tied = {id(p) for p in model.parameters()}
    assert len(tied) == len(list(model.parameters()))  # tied LM head counted once
    by = {r["phase"]: r for r in recs if r["kind"] == "phase"}
    assert by["optimizer_step"]["categories"]["parameters"] == param_bytes(model)


def test_stream_file_is_bounded_by_rotation(attach, tmp_path):
    model, opt = tiny()
    probe = attach(model, opt, max_file_bytes=64 << 10)
    src = ProbeSource(tmp_path)
    src.poll()
    for _ in range(600):  # ~300 bytes each: several rotations
        probe.sample()
    assert probe.path.stat().st_size <= 64 << 10
    lines = probe.path.read_text().splitlines()
    assert json.loads(lines[0])["kind"] == "info"  # every generation starts with the setup
    assert not (tmp_path / f"{probe.path.name}.new").exists()
    reading = src.poll()
    assert reading.probe_infos[0].pid == os.getpid() and reading.probes
    assert any("restarted" in n for n in reading.notices)


def test_a_sample_taken_while_the_training_thread_allocates_still_adds_up(attach):
    """The sampling thread walks the parameters while training goes on: a tensor freed in
    between must not leave categories summing above the live bytes (found as a flaky end-to-end
    demo test under load). Here the 'training thread' frees a tensor during the first read."""
    import torch
    model, opt = tiny()
    probe = attach(model, opt)
    train_step(model, opt)
    scratch = [torch.ones(4096)]
    real_categories = probe.categories
    calls = []

    def categories_while_training(gradients=None):
        result = real_categories(gradients)
        if not calls:
            scratch.clear()  # freed between this read of the categories and of the live bytes
        calls.append(result)
        return result

    probe.categories = categories_while_training
    fields = probe.memory()
    assert len(calls) == 2  # the first reading saw a free and was taken again
    assert sum(fields["categories"].values()) == fields["cpu_live_tensors"]


def test_the_sampling_thread_never_reads_param_grad(attach):
    """autograd stores ``param.grad`` without the GIL, so the sampling thread reading it during
    backward could crash the job (SIGSEGV seen in benchmark runs): it takes the gradient bytes
    from the tracker's 'gradients' label instead, and they agree with the gradients."""
    import torch
    import threading

    model, opt = tiny()
    probe = attach(model, opt)
    model(torch.randn(4, 32)).square().mean().backward()  # gradients stored and labelled
    asked = []
    real_categories = probe.categories
    probe.categories = lambda gradients=None: asked.append(gradients) or real_categories(gradients)
    sampler = probe._thread
    probe._thread = threading.current_thread()  # read as the sampling thread does
    try:
        categories, live, _ = probe._consistent_reading()
    finally:
        probe._thread = sampler
    assert asked and None not in asked  # never left to walk param.grad
    assert categories["gradients"] == param_bytes(model) and live >= sum(categories.values())
