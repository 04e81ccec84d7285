"""One job, many ranks: the processes of one torchrun / accelerate launch as one value.

DESIGN.md rule 4: "a job of several ranks is one value holding its ranks' values". A
:class:`Job` holds one :class:`RankPeak` per process of the launch, and the figures the
dashboard's group row and ``gpumem-tui compare`` show: the largest and smallest rank peak,
the imbalance (largest / smallest) and the worst rank (largest predicted-vs-measured error).

Every figure is PER RANK (one process), never summed over the job, and each says which
memory figure it is; two figures are never mixed in one comparison:

- ``nvml_peak_bytes``: the highest NVML *used* memory seen for the process (what
  nvidia-smi shows: CUDA context and allocator reserve included);
- ``probe_peak_bytes``: the probe's own figure, ``probe_figure``: torch *allocated*
  (``torch.cuda.max_memory_allocated`` and the per-step high-water marks) on CUDA, the
  tracker's live tensor bytes on the CPU -- the figure the prediction is compared with
  (:mod:`gpumem_tui.analysis.comparison`). torch *reserved* is not used here.

The imbalance uses NVML used when every rank seen has it, else the probe's figure when every
rank has that one (the same figure on all), else there is none (and a notice says why).

Which process is which rank: the probe's ProbeInfo setup (``job_id``, ``rank``,
``world_size``, ``local_rank``), else the launcher's environment variables the host layer
read (:mod:`gpumem_tui.telemetry.launch`). Both are untrusted: a job whose ranks disagree on
the world size, claim the same rank, or have a rank >= the world size is still shown, with
one line in :attr:`Job.notice`.

Headless: imports neither Textual nor torch.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from gpumem_tui.analysis.memory_figures import FIGURE_ALLOCATED, FIGURE_CPU_LIVE, FIGURE_NVML_USED
from gpumem_tui.telemetry.probed_state import ProbedProcesses, ProbedSummary
from gpumem_tui.telemetry.launch import NO_RUN_ID, RankLaunch, launch_from_setup
from gpumem_tui.telemetry.model import ProbeInfo, ProcessSample
from gpumem_tui.support.text import printable

__all__ = ["Job", "JobTracker", "RankPeak", "build_jobs", "merge_identities", "probe_peaks", "rank_identities"]

#: Most problems named in a job's one-line notice (the rest are counted).
_MAX_PROBLEMS = 3


@dataclass(frozen=True, slots=True)
class RankPeak:
    """One rank of a job (one process), all figures per rank, bytes.

    ``nvml_peak_bytes`` is NVML used (highest seen); ``probe_peak_bytes`` and
    ``predicted_peak_bytes`` are in ``probe_figure`` (torch allocated, or CPU live tensors),
    ``peak_error_percent`` = (predicted - measured) / measured x 100 in that figure
    (:func:`gpumem_tui.analysis.comparison.percent_error`). None: not measured / not probed / no
    prediction. ``device_index`` is the GPU NVML lists it on (None: a host process).
    """

    pid: int
    launch: RankLaunch
    device_index: int | None = None
    nvml_peak_bytes: int | None = None
    probe_peak_bytes: int | None = None
    probe_figure: str | None = None
    predicted_peak_bytes: int | None = None
    peak_error_percent: float | None = None

    @property
    def rank(self) -> int:
        """The global rank (untrusted: may be >= the world size)."""
        return self.launch.rank

    @property
    def probed(self) -> bool:
        """True when the probe measured this rank (its figures exist)."""
        return self.probe_peak_bytes is not None


@dataclass(frozen=True, slots=True)
class Job:
    """The ranks of one launch seen here, and what compares them (see the module doc).

    ``world_size``: the one the ranks publish (the most common one when they disagree);
    ``ranks``: ordered by rank then PID; ``peak_figure``: the figure ``largest_peak_bytes``,
    ``smallest_peak_bytes`` and ``imbalance`` are in (None: no figure on every rank);
    ``imbalance`` = largest / smallest rank peak (None: fewer than two ranks, or a rank at 0);
    ``worst``: the rank with the largest |peak_error_percent| (None: no rank compared);
    ``notice``: one line naming what is wrong with the ranks' claims, else None.
    """

    job_id: str
    world_size: int
    ranks: tuple[RankPeak, ...]
    peak_figure: str | None = None
    largest_peak_bytes: int | None = None
    smallest_peak_bytes: int | None = None
    imbalance: float | None = None
    worst: RankPeak | None = None
    notice: str | None = None

    @property
    def ranks_seen(self) -> int:
        """How many distinct rank numbers are here (duplicates counted once)."""
        return len({r.rank for r in self.ranks})

    def peak_of(self, rank: RankPeak) -> int | None:
        """``rank``'s peak in :attr:`peak_figure` (None when there is no such figure)."""
        if self.peak_figure == FIGURE_NVML_USED:
            return rank.nvml_peak_bytes
        return rank.probe_peak_bytes if self.peak_figure is not None else None

    def to_json(self) -> dict[str, object]:
        """The job's summary as JSON: ``job_id`` (the literal text), ``world_size``,
        ``ranks_seen``, ``peak_figure``, ``largest_peak_bytes``, ``smallest_peak_bytes``,
        ``imbalance`` (a ratio, 3 decimals), ``worst_rank`` / ``worst_pid`` /
        ``worst_error_percent``, ``notice``."""
        worst = self.worst
        return {
            "job_id": self.job_id, "world_size": self.world_size, "ranks_seen": self.ranks_seen,
            "peak_figure": self.peak_figure, "largest_peak_bytes": self.largest_peak_bytes,
            "smallest_peak_bytes": self.smallest_peak_bytes,
            "imbalance": None if self.imbalance is None else round(self.imbalance, 3),
            "worst_rank": None if worst is None else worst.rank, "worst_pid": None if worst is None else worst.pid,
            # rounded as ComparisonResult.to_json rounds the rank's own peak_error_percent
            "worst_error_percent": None if worst is None or worst.peak_error_percent is None
            else round(worst.peak_error_percent, 3),
            "notice": self.notice,
        }  # fmt: skip


def rank_identities(processes: Iterable[ProcessSample], infos: Mapping[int, ProbeInfo]) -> dict[int, RankLaunch]:
    """PID -> its launch identity: the probe's published setup first (the probe read its own
    rank inside the process), else what the host layer read from its environment.

    A probe that published torchrun's default run id ``"none"`` (``launch.NO_RUN_ID``, shared
    by unrelated jobs) keeps its rank but takes the job id the environment gives, when the
    host layer could read it, so that it joins its unprobed ranks and no other job.
    """
    return merge_identities({p.pid: p.launch for p in processes if p.launch is not None}, infos)


def merge_identities(env: Mapping[int, RankLaunch], infos: Mapping[int, ProbeInfo]) -> dict[int, RankLaunch]:
    """:func:`rank_identities` from PID -> the launch its environment gave (``env``)."""
    out: dict[int, RankLaunch] = {}
    for pid, info in infos.items():
        launch = launch_from_setup(info.setup)
        if launch is not None:
            if launch.job_id == NO_RUN_ID and pid in env:
                launch = replace(launch, job_id=env[pid].job_id)
            out[pid] = launch
    for pid, launch in env.items():
        out.setdefault(pid, launch)
    return out


def _peak_figure(ranks: tuple[RankPeak, ...]) -> str | None:
    """NVML used if every rank has it, else the probe's figure if every rank has the same."""
    if all(r.nvml_peak_bytes is not None for r in ranks):
        return FIGURE_NVML_USED
    figures = {r.probe_figure for r in ranks}
    if len(figures) == 1 and all(r.probe_peak_bytes is not None for r in ranks):
        return figures.pop()
    return None


def _problems(job_id: str, world: Counter[int], ranks: tuple[RankPeak, ...]) -> list[str]:
    """What is wrong with the ranks' claims (untrusted data), one short phrase each."""
    problems = []
    if len(world) > 1:
        sizes = ", ".join(str(n) for n in sorted(world))
        problems.append(f"ranks disagree on the world size ({sizes})")
    claimed: dict[int, list[int]] = {}
    for r in ranks:
        claimed.setdefault(r.rank, []).append(r.pid)
    for rank, pids in claimed.items():
        if len(pids) > 1:
            problems.append(f"rank {rank} claimed by pids {', '.join(map(str, sorted(pids)))}")
    for r in ranks:
        if r.rank >= r.launch.world_size:
            problems.append(f"rank {r.rank} >= world size {r.launch.world_size} (pid {r.pid})")
    return problems


def _build_job(job_id: str, members: list[RankPeak]) -> Job:
    ranks = tuple(sorted(members, key=lambda r: (r.rank, r.pid)))
    world = Counter(r.launch.world_size for r in ranks)
    world_size = max(world, key=lambda n: (world[n], n))
    problems = _problems(job_id, world, ranks)
    notice = None
    if problems:
        more = len(problems) - _MAX_PROBLEMS
        text = "; ".join(problems[:_MAX_PROBLEMS]) + (f"; {more} more" if more > 0 else "")
        notice = f"job {printable(job_id, 40)}: {text}"
    figure = _peak_figure(ranks)
    job = Job(job_id, world_size, ranks, figure, notice=notice)
    peaks = [p for p in (job.peak_of(r) for r in ranks) if p is not None]
    largest = max(peaks) if peaks else None
    smallest = min(peaks) if peaks else None
    imbalance = largest / smallest if len(peaks) > 1 and smallest else None
    compared = [r for r in ranks if r.peak_error_percent is not None]
    worst = max(compared, key=lambda r: (abs(r.peak_error_percent or 0.0), -r.rank)) if compared else None
    return Job(job_id, world_size, ranks, figure, largest, smallest, imbalance, worst, notice)


def build_jobs(ranks: Iterable[RankPeak]) -> list[Job]:
    """Group ``ranks`` by job id into :class:`Job` values, ordered by job id.

    A launch counts as a job when it has two or more processes here or publishes a world
    size of two or more; a lone process of a world of one stays an ordinary process.
    Never raises for bad claims (see :attr:`Job.notice`).
    """
    by_job: dict[str, list[RankPeak]] = {}
    for rank in ranks:
        by_job.setdefault(rank.launch.job_id, []).append(rank)
    jobs = []
    for job_id in sorted(by_job):
        members = by_job[job_id]
        if len(members) > 1 or members[0].launch.world_size > 1:
            jobs.append(_build_job(job_id, members))
    return jobs


@dataclass(frozen=True, slots=True)
class _ProbeFigures:
    peak: int | None
    figure: str | None
    predicted: int | None
    error: float | None


def probe_peaks(summary: ProbedSummary, estimate: object | None,
                compare: Callable[[object, ProbedSummary], object]) -> _ProbeFigures:
    """A probed rank's measured peak in the probe's figure, and its prediction.

    ``estimate`` is its :class:`~gpumem_tui.analysis.process_estimate.ProcessEstimate` (or None);
    ``compare`` is :func:`~gpumem_tui.analysis.process_estimate.compare_summary`, whose headline peak
    (``ComparisonResult.headline``) gives predicted, measured and error -- the same figures
    ``compare`` prints for the process alone. Without a prediction, the measured peak is
    the samples' and high-water marks' highest, as :func:`~gpumem_tui.analysis.process_estimate.measured_only`.
    """
    record = summary.record
    if not record.sample_count:
        return _ProbeFigures(None, None, None, None)
    if estimate is not None and getattr(estimate, "estimate", None) is not None:
        from gpumem_tui.analysis.comparison import ComparisonError  # with the estimate: off the start-up path

        try:
            result = compare(estimate, summary)
        except ComparisonError:
            result = None
        if result is not None:
            head = result.headline  # type: ignore[attr-defined]
            return _ProbeFigures(head.measured_bytes, result.measured_figure,  # type: ignore[attr-defined]
                                 head.predicted_bytes, head.error_percent)
    kinds = record.device_kinds
    device = kinds[0] if len(kinds) == 1 else (record.device or "")
    figure = FIGURE_ALLOCATED if device.startswith("cuda") else FIGURE_CPU_LIVE
    return _ProbeFigures(max(record.peak_allocated or 0, record.highest_step or 0), figure, None, None)


class JobTracker:
    """Builds the jobs of each poll for the dashboard, from the same core state that
    ``compare`` folds (:class:`~gpumem_tui.telemetry.probed_state.ProbedProcesses`) and the probed
    processes' own estimates. A rank's comparison is computed again only when its measured
    figures or its estimate changed (``ProbedSummary.version``, the estimate's ``info_key``).
    Not thread-safe: use from the UI thread.
    """

    def __init__(self) -> None:
        self._cache: dict[int, tuple[object, _ProbeFigures]] = {}

    def jobs(self, processes: Iterable[ProcessSample], probed: ProbedProcesses,
             estimate_of: Callable[[int], object | None],
             compare: Callable[[object, ProbedSummary], object]) -> list[Job]:
        """The jobs among ``processes`` (one snapshot's rows; a probed rank not listed there
        is left out).

        ``estimate_of(pid)``: the process's own (probe's) estimate or None; ``compare``: as
        :func:`probe_peaks`. Processes without a launch identity cost one dict lookup.
        """
        processes = tuple(processes)
        identities = rank_identities(processes, probed.infos())
        devices: dict[int, int | None] = {}  # the ranks listed now, with their GPU
        if identities:
            for p in processes:
                if p.pid in identities and devices.get(p.pid) is None:
                    devices[p.pid] = p.device_index
            # a rank that exited (no longer listed) leaves the group
            identities = {pid: launch for pid, launch in identities.items() if pid in devices}
        if not identities:
            self._cache.clear()
            return []
        ranks = []
        for pid, launch in identities.items():
            figures = self._probe_figures(pid, probed, estimate_of, compare)
            ranks.append(RankPeak(pid, launch, devices.get(pid), probed.nvml_peak(pid), figures.peak,
                                  figures.figure, figures.predicted, figures.error))
        for pid in [pid for pid in self._cache if pid not in identities]:
            del self._cache[pid]
        return build_jobs(ranks)

    def _probe_figures(self, pid: int, probed: ProbedProcesses, estimate_of: Callable[[int], object | None],
                       compare: Callable[[object, ProbedSummary], object]) -> _ProbeFigures:
        summary = probed.summary(pid)
        if summary is None:
            return _ProbeFigures(None, None, None, None)
        estimate = estimate_of(pid)
        # the estimate's content (info_key) rather than its identity: a new object for the
        # same ProbeInfo needs no new comparison, and an id may be reused once one is freed
        key = (summary.version, estimate is None, getattr(estimate, "info_key", None))
        cached = self._cache.get(pid)
        if cached is not None and cached[0] == key:
            return cached[1]
        figures = probe_peaks(summary, estimate, compare)
        self._cache[pid] = (key, figures)
        return figures
