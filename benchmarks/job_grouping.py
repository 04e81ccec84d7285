"""What grouping the processes of a launch into jobs costs the dashboard at every poll
(issue 21: one job, many ranks). Target: no more than a few ms at 64 000 processes without a
job, so a busy box pays little for a feature it does not use.

    PYTHONPATH=$PWD python benchmarks/job_grouping.py [--processes 64000] [--ranks 8]

Prints the time of :meth:`gpumem_tui.analysis.jobs.JobTracker.jobs` (what
``GpuMemApp.apply_snapshot`` calls each poll) for ``--processes`` NVML rows, with no launch
among them, then with one job of ``--ranks`` ranks (identity from their environment, no probe).
"""

from __future__ import annotations

import argparse
import timeit

from gpumem_tui.analysis.jobs import JobTracker
from gpumem_tui.telemetry.probed_state import ProbedProcesses
from gpumem_tui.analysis.process_estimate import compare_summary
from gpumem_tui.telemetry.launch import RankLaunch
from gpumem_tui.telemetry.model import ProcessSample, ProcessType


def per_poll_ms(processes: tuple[ProcessSample, ...], polls: int = 50) -> float:
    """Mean milliseconds of one JobTracker.jobs call over ``processes``."""
    tracker, state = JobTracker(), ProbedProcesses()
    return timeit.timeit(lambda: tracker.jobs(processes, state, lambda pid: None, compare_summary),
                         number=polls) / polls * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=64000)
    parser.add_argument("--ranks", type=int, default=8)
    args = parser.parse_args()
    rows = tuple(ProcessSample(pid, pid % 8, ProcessType.COMPUTE, 1 << 20) for pid in range(1, args.processes + 1))
    print(f"{args.processes} processes, no job:        {per_poll_ms(rows):6.2f} ms per poll")
    ranks = tuple(ProcessSample(10_000_000 + r, r % 8, ProcessType.COMPUTE, 1 << 30,
                                launch=RankLaunch("10.0.0.7:29500", r, args.ranks, r % 8)) for r in range(args.ranks))
    mixed = rows[: args.processes - args.ranks] + ranks
    print(f"{args.processes} processes, one {args.ranks}-rank job: {per_poll_ms(mixed):6.2f} ms per poll")


if __name__ == "__main__":
    main()
