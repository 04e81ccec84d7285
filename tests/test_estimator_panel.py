"""EstimatorPanel behaviour in a tiny host app (run_test + Pilot), against the real estimator.

Expected numbers come from calling the estimator directly with the same inputs, so these
tests check the panel's wiring (form -> spec -> estimate -> screen), not copied results.
"""

from __future__ import annotations

import json

import pytest
from textual.app import App
from textual.widgets import Input, Select, Static

from gpumem_tui.estimator.architecture import CATALOGUE_DIR, load_architecture
from gpumem_tui.estimator.estimate import estimate
from gpumem_tui.estimator.solve import max_batch
from gpumem_tui.estimator.spec import TrainingSpec
from gpumem_tui.telemetry.model import ProbeInfo
from gpumem_tui.analysis.process_estimate import from_probe_info
from gpumem_tui.ui.estimator_panel import EstimatorPanel
from gpumem_tui.ui.memory_bar import MemoryBar, bands_from_estimate
from gpumem_tui.ui.themes import APP_VARIABLES
from gpumem_tui.support.units import GiB, format_bytes
from waiting import settle

SIZE = (80, 48)


class Host(App[None]):
    """The panel alone in an app. It mounts after the first frame, as the dashboard mounts its
    side pane (GpuMemApp._mount_side_pane): composed with the screen, its ~90 widgets were
    styled on their mount and all again by the screen's first ScreenResume (Textual restyles
    the whole screen then), a third of these tests' stylesheet work."""

    def __init__(self) -> None:
        super().__init__()
        self.changes: list[EstimatorPanel.EstimateChanged] = []

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return dict(APP_VARIABLES)

    def on_mount(self) -> None:
        self.call_after_refresh(self.mount, EstimatorPanel(model="gpt2"))

    def on_estimator_panel_estimate_changed(self, message: EstimatorPanel.EstimateChanged) -> None:
        self.changes.append(message)


def _text(widget: Static) -> str:
    content = widget.content
    return content.plain if hasattr(content, "plain") else str(content)



def _show(panel, info, device=None):
    """Show a probed process in the panel as the app does; returns the estimate's problem."""
    process = from_probe_info(info, device)
    panel.show_process(info.pid, process)
    return process.problem

async def _settle(app: App, pilot) -> None:
    """Let the panel mount (Host), then messages, the largest-batch solve (and any it queued)
    finish."""
    await settle(pilot, lambda: any(p._fields_mounted for p in app.query(EstimatorPanel)), what="the panel's mount")
    await pilot.pause()
    for _ in range(200):
        await app.workers.wait_for_complete()
        await pilot.pause()
        if not any(p.solving for p in app.query(EstimatorPanel)):
            return
    raise AssertionError("the largest-batch solve never finished")


def _spec(**kw) -> TrainingSpec:
    base = dict(task="train", batch=1, seq=1024, dtype="bf16", optimizer="adamw", attention="sdpa", device="cuda")
    base.update(kw)
    return TrainingSpec(**base)


async def test_initial_estimate_matches_the_estimator_and_is_posted():
    app = Host()
    async with app.run_test(size=SIZE) as pilot:
        await _settle(app, pilot)
        panel = app.query_one(EstimatorPanel)
        expected = estimate(load_architecture("gpt2"), _spec())
        assert panel.invalid_fields == {}
        assert panel.estimate.peak_bytes == expected.peak_bytes
        assert app.changes and app.changes[-1].estimate.peak_bytes == expected.peak_bytes
        assert app.changes[-1].bands[-1][1] == expected.peak_bytes


async def test_typing_a_batch_updates_the_estimate():
    app = Host()
    async with app.run_test(size=SIZE) as pilot:
        await _settle(app, pilot)
        panel = app.query_one(EstimatorPanel)
        before = panel.estimate
        batch = panel.query_one("#est-batch", Input)
        batch.focus()
        batch.value = ""
        await pilot.press("8")
        await _settle(app, pilot)
        expected = estimate(load_architecture("gpt2"), _spec(batch=8))
        assert panel.spec.batch == 8
        assert panel.estimate.peak_bytes == expected.peak_bytes
        assert panel.estimate.components_bytes["activations"] > before.components_bytes["activations"]
        assert app.changes[-1].spec.batch == 8
        assert panel.last_update_seconds is not None  # timed (its target: benchmarks/panel_latency.py)


async def test_bad_value_marks_the_field_and_shows_no_stale_figure():
    app = Host()
    async with app.run_test(size=SIZE) as pilot:
        await _settle(app, pilot)
        panel = app.query_one(EstimatorPanel)
        panel.set_form(batch=4)
        await _settle(app, pilot)
        good = panel.estimate
        posted = len(app.changes)
        panel.query_one("#est-batch", Input).value = "0"
        await _settle(app, pilot)
        assert "batch" in panel.invalid_fields
        assert panel.query_one("#est-batch").has_class("-invalid")
        assert panel.query_one("#est-batch-label").has_class("-invalid")
        assert panel.estimate is good  # kept for when the form is good again, but not shown:
        assert len(app.changes) == posted  # nothing new posted for a bad form
        message = _text(panel.query_one("#est-message", Static))
        assert "batch" in message and "last valid" not in message
        # no figure of batch 4 stays on screen as if it were the estimate of what the form says
        shown = " ".join(_text(panel.query_one(f"#est-{name}", Static)) for name in ("fit", "maxbatch", "breakdown"))
        assert "GiB" not in shown and "MiB" not in shown and "largest" not in shown, shown
        assert "no estimate for this form" in _text(panel.query_one("#est-fit", Static))
        assert panel.query_one(MemoryBar)._segments == []  # an empty bar
        # an empty field is just as bad, and a later good value clears the marks
        panel.query_one("#est-batch", Input).value = ""
        await _settle(app, pilot)
        assert "batch" in panel.invalid_fields
        panel.query_one("#est-batch", Input).value = "2"
        await _settle(app, pilot)
        assert panel.invalid_fields == {}
        assert not panel.query_one("#est-batch").has_class("-invalid")
        assert panel.query_one("#est-message").has_class("-empty")
        assert panel.spec.batch == 2


async def test_contradiction_from_the_spec_marks_the_named_field():
    app = Host()
    async with app.run_test(size=SIZE) as pilot:
        await _settle(app, pilot)
        panel = app.query_one(EstimatorPanel)
        panel.set_form(dtype="fp32", mixed_precision=True)  # mixed precision needs 16-bit compute
        await _settle(app, pilot)
        assert "mixed_precision" in panel.invalid_fields
        assert panel.query_one("#est-mixed_precision").has_class("-invalid")
        panel.set_form(tp=5)  # 12 heads are not divisible by 5 (checked against the architecture)
        panel.set_form(mixed_precision=False)
        await _settle(app, pilot)
        assert "tp" in panel.invalid_fields


async def test_fit_text_against_a_gpu_total_and_max_batch():
    app = Host()
    async with app.run_test(size=SIZE) as pilot:
        await _settle(app, pilot)
        panel = app.query_one(EstimatorPanel)
        fit = panel.query_one("#est-fit", Static)
        assert "select a GPU" in _text(fit)
        assert panel.max_batch_value is None
        peak = panel.estimate.peak_bytes
        small = peak - 512 * 1024 * 1024
        panel.set_gpu_total(small, "GPU 0")
        await _settle(app, pilot)
        text = _text(fit)
        assert text.startswith("does not fit")
        assert format_bytes(peak - small, precision=2) in text and "GPU 0" in text
        assert fit.has_class("-nofit")
        panel.set_gpu_total(80 * GiB, "GPU 1")
        await _settle(app, pilot)
        text = _text(fit)
        assert text.startswith("fits") and format_bytes(80 * GiB - peak, precision=2) in text
        arch, spec = panel.architecture, panel.spec
        assert panel.max_batch_value == max_batch(arch, spec, 80 * GiB)
        assert str(panel.max_batch_value) in _text(panel.query_one("#est-maxbatch", Static))
        # a typed budget wins over the GPU total; a bare number is rejected (no unit)
        panel.set_form(budget="24")
        await _settle(app, pilot)
        assert "budget" in panel.invalid_fields
        panel.set_form(budget="24GiB")
        await _settle(app, pilot)
        assert panel.budget_bytes == 24 * GiB and panel.invalid_fields == {}
        assert panel.max_batch_value == max_batch(arch, spec, 24 * GiB)


async def test_show_process_sets_the_form_from_its_probe():
    config = json.loads((CATALOGUE_DIR / "gpt2.json").read_text())
    config["n_layer"] = 4  # a probed model that is not a catalogue entry
    info = ProbeInfo(
        pid=4321,
        model_config=config,
        setup=(("batch", 3), ("seq", 256), ("dtype", "torch.float32"), ("optimizer", "AdamW"), ("task", "train")),
    )
    app = Host()
    async with app.run_test(size=SIZE) as pilot:
        await _settle(app, pilot)
        panel = app.query_one(EstimatorPanel)
        assert _show(panel, info, device="cpu") is None
        await _settle(app, pilot)
        assert panel.query_one("#est-batch", Input).value == "3"
        assert panel.query_one("#est-seq", Input).value == "256"
        assert panel.query_one("#est-dtype", Select).value == "fp32"
        assert panel.query_one("#est-device", Select).value == "cpu"
        assert panel.architecture.num_layers == 4
        spec = panel.spec
        assert (spec.batch, spec.seq, spec.dtype, spec.optimizer, spec.device) == (3, 256, "fp32", "adamw", "cpu")
        assert panel.estimate.components_bytes["cuda_context"] == 0  # cpu kernels: no CUDA context
        # the user can override afterwards
        panel.set_form(batch=6)
        await _settle(app, pilot)
        assert panel.spec.batch == 6 and panel.architecture.num_layers == 4
        # a probe without batch: the model still applies, the reason is returned and shown
        partial = ProbeInfo(pid=99, model_config=config, setup=(("seq", 128),))
        reason = _show(panel, partial)
        assert reason is not None and "batch" in reason
        await _settle(app, pilot)
        assert "batch" in _text(panel.query_one("#est-message", Static))


async def test_inference_disables_training_fields_and_drops_gradients():
    app = Host()
    async with app.run_test(size=SIZE) as pilot:
        await _settle(app, pilot)
        panel = app.query_one(EstimatorPanel)
        panel.set_form(task="inference")
        await _settle(app, pilot)
        assert panel.query_one("#est-optimizer").disabled
        assert panel.query_one("#est-lora_rank").disabled
        assert panel.invalid_fields == {}
        assert panel.estimate.components_bytes["gradients"] == 0
        assert panel.estimate.components_bytes["kv_cache"] > 0
        panel.set_form(task="lora", lora_rank=16)
        await _settle(app, pilot)
        assert not panel.query_one("#est-lora_rank").disabled
        assert panel.spec.lora_rank == 16
        assert panel.estimate.trainable_params < panel.estimate.total_params


async def test_config_path_and_parameter_count(tmp_path):
    cfg = json.loads((CATALOGUE_DIR / "gpt2.json").read_text())
    cfg["n_embd"] = 256
    cfg["n_head"] = 4
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    app = Host()
    async with app.run_test(size=SIZE) as pilot:
        await _settle(app, pilot)
        panel = app.query_one(EstimatorPanel)
        panel.set_form(config=str(path))
        await _settle(app, pilot)
        assert panel.invalid_fields == {}
        assert panel.architecture.hidden_size == 256
        panel.set_form(config=str(tmp_path / "missing.json"))
        await _settle(app, pilot)
        assert "config" in panel.invalid_fields
        assert panel.query_one("#est-config").has_class("-invalid")
        assert panel.architecture.hidden_size == 256  # last good kept
        panel.set_form(config="7e9")
        await _settle(app, pilot)
        assert panel.invalid_fields == {}
        assert panel.estimate.total_params == pytest.approx(7e9, rel=0.01)


async def test_an_estimator_crash_is_shown_not_raised(monkeypatch):
    app = Host()
    async with app.run_test(size=SIZE) as pilot:
        await _settle(app, pilot)
        panel = app.query_one(EstimatorPanel)
        good = panel.estimate

        def boom(arch, spec):
            raise RuntimeError("kaboom")

        monkeypatch.setattr("gpumem_tui.estimator.estimate.estimate", boom)
        panel.set_form(batch=2)
        await _settle(app, pilot)
        assert "kaboom" in _text(panel.query_one("#est-message", Static))
        assert panel.estimate is good


async def test_memory_bar_draws_overflow_and_the_gpu_line():
    app = Host()
    async with app.run_test(size=SIZE) as pilot:
        await _settle(app, pilot)
        panel = app.query_one(EstimatorPanel)
        bar = panel.query_one(MemoryBar)
        peak = panel.estimate.peak_bytes
        panel.set_gpu_total(peak // 2)
        await _settle(app, pilot)
        line, ruler = bar.render().plain.split("\n")
        assert len(line) == bar.size.width
        assert "▒" in line and "░" not in line  # over the total: hatched, no free space
        assert "▲" in ruler and "GPU" in ruler
        # the marker sits at half the bar (total = peak / 2)
        assert abs(ruler.index("▲") - bar.size.width // 2) <= 2 or abs(ruler.rindex("▲") - bar.size.width // 2) <= 2
        panel.set_gpu_total(peak * 4)
        await _settle(app, pilot)
        line, _ = bar.render().plain.split("\n")
        assert line.count("░") >= bar.size.width * 3 // 4 - 1 and "▒" not in line


def test_bands_are_cumulative_and_end_at_the_peak():
    arch = load_architecture("gpt2")
    est = estimate(arch, _spec(batch=2))
    bands = bands_from_estimate(est)
    tops = [b[1] for b in bands]
    assert tops == sorted(tops)
    assert bands[0][0] == "parameters" and bands[0][1] == est.components_bytes["parameters"]
    assert tops[-1] == est.peak_bytes
    comps = est.components_bytes
    labels = [b[0] for b in bands]
    assert "+ CUDA context & reserve" in labels
    allocated_top = dict((b[0], b[1]) for b in bands)["+ activations (peak)"]
    assert allocated_top == est.peak_bytes - comps["cuda_context"] - comps["allocator_reserve"]
    assert all(v.startswith("band-") for _, _, v in bands)
    assert {v for _, _, v in bands} <= set(APP_VARIABLES)
    cpu = bands_from_estimate(estimate(arch, _spec(device="cpu")))
    assert "+ CUDA context & reserve" not in [b[0] for b in cpu]


async def test_theme_switch_recolours_the_bar_and_legend():
    from textual.theme import Theme

    app = Host()
    async with app.run_test(size=SIZE) as pilot:
        app.register_theme(Theme(name="redbands", primary="#112233", dark=True,
                                 variables={"band-parameters": "#ff0000"}))
        await _settle(app, pilot)
        panel = app.query_one(EstimatorPanel)
        bar = panel.query_one(MemoryBar)
        first = bar.render().spans[0].style
        assert "#ff0000" not in str(first).lower()
        app.theme = "redbands"
        await _settle(app, pilot)
        assert "#ff0000" in str(bar.render().spans[0].style).lower()
        legend = panel.query_one("#est-breakdown", Static).content
        assert any("#ff0000" in str(span.style).lower() for span in legend.spans)


async def test_show_process_with_garbage_probe_never_raises():
    app = Host()
    async with app.run_test(size=SIZE) as pilot:
        await _settle(app, pilot)
        panel = app.query_one(EstimatorPanel)
        good = panel.estimate
        for info in (
            ProbeInfo(pid=1, model_config=["not", "a", "dict"], setup=(("batch", 1), ("seq", 8))),
            ProbeInfo(pid=2, model_config={"model_type": "llama"}, setup=(("batch", "x"),)),
            ProbeInfo(pid=3, model_config=None, setup=()),
        ):
            reason = _show(panel, info)
            assert reason and f"pid {info.pid}" in reason and "\n" not in reason
            await _settle(app, pilot)
        assert panel.estimate is not None and panel.estimate.peak_bytes == good.peak_bytes


async def test_model_picker_type_to_search():
    app = Host()
    async with app.run_test(size=SIZE) as pilot:
        await _settle(app, pilot)
        panel = app.query_one(EstimatorPanel)
        select = panel.query_one("#est-model", Select)
        select.focus()
        await pilot.press("enter")  # open the list
        await pilot.press(*"mistral")
        await pilot.press("enter")
        await _settle(app, pilot)
        assert select.value == "mistral-7b"
        assert panel.architecture.model_type == "mistral"
        assert panel.estimate.total_params == estimate(load_architecture("mistral-7b"), _spec()).total_params


async def test_warnings_are_shown_not_hidden_in_assumptions():
    app = Host()
    async with app.run_test(size=SIZE) as pilot:
        await _settle(app, pilot)
        panel = app.query_one(EstimatorPanel)
        panel.set_form(seq=4096)  # GPT-2 has 1024 learned positions
        await _settle(app, pilot)
        notes = _text(panel.query_one("#est-notes", Static))
        assert "max_position_embeddings" in notes and panel.invalid_fields == {}
        panel.set_form(seq=512, zero=2)  # ZeRO over one device saves nothing
        await _settle(app, pilot)
        notes = _text(panel.query_one("#est-notes", Static))
        assert "ZeRO 2" in notes and "--" not in notes and "max_position" not in notes


async def test_hostile_probed_model_name_is_shown_literally():
    config = json.loads((CATALOGUE_DIR / "gpt2.json").read_text())
    info = ProbeInfo(pid=7, model_config=config,
                     setup=(("batch", 1), ("seq", 64), ("model_name", "[bold red]pwn[/] \x1b[31mx")))
    app = Host()
    async with app.run_test(size=SIZE) as pilot:
        await _settle(app, pilot)
        panel = app.query_one(EstimatorPanel)
        assert _show(panel, info) is None
        await _settle(app, pilot)
        select = panel.query_one("#est-model", Select)
        label = select.query_one("SelectCurrent #label", Static)
        shown = "".join(seg.text for seg in label.render_line(0))
        assert "[bold red]pwn[/]" in shown and "\x1b" not in shown


async def test_model_picker_offers_models_from_the_hf_cache(tmp_path, monkeypatch):
    snap = tmp_path / "hub" / "models--acme--tiny-qwen3" / "snapshots" / "r1"
    snap.mkdir(parents=True)
    config = json.loads((CATALOGUE_DIR / "qwen3-0.6b.json").read_text())
    (snap / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 3}))
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    app = Host()
    async with app.run_test(size=SIZE) as pilot:
        await _settle(app, pilot)
        panel = app.query_one(EstimatorPanel)
        select = panel.query_one("#est-model", Select)
        select.value = str(snap / "config.json")
        await _settle(app, pilot)
        assert panel.architecture.model_type == "qwen3" and panel.architecture.num_layers == 3


async def test_a_state_space_config_is_named_as_unsupported_in_the_form_s_words(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "mamba", "hidden_size": 768, "num_hidden_layers": 24,
                                "vocab_size": 50280, "state_size": 16, "conv_kernel": 4}))
    app = Host()
    async with app.run_test(size=SIZE) as pilot:
        await _settle(app, pilot)
        panel = app.query_one(EstimatorPanel)
        panel.set_form(config=str(path))
        for _ in range(100):  # the file is read off the UI thread
            await _settle(app, pilot)
            if "reading" not in panel.invalid_fields.get("config", "reading"):
                break
        message = _text(panel.query_one("#est-message", Static))
        assert "model_type 'mamba' is a state-space model" in message and "not supported" in message
        assert "(config 1.4e9 for 1.4 B)" in message and "--params" not in message
        assert "lacks field" not in message
        assert "no estimate for this form" in _text(panel.query_one("#est-fit", Static))


async def test_a_probed_ddp_rank_is_estimated_per_rank_in_the_form_and_its_what_ifs():
    """The probe saw DDP over 2 ranks: the form's estimate is one rank's (the same per-rank
    estimate the comparison uses, with DDP's gradient buckets), its what-ifs stay per rank,
    and the line over the form says so; a one-device what-if would predict less."""
    from gpumem_tui.analysis.probed_job import rank_estimate
    from gpumem_tui.estimator.estimate import estimate as one_device

    config = json.loads((CATALOGUE_DIR / "gpt2.json").read_text())
    setup = (("batch", 2), ("seq", 128), ("dtype", "torch.float32"), ("optimizer", "AdamW"), ("task", "train"),
             ("rank", 1), ("world_size", 2), ("local_rank", 1), ("job_id", "h:29500"),
             ("parallel", {"strategy": "ddp", "world_size": 2}))
    info = ProbeInfo(pid=4400, model_config=config, setup=setup)
    process = from_probe_info(info, "cpu")
    assert process.plan is not None and process.plan.kind == "ddp"
    app = Host()
    async with app.run_test(size=SIZE) as pilot:
        await _settle(app, pilot)
        panel = app.query_one(EstimatorPanel)
        panel.show_process(info.pid, process, process)
        await _settle(app, pilot)
        assert panel.estimate.peak_bytes == process.estimate.peak_bytes
        assert _text(panel.query_one("#est-whatif", Static)) == \
            "PID 4400: the job's own estimate (from its probe), per rank (ddp, 2 ranks)"
        panel.set_form(batch=4)
        await _settle(app, pilot)
        per_rank = rank_estimate(panel.architecture, panel.spec, process.plan).estimate
        assert panel.estimate.peak_bytes == per_rank.peak_bytes
        assert one_device(panel.architecture, panel.spec).peak_bytes < per_rank.peak_bytes
        assert _text(panel.query_one("#est-whatif", Static)).startswith("what-if on PID 4400, per rank (ddp, 2 ranks): batch 4")
        # another process without a plan: one device again, no "per rank"
        plain = from_probe_info(ProbeInfo(pid=4401, model_config=config, setup=setup[:5]), "cpu")
        panel.show_process(plain.pid, plain, plain)
        await _settle(app, pilot)
        assert panel.estimate.peak_bytes == one_device(panel.architecture, panel.spec).peak_bytes
        assert "per rank" not in _text(panel.query_one("#est-whatif", Static))
