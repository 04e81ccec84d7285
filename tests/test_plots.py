"""Terminal plots (plotext) printed by ``estimate --plot`` and ``compare --plot``: units, legend,
width, colour only on a terminal, bad flags, and plotext kept out of the other commands."""

from __future__ import annotations

import ast
import dataclasses
import io
import re
import subprocess
import sys
from pathlib import Path

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
from gpumem_tui.units import GiB, MiB

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
PACKAGE = Path(__file__).resolve().parents[1] / "gpumem_tui"
# a row of the canvas that is a horizontal line from frame to frame: the --fit budget
BUDGET_ROW = re.compile(r"[├┼]─{20,}┤")


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


def test_the_estimator_core_knows_no_plots() -> None:
    # DESIGN.md rule 1: estimator/ is pure; only its CLI module reaches the plots, lazily
    offenders = []
    for path in (PACKAGE / "estimator").rglob("*.py"):
        if path.name == "cli.py" and path.parent.name == "estimator":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{path.name}: {n}" for n in names if n.startswith(("plotext", "gpumem_tui.plots"))]
    assert offenders == []
