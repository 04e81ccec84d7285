"""``gpumem-tui [dashboard]``: parse options and open the dashboard.

Imports stay light at module level (argparse, config): Textual (~150 ms) is imported inside
:func:`run_dashboard`, the live telemetry source only when no source is given, the demo only
when NVML is unavailable; torch is never imported in this process (the demo job runs it in a
child process).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpumem_tui.support.cli_support import positive_seconds
from gpumem_tui.ui.config import Config, ConfigError, load_config
from gpumem_tui.support.crash import DashboardCrashed
from gpumem_tui.support.text import print_error


class _Parser(argparse.ArgumentParser):
    """argparse that reports bad input as one line (exit 2) instead of usage + message."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise _BadInput(message)


class _BadInput(Exception):
    pass


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="gpumem-tui", description="Terminal dashboard for GPU memory.")
    parser.add_argument("--interval", type=positive_seconds, default=None, metavar="SECONDS",
                        help="seconds between polls (default 1.0, or the config file's)")
    parser.add_argument("--theme", default=None, metavar="NAME", help="theme name (dark, light, or a Textual theme)")
    parser.add_argument("--no-demo", action="store_true",
                        help="without NVML, do not start the built-in demo training job")
    parser.add_argument("--readonly", action="store_true", help="no keys that send signals")
    parser.add_argument("--config", type=Path, default=None, metavar="PATH", help="config file (TOML)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point for the dashboard subcommand; returns the exit code."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(args_list)
    except _BadInput as exc:
        print_error("gpumem-tui", exc)
        return 2
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print_error("gpumem-tui", exc)
        return 2
    from gpumem_tui.ui.themes import known_theme_names, load_themes

    themes = load_themes()
    theme = args.theme or config.theme
    names = known_theme_names(themes)
    if theme not in names:
        if args.theme is None:
            # from the config file: not fatal, fall back with a notice
            config = _with_notice(config, f"{config.path}: unknown theme {theme!r}; using the default")
            theme = "dark"
        else:
            print(f"gpumem-tui: unknown theme {theme!r}; available: {', '.join(names)}", file=sys.stderr)
            return 2
    return run_dashboard_command(
        "gpumem-tui",
        interval=args.interval or config.interval,
        theme=theme,
        readonly=args.readonly or config.readonly,
        demo=not args.no_demo,
        config=config,
        themes=themes,
    )


def run_dashboard_command(prog: str, **kwargs: Any) -> int:
    """:func:`run_dashboard` (``kwargs`` as there) for a subcommand, as its exit code: 0 when the
    user quits or presses Ctrl-C; 1 when the dashboard crashed, after ``PROG: <one line>`` (the
    error and where its traceback was written) on stderr."""
    try:
        run_dashboard(**kwargs)
    except KeyboardInterrupt:
        return 0
    except DashboardCrashed as exc:
        print_error(prog, exc)
        return 1
    return 0


def _with_notice(config: Config, notice: str) -> Config:
    from dataclasses import replace

    return replace(config, notices=(*config.notices, notice))


def _live_source(demo: bool, demo_job: Any, select_pid: int | None,
                 banner: str | None) -> tuple[Any, Any, int | None, str | None]:
    """A LiveSource (NVML + psutil + probes), and ``(source, demo_job, select_pid, banner)``:
    with ``demo``, no ``demo_job`` given and no NVML, the built-in demo job is started (a
    child process; the source reads its probe folder) and becomes the one selected."""
    from gpumem_tui.telemetry.live import LiveSource

    source = LiveSource()
    if demo and demo_job is None and not getattr(source, "nvml_available", True):
        from gpumem_tui.demo.process import start_demo_job  # a child process; torch loads there

        demo_job = start_demo_job()
        select_pid = demo_job.pid
        banner = banner or f"built-in demo: CPU training job PID {demo_job.pid} (no GPU here)"
        probe_dir = getattr(demo_job, "probe_dir", None)
        if probe_dir is not None:
            source.close()
            source = LiveSource(probe_dir)
    return source, demo_job, select_pid, banner


def run_dashboard(
    source: Any = None,
    *,
    interval: float = 1.0,
    theme: str | None = None,
    select_pid: int | None = None,
    demo_job: Any = None,
    readonly: bool = False,
    demo: bool = False,
    config: Config | None = None,
    themes: Any = None,
    banner: str | None = None,
) -> None:
    """Open the dashboard on ``source`` and block until the user quits.

    Args:
        source: a TelemetrySource; None means LiveSource() (NVML + psutil + probes).
        interval: seconds between polls (> 0).
        theme: theme name (None: the default); one that cannot be loaded falls back with a
            notification.
        select_pid: process to select once it appears.
        demo_job: a running demo job (``.pid``, ``.stop()``) that is stopped on exit.
        readonly: remove the signal keys.
        demo: with ``source=None`` and no NVML, start the built-in demo job and select it.
        config: settings from the config file (chart window, keymap, notices).
        themes: a preloaded ``ThemeSet`` (else the theme folders are read).
        banner: extra text for the status line.

    Raises:
        ValueError: ``interval`` <= 0.
        DashboardCrashed: an unexpected error ended the dashboard; the message is one line
            that says where its traceback was written.
    """
    if not interval > 0:
        raise ValueError("interval must be > 0 seconds")
    config = config or Config()
    from gpumem_tui.ui.app import GpuMemApp
    from gpumem_tui.ui.themes import load_themes

    app = None
    if source is None:
        source, demo_job, select_pid, banner = _live_source(demo, demo_job, select_pid, banner)
    try:
        app = GpuMemApp(
            source,
            interval=interval,
            theme=theme or "dark",
            themes=themes if themes is not None else load_themes(),
            readonly=readonly,
            select_pid=select_pid,
            notices=config.notices,
            chart_window=config.chart_window,
            screenshot_dir=config.screenshot_dir,
            keymap=config.keymap,
            banner=banner,
            alerts=config.alerts,
        )
        app.freeze_gc_after_start = True  # one app per process: see GpuMemApp
        app.run()
        if app.crash_line:
            raise DashboardCrashed(app.crash_line)
    finally:
        try:
            # a poll still running (a hung NVML call) closes the source when it returns
            app.poller.close_source() if app is not None else source.close()
        finally:
            if demo_job is not None:
                demo_job.stop()


if __name__ == "__main__":
    raise SystemExit(main())
