"""What every subcommand's argument parsing shares: one-line errors and checked numbers.

argparse prints the usage block and exits on bad input; the project's rule is one line on
stderr and exit code 2, so parsers here raise :class:`InputError` and each ``main`` turns it
into that line.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence

from gpumem_tui.support.text import print_error


class InputError(ValueError):
    """Bad command-line input: the caller prints ``str(error)`` as one line and exits 2."""


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors raise :class:`InputError` instead of printing usage."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise InputError(message)


def run_parsed(name: str, parser: argparse.ArgumentParser, argv: Sequence[str],
               run: Callable[[argparse.Namespace], int]) -> int:
    """Parse ``argv`` with ``parser`` (a :class:`OneLineParser`) and return ``run(args)``; bad
    input prints ``gpumem-tui NAME: <why>`` as one line on stderr and returns 2."""
    try:
        args = parser.parse_args(list(argv))
    except InputError as exc:
        print_error(f"gpumem-tui {name}", exc)
        return 2
    return run(args)


def number_arg(
    convert: type[int] | type[float], *, minimum: float = 0, strict: bool = True, unit: str = ""
) -> Callable[[str], int | float]:
    """An argparse ``type=`` that accepts finite numbers above ``minimum``.

    ``strict`` means "> minimum", otherwise ">= minimum". Errors read e.g.
    "must be > 0 seconds, got '0'", "must be a number of seconds, got 'abc'" or
    "must be a finite number of seconds, got 'inf'".
    """
    kind = "a whole number" if convert is int else "a number"
    of_unit = f" of {unit}" if unit else ""
    unit_suffix = f" {unit}" if unit else ""
    relation = ">" if strict else ">="

    def parse(text: str) -> int | float:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {kind}{of_unit}, got {text!r}") from None
        if not math.isfinite(value):  # inf, nan: a number, but not a usable one
            raise argparse.ArgumentTypeError(f"must be a finite number{of_unit}, got {text!r}")
        too_small = value <= minimum if strict else value < minimum
        if too_small:
            raise argparse.ArgumentTypeError(f"must be {relation} {minimum:g}{unit_suffix}, got {text!r}")
        return value

    return parse


positive_seconds = number_arg(float, unit="seconds")
non_negative_seconds = number_arg(float, strict=False, unit="seconds")
positive_int = number_arg(int)
non_negative_int = number_arg(int, strict=False)
