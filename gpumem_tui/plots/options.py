"""The ``--plot``, ``--width`` and ``--height`` flags and the size and colour they resolve to.

Imports no plotting library, so a subcommand can add the flags without paying for plotext.
The width is the terminal's (``shutil.get_terminal_size``: the ``COLUMNS`` variable, else the
terminal of stdout, else 80 columns) unless ``--width`` says otherwise; colour is used only
when stdout is a terminal and neither ``NO_COLOR`` (https://no-color.org) nor ``TERM=dumb``
asks for none, so a CI log or a Slurm output file gets plain text.
"""

from __future__ import annotations

import argparse
import os
import shutil
from dataclasses import dataclass
from typing import TextIO

from gpumem_tui.support.cli_support import InputError

MIN_WIDTH, MAX_WIDTH = 40, 1000
MIN_HEIGHT, MAX_HEIGHT = 10, 300
DEFAULT_HEIGHT_CAP = 30  # a taller chart adds rows, not information, in a log


def _bounded_int(low: int, high: int, unit: str):  # type: ignore[no-untyped-def]
    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number of {unit}, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be between {low} and {high} {unit}, got {text!r}")
        return value

    return parse


def add_plot_arguments(parser: argparse.ArgumentParser, what: str) -> None:
    """Add ``--plot`` (help text ``what``), ``--width N`` and ``--height N`` to ``parser``.

    A width or height outside its range, or not a whole number, is an argparse error, which
    the project's :class:`~gpumem_tui.support.cli_support.OneLineParser` turns into one line, exit 2.
    """
    parser.add_argument("--plot", action="store_true", help=what + " (plotext; plain text without colour when "
                        "stdout is not a terminal; not with --json)")
    parser.add_argument("--width", type=_bounded_int(MIN_WIDTH, MAX_WIDTH, "columns"), default=None,
                        help=f"--plot width in columns (default: the terminal's, 80 when there is none; "
                        f"{MIN_WIDTH}-{MAX_WIDTH})")
    parser.add_argument("--height", type=_bounded_int(MIN_HEIGHT, MAX_HEIGHT, "rows"), default=None,
                        help=f"--plot chart height in rows, legend lines not counted (default: fits the terminal, "
                        f"at most {DEFAULT_HEIGHT_CAP}; {MIN_HEIGHT}-{MAX_HEIGHT})")


@dataclass(frozen=True)
class PlotOptions:
    """How a plot is printed: ``width`` columns (every line at most that long), a chart of
    ``height`` rows, ANSI colour only when ``colour``."""

    width: int
    height: int
    colour: bool


def wants_colour(stream: TextIO) -> bool:
    """Colour only on a terminal, and not when ``NO_COLOR`` is set or ``TERM`` is ``dumb``."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (OSError, ValueError):  # a closed or detached stream
        return False


def plot_options(args: argparse.Namespace, stream: TextIO) -> PlotOptions | None:
    """The options for ``--plot`` (None without it), read from parsed ``args``.

    Raises:
        InputError: ``--plot`` with ``--json`` (one prints a chart, the other data for a
            program: choose one), or ``--width`` / ``--height`` without ``--plot``.
    """
    if not args.plot:
        if args.width is not None or args.height is not None:
            raise InputError("--width and --height size the --plot chart; add --plot")
        return None
    if getattr(args, "json", False):
        raise InputError("--plot prints a chart and --json prints data: give one of them")
    columns, lines = shutil.get_terminal_size((80, 24))
    width = args.width if args.width is not None else min(max(columns, MIN_WIDTH), MAX_WIDTH)
    height = args.height if args.height is not None else min(max(lines - 6, MIN_HEIGHT), DEFAULT_HEIGHT_CAP)
    return PlotOptions(width=width, height=height, colour=wants_colour(stream))
