"""``gpumem-tui replay trace.jsonl [--speed X] [--interval S] [--theme NAME]``: the dashboard on a
recorded trace, read-only (pause, seek and speed keys).

Exit codes: 0 ok, 1 the dashboard crashed (one line; the traceback goes to the crash log), 2 bad
input: an unknown theme, an unreadable or empty trace (one line on stderr, no window).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from gpumem_tui.support.cli_support import OneLineParser, number_arg, positive_seconds, run_parsed
from gpumem_tui.support.text import print_error

_speed_factor = number_arg(float)


def main(argv: Sequence[str]) -> int:
    """``gpumem-tui replay ARGS``: returns the exit code (2 with one line on stderr for bad input)."""
    return run_parsed("replay", _parser(), argv, _replay)


def _parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="gpumem-tui replay")
    parser.description = "Open the dashboard on a recorded trace (pause, seek, speed keys)."
    parser.add_argument("trace", type=Path)
    parser.add_argument("--speed", type=_speed_factor, default=1.0, help="playback speed factor [1.0]")
    parser.add_argument("--interval", type=positive_seconds, default=0.5, metavar="SECONDS",
                        help="seconds between screen updates [0.5]")
    parser.add_argument("--theme", default="dark", metavar="NAME")
    return parser


def _replay(args: argparse.Namespace) -> int:
    from gpumem_tui.telemetry.replay import ReplaySource, TraceError
    from gpumem_tui.ui.themes import known_theme_names, load_themes

    themes = load_themes()
    names = known_theme_names(themes)
    if args.theme not in names:  # as the dashboard does: one line, exit 2, no window
        print(f"gpumem-tui replay: unknown theme {args.theme!r}; available: {', '.join(names)}", file=sys.stderr)
        return 2
    try:
        source = ReplaySource(args.trace, speed=args.speed)
    except TraceError as exc:  # it names the file: shown literally (a file name is anyone's text)
        print_error("gpumem-tui replay", exc)
        return 2
    except OSError as exc:
        print_error("gpumem-tui replay", f"cannot read {args.trace}: {exc.strerror or exc}")
        return 2
    from gpumem_tui.ui.launch import run_dashboard_command

    return run_dashboard_command(
        "gpumem-tui replay",
        source=source,
        interval=args.interval,
        theme=args.theme,
        themes=themes,
        readonly=True,  # a replayed PID is not a process to signal
        # the replay line shows the position, length and current speed (which keys change)
        banner=f"replay of {args.trace.name}",
    )
