"""Command line entry point: ``gpumem-tui [SUBCOMMAND] ...``.

Each subcommand lives in its own module and is imported only when it runs, so that
``gpumem-tui estimate`` never pays for Textual (~150 ms) and nothing here imports torch
(~1.5 s); only ``measure`` and ``demo``'s child job load it. With no subcommand (or one that
starts with ``-``) the dashboard opens.

Every subcommand module exposes ``main(argv: list[str]) -> int`` and returns the exit code:
0 success, 1 a runtime failure (e.g. no NVML for ``snapshot``), 2 bad input.
"""

from __future__ import annotations

import importlib
import sys

# subcommand -> (module, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "dashboard": ("gpumem_tui.ui.launch", "open the dashboard (the default)"),
    "snapshot": ("gpumem_tui.telemetry.snapshot_cli", "print one sample (--json) and exit"),
    "estimate": ("gpumem_tui.estimator.cli", "predict peak memory of a training or inference job"),
    "measure": ("gpumem_tui.measure.cli", "measure peak memory with torch (torch extra)"),
    "demo": ("gpumem_tui.demo.cli", "run the built-in CPU/GPU training job and watch it"),
    "record": ("gpumem_tui.telemetry.record_cli", "record samples and phase marks to a JSONL trace"),
    "replay": ("gpumem_tui.ui.replay_cli", "open the dashboard on a recorded trace"),
    "compare": ("gpumem_tui.analysis.compare_cli", "predicted vs measured for a recorded trace"),
    "exporter": ("gpumem_tui.remote.exporter", "serve GPU, process and probe memory as Prometheus metrics"),
    "fleet": ("gpumem_tui.remote.fleet_cli", "GPU memory of many hosts, read from Prometheus"),
    "serve": ("gpumem_tui.remote.serve", "the dashboard in a web browser (textual-serve)"),
}


def _usage() -> str:
    lines = ["usage: gpumem-tui [SUBCOMMAND] [OPTIONS]", "", "subcommands:"]
    lines += [f"  {name:<10} {help_}" for name, (_, help_) in SUBCOMMANDS.items()]
    lines += ["", "Run 'gpumem-tui SUBCOMMAND --help' for its options."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Dispatch to a subcommand's ``main``; return its exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in ("-h", "--help") and len(args) == 1:
        print(_usage())
        return 0
    if args and args[0] in ("-V", "--version"):
        from gpumem_tui import __version__

        print(f"gpumem-tui {__version__}")
        return 0
    if args and not args[0].startswith("-"):
        name = args.pop(0)
        if name not in SUBCOMMANDS:
            # one line (bad input is one line, exit 2); --help has the list with what each does
            print(f"gpumem-tui: unknown subcommand {name!r} (choose from {', '.join(SUBCOMMANDS)}; "
                  "see gpumem-tui --help)", file=sys.stderr)
            return 2
    else:
        name = "dashboard"
    module = importlib.import_module(SUBCOMMANDS[name][0])
    return int(module.main(args))


def run() -> None:
    """The program (``python -m gpumem_tui``, the ``gpumem-tui`` script): :func:`main`, then exit
    with its code, the heap left to the OS (:mod:`gpumem_tui.support.shutdown`: ~1.2 s of CPU
    at the exit of a ``measure`` that loaded torch and transformers). Raises SystemExit."""
    code = main()
    from gpumem_tui.support.shutdown import leave_heap_to_os

    leave_heap_to_os()
    raise SystemExit(code)


if __name__ == "__main__":
    run()
