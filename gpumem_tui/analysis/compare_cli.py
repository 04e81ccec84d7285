"""``gpumem-tui compare trace.jsonl [--json] [--pid N] [--until S] [--limit SIZE] [--plot]``:
predicted vs measured memory of the probed job in a recorded trace.

The comparison is :func:`gpumem_tui.analysis.process_estimate.compare_trace` (what the dashboard's
comparison pane shows); a trace whose probed processes are the ranks of one torchrun /
accelerate job reports every rank, the worst rank and the imbalance
(:mod:`gpumem_tui.analysis.job_compare`); ``--pid`` compares one process. ``--plot`` prints a
plotext chart instead of the table. Exit codes: 0 ok, 1 a partial installation, 2 bad input
(one line on stderr: bad flags, empty or non-JSON trace, nothing to compare). Textual and torch
are never imported.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpumem_tui.support.cli_support import InputError, OneLineParser, number_arg, run_parsed
from gpumem_tui.plots.options import PlotOptions, add_plot_arguments, plot_options
from gpumem_tui.support.text import print_error, printable

_play_position = number_arg(float, strict=False, unit="seconds")


def main(argv: Sequence[str]) -> int:
    """``gpumem-tui compare ARGS``: returns the exit code (2 with one line on stderr for bad input)."""
    return run_parsed("compare", _parser(), argv, _compare)


def _parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="gpumem-tui compare")
    parser.description = "Predicted vs measured memory of the probed job in a trace."
    parser.add_argument("trace", type=Path)
    parser.add_argument("--json", action="store_true", help="print JSON (bytes as integers)")
    parser.add_argument("--pid", type=int, default=None, help="the probed process (if the trace has several; without it the ranks of one job "
                             "are compared together)")
    parser.add_argument("--until", type=_play_position, default=None, metavar="SECONDS",
                        help="only the records up to SECONDS after the first (what a replay at that "
                             "position shows in its comparison pane)")
    parser.add_argument("--limit", type=_limit_size, default=None, metavar="SIZE",
                        help="memory the job's measured peak may reach (e.g. 24GiB): the "
                             "time-to-OOM of a steady rise is counted against it")
    add_plot_arguments(parser, "print a chart instead of the table: the measured curve (torch allocated, or "
                       "the CPU's live tensors), the per-step peaks and the predicted peak of each phase")
    return parser


def _limit_size(text: str) -> int:
    """``--limit SIZE`` (``24GiB``, ``16GB``, ``512MiB``): bytes > 0."""
    from gpumem_tui.support.units import parse_bytes

    try:
        size = parse_bytes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if size <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
    return size


def _compare(args: argparse.Namespace) -> int:
    from gpumem_tui.analysis.job_compare import compare_trace_ranks
    from gpumem_tui.analysis.comparison import ComparisonError
    from gpumem_tui.telemetry.replay import TraceError

    try:
        plot = plot_options(args, sys.stdout)
    except InputError as exc:
        print_error("gpumem-tui compare", exc)
        return 2
    try:
        result = compare_trace_ranks(args.trace, pid=args.pid, until=args.until, limit_bytes=args.limit)
        if plot is not None and "job" in result:
            pids = ", ".join(str(r.get("pid")) for r in result["ranks"])
            raise ComparisonError(f"--plot draws one process; choose a rank with --pid (pids {pids})")
        chart = _chart(args, result, plot) if plot is not None else None
    except (TraceError, ComparisonError) as exc:  # a file name, a trace's text: shown literally
        print_error("gpumem-tui compare", exc)
        return 2
    except OSError as exc:
        print_error("gpumem-tui compare", f"cannot read {args.trace}: {exc.strerror or exc}")
        return 2
    except ValueError as exc:  # the chart: no sample of the process with a readable time
        print_error("gpumem-tui compare", f"nothing to plot: {exc}")
        return 2
    except ImportError as exc:  # a partial installation: say what is missing, no traceback
        missing = "--plot needs plotext" if exc.name == "plotext" else "the estimator is not available"
        print(f"gpumem-tui compare: {missing} ({exc})", file=sys.stderr)
        return 1
    if chart is not None:
        print(chart)
    elif args.json:
        print(json.dumps(result, indent=2))
    else:
        print(format_comparison(result))
    return 0


def _chart(args: argparse.Namespace, result: dict[str, Any], plot: PlotOptions) -> str:
    """``compare --plot``: the trace read a second time, as a stream (bounded memory), for the
    curve, the per-step peaks and the phase spans of the process compare chose.

    Raises:
        TraceError, OSError: as ``compare_trace`` (the file changed or went between the reads).
        ImportError: plotext is not installed.
    """
    from gpumem_tui.plots.compare_chart import compare_chart  # plotext: only for --plot
    from gpumem_tui.telemetry.trace_file import iter_snapshots, scan_trace

    return compare_chart(iter_snapshots(scan_trace(args.trace), args.until), result, plot)


def format_comparison(result: dict[str, Any]) -> str:
    """The comparison as a plain-text table (MiB, binary units; error signed, % of measured)."""
    from gpumem_tui.support.units import format_bytes

    def format_mib(n: Any) -> str:
        return format_bytes(n, "MiB")

    if "job" in result:
        return format_job(result)
    if result.get("no_prediction") is not None:
        return _format_measured_only(result)
    names = {name: printable(str(name), limit=60) for name in result.get("predicted", {})}
    width = max([len("component"), *(len(n) for n in names.values())])
    lines = [
        f"pid {result.get('pid')} on {result.get('device')}: measured figure {result.get('measured_figure')}",
        f"{'component':<{width}} {'predicted':>12} {'measured':>12} {'error %':>9}",
    ]
    measured = result.get("measured", {})
    errors = result.get("error_percent", {})
    for name, predicted in result.get("predicted", {}).items():
        value = measured.get(name)
        err = errors.get(name)
        lines.append(
            f"{names[name]:<{width}} {format_mib(predicted):>12} "
            f"{format_mib(value) if value is not None else 'n/a':>12} "
            f"{f'{err:+.1f}' if err is not None else 'n/a':>9}"
        )
    peak_m = result.get("peak_measured_bytes")
    peak_err = result.get("peak_error_percent")
    lines.append(
        f"{'peak':<{width}} {format_mib(result.get('peak_predicted_bytes')):>12} "
        f"{format_mib(peak_m) if peak_m is not None else 'n/a':>12} "
        f"{f'{peak_err:+.1f}' if peak_err is not None else 'n/a':>9}"
    )
    return "\n".join(lines + _steps_and_notes(result))


def format_job(result: dict[str, Any]) -> str:
    """A job's comparison (``compare`` of a trace of several ranks): one line per rank
    (predicted vs measured peak in the rank's probe figure, error signed in % of measured),
    the worst rank and the imbalance. Every figure is per rank; MiB are binary."""
    from gpumem_tui.support.units import format_bytes

    job = result["job"]
    world = job.get("world_size")
    lines = [f"job {printable(str(job.get('job_id')), 80)}: world size {world}, "
             f"{job.get('ranks_seen')} of {world} ranks in the trace (every figure is per rank)",
             f"{'rank':>4} {'pid':>8} {'predicted':>12} {'measured':>12} {'error %':>8}  figure"]
    for rank in result.get("ranks", []):
        predicted, measured = rank.get("peak_predicted_bytes"), rank.get("peak_measured_bytes")
        err = rank.get("peak_error_percent")
        if rank.get("probed"):
            figure = printable(str(rank.get("measured_figure")), 40)
            if rank.get("no_prediction") is not None:
                figure += f"; no prediction: {printable(str(rank['no_prediction']), 120)}"
        else:
            nvml = rank.get("nvml_peak_bytes")
            figure = "not probed" + (f" (NVML used peak {format_bytes(nvml, 'MiB')})" if nvml is not None else "")
        lines.append(f"{rank.get('rank'):>4} {rank.get('pid'):>8} "
                     f"{format_bytes(predicted, 'MiB') if predicted is not None else 'n/a':>12} "
                     f"{format_bytes(measured, 'MiB') if measured is not None else 'n/a':>12} "
                     f"{f'{err:+.1f}' if err is not None else 'n/a':>8}  {figure}")
    if job.get("worst_rank") is not None:
        lines.append(f"worst rank: {job['worst_rank']} (pid {job.get('worst_pid')}), "
                     f"peak error {job.get('worst_error_percent'):+.1f} %")
    if job.get("imbalance") is not None:
        lines.append(f"imbalance: {job['imbalance']:.2f}× (largest rank peak "
                     f"{format_bytes(job.get('largest_peak_bytes'), 'MiB')} / smallest "
                     f"{format_bytes(job.get('smallest_peak_bytes'), 'MiB')}, {job.get('peak_figure')})")
    for note in [*([job["notice"]] if job.get("notice") else []), *result.get("trace_notices", [])]:
        lines.append(f"note: {printable(str(note))}")
    return "\n".join(lines)


def _format_measured_only(result: dict[str, Any]) -> str:
    """A process without a prediction: what was measured, then why there is no prediction."""
    from gpumem_tui.support.units import format_bytes

    peak = result.get("peak_measured_bytes")
    lines = [
        f"pid {result.get('pid')} on {result.get('device')}: measured figure {result.get('measured_figure')}",
        f"measured peak {format_bytes(peak, 'MiB') if peak is not None else 'n/a'} "
        f"over {result.get('samples')} samples",
        f"no prediction: {printable(str(result.get('no_prediction')))}",
    ]
    return "\n".join(lines + _steps_and_notes(result))


def _steps_and_notes(result: dict[str, Any]) -> list[str]:
    """The per-step high-water marks' line, the time-to-OOM line and the notes."""
    from gpumem_tui.support.units import format_bytes

    lines = []
    steps = result.get("steps") or []
    if steps:
        top = max(steps, key=lambda st: st.get("peak_bytes", 0))
        phases = top.get("phase_peaks", {})
        phase = max(phases, key=phases.get) if phases else "?"
        lines.append(f"high-water marks of {len(steps)} steps: highest {format_bytes(top.get('peak_bytes'), 'MiB')} "
                     f"in step {top.get('step')} ({printable(str(phase), 20)})")
    if steps and result.get("forecast_text"):
        limit = result.get("limit_bytes")
        against = f" (limit {format_bytes(limit, 'MiB')})" if limit is not None else ""
        lines.append(f"time-to-OOM: {printable(str(result['forecast_text']))}{against}")
    for note in [*result.get("notes", []), *result.get("trace_notices", [])]:
        lines.append(f"note: {printable(str(note))}")
    return lines
