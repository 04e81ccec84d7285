"""The process table's rows for a job of several ranks (gpumem_tui.analysis.jobs).

A job is one group row (``▸`` collapsed, ``▾`` expanded) whose COMMAND cell sums it up:
job id, world size, ranks seen, the largest rank peak with the figure it is in, the
imbalance (largest / smallest rank peak) and the worst-predicted rank. Expanded, each rank
is its process's usual row with a ``rank N`` label before the command: predicted vs
measured peak in the probe's figure (torch allocated, or CPU live tensors), or the NVML used
peak of a rank without the probe. Every figure is per rank; none is summed over the job.

Text from the job (its id comes from another process) is shown literally (``printable``,
``rich.text.Text``, never markup).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.text import Text

if TYPE_CHECKING:  # annotations only: the jobs come from the poll (JobTracker, loaded on use)
    from gpumem_tui.analysis.jobs import Job, RankPeak
from gpumem_tui.analysis.memory_figures import FIGURE_NVML_USED
from gpumem_tui.telemetry.model import ProcessSample
from gpumem_tui.support.text import printable
from gpumem_tui.support.units import format_bytes

#: Row keys of group rows start so; a process row's key (``pid:gpu``) never does.
GROUP_PREFIX = "job:"
COLLAPSED, EXPANDED = "▸", "▾"


@dataclass(frozen=True, slots=True)
class JobRow:
    """A job's group row: the job, its processes listed now (``members``, in rank order)
    and whether its rank rows are shown."""

    job: Job
    members: tuple[ProcessSample, ...]
    expanded: bool

    @property
    def key(self) -> str:
        """The row key: :data:`GROUP_PREFIX` + the job id."""
        return group_key(self.job.job_id)


def group_key(job_id: str) -> str:
    """The row key of job ``job_id``'s group row."""
    return GROUP_PREFIX + job_id


def _size(n: int | None) -> str:
    return "n/a" if n is None else format_bytes(n)


def job_summary(job: Job) -> str:
    """One line about the job, most telling first (the cell is cut at the screen's edge, at
    80 columns after some 30 characters): ``imbalance 1.08× · 3/4 ranks · job 10.0.0.7:29500 ·
    max rank peak 7.3 GiB (NVML used) · worst rank 2 +12.0 %``, where ``3/4`` is ranks seen /
    world size; a job with a notice starts with ``⚠`` and ends with the notice."""
    parts = [] if job.imbalance is None else [f"imbalance {job.imbalance:.2f}×"]
    parts += [f"{job.ranks_seen}/{job.world_size} ranks", f"job {printable(job.job_id, 48)}"]
    if job.largest_peak_bytes is not None:
        parts.append(f"max rank peak {_size(job.largest_peak_bytes)} ({job.peak_figure})")
    worst = job.worst
    if worst is not None and worst.peak_error_percent is not None:
        parts.append(f"worst rank {worst.rank} {worst.peak_error_percent:+.1f} %")
    text = " · ".join(parts)
    return text if job.notice is None else f"⚠ {text} · {job.notice}"


def rank_label(rank: RankPeak) -> str:
    """``rank N`` and its peak, the error first (a narrow cell is cut at its end): ``rank 0 ·
    +6.0 % · pred X / meas Y (figure)`` for a probed rank (both in the probe's figure), else
    its NVML used peak."""
    head = f"rank {rank.rank}"
    if rank.predicted_peak_bytes is not None and rank.probe_peak_bytes is not None:
        error = "" if rank.peak_error_percent is None else f"{rank.peak_error_percent:+.1f} % · "
        return (f"{head} · {error}pred {_size(rank.predicted_peak_bytes)} / meas {_size(rank.probe_peak_bytes)} "
                f"({rank.probe_figure})")
    if rank.probe_peak_bytes is not None:
        return f"{head} · no prediction · meas {_size(rank.probe_peak_bytes)} ({rank.probe_figure})"
    if rank.nvml_peak_bytes is not None:
        return f"{head} · not probed · peak {_size(rank.nvml_peak_bytes)} ({FIGURE_NVML_USED})"
    return f"{head} · not probed"


def group_cells(row: JobRow, columns: tuple[str, ...]) -> list[Text]:
    """The group row's cells for the visible ``columns`` (keys of the process table's COLUMNS):
    the GPUs its ranks are on, its user(s), type ``job``, the summary in COMMAND; the
    per-process figures stay blank (a job's memory is per rank, in the summary)."""
    members = row.members
    gpus = sorted({p.device_index for p in members if p.device_index is not None})
    users = sorted({p.user for p in members if p.user})
    marker = EXPANDED if row.expanded else COLLAPSED
    cells: list[Text] = []
    for key in columns:
        if key == "gpu":
            cells.append(Text(printable(",".join(map(str, gpus)), 12) if gpus else "-", justify="right"))
        elif key == "user":
            cells.append(Text(printable(users[0], 32) if len(users) == 1 else ("*" if users else "")))
        elif key == "type":
            cells.append(Text("job"))
        elif key == "command":
            cells.append(Text(f"{marker} ", style="bold") + Text(job_summary(row.job), style="bold"))
        else:
            cells.append(Text(""))
    return cells
