"""Terminal plots (plotext) printed by ``estimate --plot`` and ``compare --plot``: units, legend,
width, colour only on a terminal, bad flags, and plotext kept out of the other commands."""

from __future__ import annotations

import dataclasses
import io
import math
import re
import subprocess
import sys
from pathlib import Path

import package_source
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpumem_tui.estimator import cli
from gpumem_tui.estimator.architecture import architecture_from_config, load_config
from gpumem_tui.estimator.estimate import estimate
from gpumem_tui.estimator.spec import TrainingSpec
from gpumem_tui.plots.canvas import byte_axis, format_size, legend_lines
from gpumem_tui.plots.estimate_plot import BANDS, Limit, estimate_plot
from gpumem_tui.plots.options import PlotOptions
from gpumem_tui.support.units import GiB, MiB

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
PACKAGE = Path(__file__).resolve().parents[1] / "gpumem_tui"
# a row of the canvas that is a horizontal line from frame to frame: the --fit budget
BUDGET_ROW = re.compile(r"│─{20,}│")


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _gpt2(**spec) -> object:
    config, name = load_config("gpt2")
    return estimate(architecture_from_config(config, name=name), TrainingSpec(**spec))


# ---- estimate --plot ---------------------------------------------------------------------------


def test_estimate_plot_has_unit_bands_and_the_peak(capsys) -> None:
    code, out, err = _run(["gpt2", "--batch", "8", "--seq", "1024", "--plot", "--width", "100"], capsys)
    assert code == 0 and err == ""
    est = _gpt2(batch=8, seq=1024)
    assert "GiB (2^30 bytes)" in out  # the unit, binary, said
    assert f"peak {format_size(est.peak_bytes)}" in out
    for key, name, _style in BANDS:  # a band in the legend with its size at the peak
        if any(p.components.get(key, 0) for p in est.phases):
            assert f"{name} {format_size(est.components_bytes[key])}" in out
    # the phases are the x axis, in the step's order
    ticks = next(line for line in out.splitlines() if "forward" in line and "backward" in line)
    assert ticks.index("forward") < ticks.index("backward") < ticks.index("optimizer step")
    assert "PEAK" not in out  # the chart replaces the table
    assert not BUDGET_ROW.search(out)


def test_small_model_is_plotted_in_mib(capsys) -> None:
    code, out, _ = _run(["--params", "1e6", "--device", "cpu", "--seq", "64", "--plot"], capsys)
    assert code == 0 and "MiB (2^20 bytes)" in out and "GiB" not in out
    assert "live tensor bytes" in out  # which figure: on cpu not NVML used


@pytest.mark.parametrize("width", [40, 57, 80, 133])
def test_every_line_fits_the_width(width: int, capsys) -> None:
    code, out, _ = _run(["llama-3.1-8b", "--parallel", "fsdp2", "--dp", "8", "--plot", "--width", str(width),
                         "--height", "14"], capsys)
    assert code == 0
    chart = out.split("PER RANK")[0].splitlines()  # the job's lines after the chart are not the chart's
    assert len(chart) > 14 and max(len(line) for line in chart) <= width
    assert max(len(line) for line in chart) >= width - 2  # the chart uses the width it is given


def test_height_sets_the_chart_rows(capsys) -> None:
    for rows in (12, 25):
        _, out, _ = _run(["gpt2", "--plot", "--width", "80", "--height", str(rows)], capsys)
        lines = out.splitlines()
        top = next(i for i, line in enumerate(lines) if "┌" in line)
        bottom = next(i for i, line in enumerate(lines) if "└" in line)
        assert bottom - top + 1 == rows - 3  # title above, tick labels and axis labels below


def test_parallel_plan_says_per_rank(capsys) -> None:
    code, out, _ = _run(["llama-3.1-8b", "--parallel", "fsdp2", "--dp", "8", "--plot", "--width", "120"], capsys)
    assert code == 0 and "per rank (every rank)" in out


def test_fit_draws_the_budget_line(capsys) -> None:
    code, out, _ = _run(["gpt2", "--batch", "8", "--plot", "--fit", "24GiB", "--width", "90"], capsys)
    assert code == 0 and BUDGET_ROW.search(out)
    assert "budget 24GiB: 24.00 GiB" in out and "fits 24GiB" in out


def test_no_colour_off_a_terminal_and_colour_on_one(monkeypatch, capsys) -> None:
    _, out, _ = _run(["gpt2", "--plot"], capsys)
    assert "\x1b" not in out  # capsys's stdout is not a terminal

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    for no_color, coloured in (("", True), ("1", False)):
        monkeypatch.setenv("NO_COLOR", no_color)
        monkeypatch.setenv("TERM", "xterm-256color")
        screen = Terminal()
        monkeypatch.setattr(sys, "stdout", screen)
        assert cli.main(["gpt2", "--plot", "--width", "70"]) == 0
        text = screen.getvalue()
        assert ("\x1b[" in text) is coloured
        assert max(len(ANSI.sub("", line)) for line in text.splitlines()) <= 70


@pytest.mark.parametrize("argv, message", [
    (["--plot", "--width", "20"], "--width: must be between 40 and 1000 columns, got '20'"),
    (["--plot", "--width", "abc"], "--width: must be a whole number of columns, got 'abc'"),
    (["--plot", "--width", "-3"], "--width: must be between"),
    (["--plot", "--width", "1e3"], "--width: must be a whole number"),
    (["--plot", "--height", "5"], "--height: must be between 10 and 300 rows"),
    (["--width", "80"], "--width and --height size the --plot chart; add --plot"),
    (["--plot", "--json"], "--plot prints a chart and --json prints data: give one of them"),
])
def test_bad_plot_flags_are_one_line_exit_2(argv: list[str], message: str, capsys) -> None:
    code, out, err = _run(["gpt2", *argv], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and message in err


def test_model_name_is_shown_literally() -> None:
    est = dataclasses.replace(_gpt2(), model="evil\x1b[2J\x07name")
    text = estimate_plot(est, PlotOptions(width=80, height=16, colour=False), limit=Limit(GiB, "a\x1bb"))
    assert "\x1b" not in text and "\x07" not in text and "evil" in text


def test_inference_phases_are_prefill_and_decode() -> None:
    config, name = load_config("gpt2")
    est = estimate(architecture_from_config(config, name=name),
                   TrainingSpec(task="inference", batch=4, seq=512, new_tokens=64))
    text = estimate_plot(est, PlotOptions(width=80, height=16, colour=False))
    assert "prefill" in text and "decode" in text and "KV cache" in text and "gradients" not in text


# ---- the pieces ---------------------------------------------------------------------------------


def test_byte_axis_units() -> None:
    assert byte_axis(300 * MiB).unit == "MiB" and byte_axis(GiB).unit == "GiB"
    axis = byte_axis(12.3 * GiB)
    assert axis.ticks[-1] == axis.upper >= 12.3 and axis.labels[:2] == ("0.0", "2.5")  # step 2.5 >= 12.3 / 5
    assert byte_axis(0).upper > 0  # an empty estimate still gets an axis


@settings(max_examples=200, deadline=None)
@given(top=st.floats(min_value=1, max_value=2.0**50, allow_nan=False))
def test_byte_axis_covers_the_top_with_few_readable_ticks(top: float) -> None:
    axis = byte_axis(top)
    assert axis.upper * axis.factor >= top * (1 - 1e-9)
    assert 2 <= len(axis.ticks) <= 6
    assert len(set(axis.labels)) == len(axis.labels)  # distinct labels: enough decimals
    assert all(b > a for a, b in zip(axis.ticks, axis.ticks[1:]))


@settings(max_examples=200, deadline=None)
@given(texts=st.lists(st.text(alphabet="abc xyz", min_size=1, max_size=70), max_size=12),
       width=st.integers(min_value=40, max_value=120))
def test_legend_wraps_to_the_width_and_keeps_the_order(texts: list[str], width: int) -> None:
    lines = legend_lines([("#", t) for t in texts], width)
    assert all(len(line) <= width for line in lines)
    joined = "  ".join(lines)
    positions = [joined.find(f"# {t[: width - 3]}") for t in texts]
    assert all(p >= 0 for p in positions)


# ---- plotext stays out of the rest ----------------------------------------------------------------


def test_estimate_without_plot_does_not_import_plotext() -> None:
    code = ("import sys\nfrom gpumem_tui.estimator import cli\n"
            "assert cli.main(['gpt2']) == 0\n"
            "print('plotext' in sys.modules, 'gpumem_tui.plots.canvas' in sys.modules)\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[-1] == "False False"


@pytest.mark.xdist_group(package_source.GROUP)  # the package's parse, shared with test_code_size
def test_the_estimator_core_knows_no_plots() -> None:
    # DESIGN.md rule 1: estimator/ is pure; only its CLI module reaches the plots, lazily
    offenders = []
    estimator = PACKAGE / "estimator"
    modules = [m for m in package_source.package_sources() if m.path.is_relative_to(estimator)]
    assert len(modules) > 20  # the estimator's modules, not an empty selection
    for module in modules:
        path = module.path
        if path.name == "cli.py" and path.parent.name == "estimator":
            continue
        for imp in module.imports:
            names = [imp.module or ""] if imp.is_from else list(imp.names)
            offenders += [f"{path.name}: {n}" for n in names if n.startswith(("plotext", "gpumem_tui.plots"))]
    assert offenders == []


# ---- compare --plot (the drawing; plain values in) --------------------------------------------------

from gpumem_tui.plots.compare_plot import Level, compare_plot, reduce_curve  # noqa: E402


def _job(steps: int = 6, t0: float = 1_700_000_000.0):
    """A made-up probed job: each step a forward rise, a backward top, an optimizer step."""
    curve, step_levels, phase_levels, t = [], [], [], t0
    predicted = {"forward": 5 * GiB, "backward": 7 * GiB, "optimizer_step": 3 * GiB}
    for s in range(steps):
        start = t
        for phase, low, high in (("forward", 2 * GiB, 5 * GiB), ("backward", 5 * GiB, 7 * GiB),
                                 ("optimizer_step", 3 * GiB, 3 * GiB + 100 * MiB)):
            begin = t
            for i in range(30):
                curve.append((t, low + (high - low) * i // 29 + s * 10 * MiB))
                t += 0.1
            phase_levels.append(Level(predicted[phase], phase, begin, t))
        step_levels.append(Level(7 * GiB + s * 10 * MiB, str(s), start, t))
    return curve, step_levels, phase_levels


@pytest.mark.parametrize("width", [40, 64, 101])
def test_compare_plot_labels_fit_the_width_and_have_no_colour(width: int) -> None:
    curve, steps, phases = _job()
    text = compare_plot(curve, "torch reserved", PlotOptions(width=width, height=18, colour=False),
                        steps=steps, phases=phases, title="pid 4242 on cuda:0, gpt2")
    assert "\x1b" not in text
    assert max(len(line) for line in text.splitlines()) <= width
    flat = " ".join(text.split())  # the legend may wrap between words
    assert "measured torch reserved, max 7.05 GiB" in flat
    assert "per-step peak of 6 steps, max 7.05 GiB" in flat
    for name, size in (("forward", "5.00"), ("backward", "7.00"), ("optimizer step", "3.00")):
        assert f"predicted {name} {size} GiB" in flat
    axis_labels = next(line for line in text.splitlines() if "time (s)" in line)
    assert axis_labels.startswith("GiB")  # the y unit, under its axis


def test_compare_plot_colour_and_literal_text() -> None:
    curve, steps, phases = _job(2)
    coloured = compare_plot(curve, "NVML used", PlotOptions(width=80, height=16, colour=True), steps=steps)
    assert "\x1b[" in coloured
    assert max(len(ANSI.sub("", line)) for line in coloured.splitlines()) <= 80
    hostile = compare_plot(curve, "NVML\x1b[2J used", PlotOptions(width=80, height=16, colour=False),
                           title="pid 1 \x1b]0;owned\x07")
    assert "\x1b" not in hostile and "\x07" not in hostile


def test_compare_plot_time_unit_follows_the_span() -> None:
    day = [(1_700_000_000.0 + i * 600.0, GiB + i * MiB) for i in range(145)]  # 24 h, a sample per 10 min
    text = compare_plot(day, "NVML used", PlotOptions(width=80, height=16, colour=False))
    assert "time (h)" in text and "24" in text
    assert "time (min)" in compare_plot(day[:20], "NVML used", PlotOptions(width=80, height=16, colour=False))


def test_compare_plot_without_phase_spans_draws_whole_width_levels() -> None:
    curve, _, _ = _job(1)
    text = compare_plot(curve, "torch allocated", PlotOptions(width=70, height=16, colour=False),
                        phases=[Level(6 * GiB, "backward")])
    # across the canvas, where the curve does not cross it
    assert max(line.count("=") for line in text.splitlines()) >= 50


def test_compare_plot_needs_a_sample() -> None:
    with pytest.raises(ValueError, match="no measured samples"):
        compare_plot([(math.nan, GiB)], "NVML used", PlotOptions(width=80, height=16, colour=False))


@settings(max_examples=100, deadline=None)
@given(values=st.lists(st.integers(min_value=0, max_value=2**40), min_size=1, max_size=3000),
       buckets=st.integers(min_value=1, max_value=200))
def test_reduce_curve_keeps_the_extremes(values: list[int], buckets: int) -> None:
    points = [(float(i), v) for i, v in enumerate(values)]
    reduced = reduce_curve(points, buckets)
    assert len(reduced) <= max(len(points), 0) and len(reduced) <= max(2 * buckets, len(points) if
                                                                          len(points) <= 2 * buckets else 0)
    assert max(v for _, v in reduced) == max(values) and min(v for _, v in reduced) == min(values)
    assert [t for t, _ in reduced] == sorted(t for t, _ in reduced)


# ---- compare --plot: what a trace gives the plot ---------------------------------------------------

import json as _json  # noqa: E402

from gpumem_tui.estimator.architecture import CATALOGUE_DIR  # noqa: E402
from gpumem_tui.plots.trace_series import gather  # noqa: E402
from gpumem_tui.analysis.process_estimate import from_probe_info  # noqa: E402
from gpumem_tui.telemetry.model import Phase, PhaseMark, PhasePeak, ProbeInfo, ProbeSample, Snapshot  # noqa: E402

GPT2_CONFIG = _json.loads((CATALOGUE_DIR / "gpt2.json").read_text())
T0 = 1_700_000_000.0


def _info(pid: int = 500, device: str = "cuda:0") -> ProbeInfo:
    setup = {"task": "train", "batch": 2, "seq": 128, "dtype": "float32", "device": device,
             "optimizer": "AdamW", "grad_ckpt": False, "attention": "sdpa"}
    return ProbeInfo(pid=pid, model_config=GPT2_CONFIG, setup=tuple(setup.items()))


def _snapshots(steps: int, *, peaks: bool, device: str = "cuda:0", pid: int = 500, other: int = 501):
    """A probed job: per step three phases 1 s each, a sample every 0.25 s (another process's
    samples interleaved, which must not count), the probe's high-water marks when ``peaks``."""
    snaps = [Snapshot(time=T0, probe_infos=(_info(pid, device), _info(other, device)))]
    t = T0
    for step in range(1, steps + 1):
        for n, phase in enumerate((Phase.FORWARD, Phase.BACKWARD, Phase.OPTIMIZER_STEP)):
            samples = tuple(ProbeSample(time=t + k / 4, pid=p, device=device,
                                        allocated_bytes=(100 + 10 * step + 50 * n + k) * MiB * (1 if p == pid else 9))
                            for k in range(4) for p in (pid, other))
            peak = (PhasePeak(pid=pid, step=step, phase=phase, start=t, end=t + 1,
                              peak_bytes=(200 + 10 * step + 50 * n) * MiB, device=device),) if peaks else ()
            snaps.append(Snapshot(time=t, probes=samples, phase_marks=(PhaseMark(t, pid, phase, step),),
                                  phase_peaks=peak))
            t += 1
    return snaps


def test_gather_reads_the_probes_high_water_marks_and_predicts_in_the_same_figure() -> None:
    series = gather(_snapshots(5, peaks=True), 500)
    assert series.figure == "torch allocated" and series.steps_label == "per-step peak"
    assert [(s.value_bytes, s.start, s.end) for s in series.steps] == [
        ((300 + 10 * n) * MiB, T0 + 3 * (n - 1), T0 + 3 * n) for n in range(1, 6)]
    assert len(series.curve) == 5 * 3 * 4 and max(b for _, b in series.curve) < 1 * (1 << 30)  # pid 501 left out
    estimate = from_probe_info(_info(), device="cuda:0").estimate
    allocated = {p.name: p.live_bytes - p.components["cuda_context"] - p.components["allocator_reserve"]
                 for p in estimate.phases}
    assert {(lv.label, lv.value_bytes) for lv in series.phases} == set(allocated.items())
    assert len(series.phases) == 15 and all(lv.start is not None for lv in series.phases)
    assert "gpt2" in series.title and series.notes == []


def test_gather_without_high_water_marks_takes_the_highest_sample_between_marks() -> None:
    series = gather(_snapshots(3, peaks=False, device="cpu"), 500)
    assert series.figure == "CPU live tensors" and series.steps_label == "per-step highest sample"
    # step n: its samples rise to (100 + 10 n + 50 * 2 + 3) MiB in the optimizer step
    assert [s.value_bytes for s in series.steps] == [(203 + 10 * n) * MiB for n in range(1, 4)]
    assert [s.start for s in series.steps] == [T0, T0 + 3, T0 + 6]
    spans = [(lv.label, lv.start, lv.end) for lv in series.phases]
    assert spans[:2] == [("forward", T0, T0 + 1), ("backward", T0 + 1, T0 + 2)]


def test_gather_without_probe_info_draws_no_prediction() -> None:
    snaps = [s for s in _snapshots(2, peaks=True)]
    snaps[0] = Snapshot(time=T0)
    series = gather(snaps, 500)
    assert series.phases == [] and "no model/setup information" in series.notes[0]
    assert len(series.steps) == 2


@pytest.mark.parametrize("peaks", [True, False])
def test_gather_keeps_memory_bounded_on_a_long_run(peaks: bool, monkeypatch) -> None:
    from gpumem_tui.plots import trace_series

    limit = 64  # the bound made small, so the run that passes it is short
    monkeypatch.setattr(trace_series, "MAX_SPANS", limit)
    steps = 2 * limit + 300  # past the point where neighbouring steps are merged while reading
    series = gather(_snapshots(steps, peaks=peaks), 500, buckets=50)
    assert len(series.curve) <= 8 * 50 and len(series.steps) <= limit
    top = (200 + 10 * steps + 100) * MiB if peaks else (100 + 10 * steps + 100 + 3) * MiB
    assert max(s.value_bytes for s in series.steps) == top
    assert series.steps[0].start == T0 and series.steps[-1].end >= T0 + 3 * steps - 1
    assert all(lv.start is None for lv in series.phases) and len(series.phases) == 3  # across the plot
    text = compare_plot(series.curve, series.figure, PlotOptions(width=80, height=16, colour=False),
                        steps=series.steps, phases=series.phases)
    assert max(len(line) for line in text.splitlines()) <= 80


def _canvas_rows(out: str) -> list[str]:
    """The inside of the chart's frame, one string per row, top first."""
    lines = out.splitlines()
    top = next(i for i, line in enumerate(lines) if "┌" in line)
    bottom = next(i for i, line in enumerate(lines) if "└" in line)
    return [re.split(r"[┤│┼├]", line, maxsplit=1)[1].rsplit("│", 1)[0] for line in lines[top + 1:bottom]]


@pytest.mark.parametrize("method", ["detailed", "bytes20", "zero16"])
@pytest.mark.parametrize("rows", [10, 11, 13, 16, 22, 30])
def test_peak_label_sits_above_the_bars(method: str, rows: int, capsys) -> None:
    _, out, _ = _run(["gpt2", "--batch", "3", "--method", method, "--plot", "--width", "60", "--height", str(rows)],
                     capsys)
    canvas = _canvas_rows(out)
    label = re.search(r"peak [0-9.,]+ [MG]iB", out).group(0)
    at = next(i for i, row in enumerate(canvas) if label in row)
    marks = {style.mark for _, _, style in BANDS}
    assert not marks & set(canvas[at].replace(label, ""))  # the label's row holds only the label
    assert all(not marks & set(row) for row in canvas[:at])  # nothing of a bar above it
    assert any(marks & set(row) for row in canvas[at + 1:])  # the bars are below


def test_compare_chart_puts_compares_peak_in_the_charts_figure_under_it() -> None:
    from gpumem_tui.plots.compare_chart import compare_chart
    from gpumem_tui.analysis.process_estimate import compare_snapshots

    snaps = _snapshots(4, peaks=True)
    result = compare_snapshots(snaps, pid=500).to_json()
    text = compare_chart(snaps, result, PlotOptions(width=72, height=16, colour=False))
    (peak,) = [p for p in result["peaks"] if p["figure"] == "torch allocated"]
    assert f"peak in torch allocated: predicted {format_size(peak['predicted_bytes'])}, " \
           f"measured {format_size(peak['measured_bytes'])}" in text
    assert "gpt2" in text.splitlines()[0] and "measured torch allocated" in text
    assert max(len(line) for line in text.splitlines()) <= 72


def test_plot_without_plotext_is_one_line_exit_1(monkeypatch, capsys) -> None:
    for name in [m for m in sys.modules if m == "plotext" or m.startswith(("plotext.", "gpumem_tui.plots."))]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "plotext", None)  # import fails as where it is not installed
    code, out, err = _run(["gpt2", "--plot"], capsys)
    assert code == 1 and out == "" and err.count("\n") == 1 and "--plot needs plotext" in err


# ---- compare --plot on a recorded trace -------------------------------------------------------------


def _trace(tmp_path: Path, steps: int = 6) -> Path:
    from gpumem_tui.telemetry.replay import TraceRecorder

    path = tmp_path / "job.jsonl"
    with TraceRecorder(path) as rec:
        for snap in _snapshots(steps, peaks=True):
            rec.write(snap)
    return path


def test_compare_plot_prints_the_chart_instead_of_the_table(tmp_path: Path, capsys) -> None:
    from gpumem_tui.analysis import compare_cli

    path = _trace(tmp_path)
    code = compare_cli.main([str(path), "--pid", "500", "--plot", "--width", "72", "--height", "16"])
    out, err = capsys.readouterr()
    assert code == 0 and err == ""
    assert "\x1b" not in out and max(len(line) for line in out.splitlines()) <= 72
    flat = " ".join(out.split())
    assert "measured torch allocated" in flat and "per-step peak of 6 steps" in flat
    assert "predicted backward" in flat and "peak in torch allocated: predicted" in flat
    assert "error %" not in out  # not the table
    axis = next(line for line in out.splitlines() if "time (s)" in line)
    assert axis.startswith("GiB")


def test_compare_plot_until_cuts_the_chart_where_compare_cuts(tmp_path: Path, capsys) -> None:
    from gpumem_tui.analysis import compare_cli

    path = _trace(tmp_path)
    assert compare_cli.main([str(path), "--pid", "500", "--plot", "--until", "5.5"]) == 0
    out = " ".join(capsys.readouterr()[0].split())
    assert "per-step peak of 2 steps" in out  # steps 1 and 2 end by 6 s; step 3 is cut


@pytest.mark.parametrize("argv, message", [
    (["--plot", "--json"], "--plot prints a chart and --json prints data: give one of them"),
    (["--plot", "--width", "39"], "--width: must be between 40 and 1000 columns, got '39'"),
    (["--plot", "--height", "x"], "--height: must be a whole number of rows, got 'x'"),
    (["--height", "20"], "--width and --height size the --plot chart; add --plot"),
])
def test_compare_plot_bad_flags_are_one_line_exit_2(tmp_path: Path, argv: list[str], message: str, capsys) -> None:
    from gpumem_tui.analysis import compare_cli

    code = compare_cli.main([str(_trace(tmp_path, 1)), "--pid", "500", *argv])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1 and message in err


@settings(max_examples=40, deadline=None)
@given(width=st.integers(min_value=40, max_value=240), height=st.integers(min_value=10, max_value=60),
       batch=st.integers(min_value=1, max_value=64), colour=st.booleans())
def test_any_allowed_size_fits_both_plots(width: int, height: int, batch: int, colour: bool) -> None:
    options = PlotOptions(width=width, height=height, colour=colour)
    curve, steps, phases = _job(3)
    for text in (estimate_plot(_gpt2(batch=batch), options, limit=Limit(24 * GiB, "24GiB")),
                 compare_plot(curve, "NVML used", options, steps=steps, phases=phases, title="pid 1")):
        lines = [ANSI.sub("", line) for line in text.splitlines()]
        assert max(len(line) for line in lines) <= width
        assert ("\x1b[" in text) is colour


def test_compare_without_plot_does_not_import_plotext(tmp_path: Path) -> None:
    path = _trace(tmp_path, 1)
    code = ("import sys\nfrom gpumem_tui.analysis import compare_cli\n"
            f"assert compare_cli.main([{str(path)!r}, '--pid', '500']) == 0\n"
            "print('plotext' in sys.modules)\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[-1] == "False"


def test_a_lone_zero_sample_still_gets_readable_axes() -> None:
    text = compare_plot([(5.0, 0)], "NVML used", PlotOptions(width=60, height=12, colour=False))
    assert "e-" not in text  # no 1e-10 ticks on a zero-length time axis
    assert "1.0┤" in text and "MiB" in text  # the bytes axis runs to 1 MiB


def test_an_estimate_without_phases_is_drawn_as_its_peak() -> None:
    est = dataclasses.replace(_gpt2(), phases=())
    text = estimate_plot(est, PlotOptions(width=60, height=14, colour=False))
    assert f"peak {format_size(est.peak_bytes)}" in text and est.peak_phase.replace("_", " ") in text
