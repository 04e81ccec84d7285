"""Which launch (job) and rank a process belongs to: torchrun / accelerate launch identity.

A launcher starts every rank of one job with the same rendezvous in its environment
(PyTorch, ``torch.distributed.run`` / torchrun docs, "Environment Variables"):
``TORCHELASTIC_RUN_ID`` (the rendezvous id, torchrun only), ``MASTER_ADDR`` / ``MASTER_PORT``
(where rank 0 listens), ``RANK`` (global rank), ``WORLD_SIZE`` (number of ranks) and
``LOCAL_RANK`` (rank on this node). accelerate launch runs torchrun underneath, so it sets
the same variables. The job's identity is ``TORCHELASTIC_RUN_ID``, else
``"MASTER_ADDR:MASTER_PORT"``: the same rule the probe follows when it publishes the
``job_id`` / ``rank`` / ``world_size`` / ``local_rank`` keys of its ProbeInfo setup. One
exception: torchrun's ``--rdzv-id`` defaults to ``"none"`` (torch/distributed/run.py, seen in
torch 2.13), so every torchrun started without it has the run id ``"none"``; that names no
job (:data:`NO_RUN_ID`) and the rendezvous address does.

Every value here comes from another process (its environment or its probe stream) and is
untrusted: ints must be plain non-negative integers within :data:`MAX_WORLD_SIZE`, the job id
is cut to :data:`MAX_JOB_ID` characters and must be shown literally (``gpumem_tui.support.text.printable``).
Cross-rank checks (a rank >= world size, duplicate ranks) belong to the job
(``gpumem_tui.analysis.jobs``), which shows them instead of dropping the rank.

Headless: imports nothing of the project but nothing else either.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

#: Largest world size believed (a launch of more than a million ranks is not real data).
MAX_WORLD_SIZE = 1 << 20
#: Longest job id kept, in characters (a rendezvous id is a short token or a uuid).
MAX_JOB_ID = 128
#: Longest environment value looked at (longer: not a launcher's value).
_MAX_ENV_VALUE = 256

#: torchrun's default ``--rdzv-id``: shared by unrelated jobs, so not an identity.
NO_RUN_ID = "none"

#: The environment variables read, in the order above.
LAUNCH_ENV = ("TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK")


@dataclass(frozen=True, slots=True)
class RankLaunch:
    """One process's place in a launch: ``job_id`` (untrusted text, at most MAX_JOB_ID
    characters), ``rank`` (global, 0-based), ``world_size`` (>= 1), ``local_rank`` (None when
    not published). ``rank < world_size`` is NOT guaranteed here (see the module doc);
    ``source`` is ``"probe"`` (its ProbeInfo setup) or ``"env"`` (its environment)."""

    job_id: str
    rank: int
    world_size: int
    local_rank: int | None = None
    source: str = "env"


def _count(value: object, *, minimum: int) -> int | None:
    """``value`` as an int in [minimum, MAX_WORLD_SIZE]: an int (not a bool) or a string of
    at most 7 decimal digits; else None."""
    if isinstance(value, str):
        text = value.strip()
        if not (0 < len(text) <= 7 and text.isascii() and text.isdigit()):
            return None
        value = int(text)
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if minimum <= value <= MAX_WORLD_SIZE else None


def _job_id(value: object) -> str | None:
    """A usable job id: non-blank text, cut to MAX_JOB_ID characters; else None."""
    if not isinstance(value, str) or not value.strip() or len(value) > _MAX_ENV_VALUE:
        return None
    return value[:MAX_JOB_ID]


def rank_launch(job_id: object, rank: object, world_size: object, local_rank: object = None,
                source: str = "env") -> RankLaunch | None:
    """A :class:`RankLaunch` from untrusted values, or None when ``job_id``, ``rank`` or
    ``world_size`` is missing or not valid (see :func:`_count`). An invalid ``local_rank``
    becomes None (it only labels the rank)."""
    job = _job_id(job_id)
    rank_n = _count(rank, minimum=0)
    world = _count(world_size, minimum=1)
    if job is None or rank_n is None or world is None:
        return None
    return RankLaunch(job, rank_n, world, _count(local_rank, minimum=0), source)


def launch_from_environ(env: Mapping[str, str]) -> RankLaunch | None:
    """The launch identity in a process's environment (``psutil.Process.environ()``), or
    None when it was not started by a launcher (no RANK / WORLD_SIZE, or no rendezvous).

    ``TORCHELASTIC_RUN_ID`` names the job; without it (or when it is torchrun's default
    ``"none"``) ``MASTER_ADDR:MASTER_PORT`` does (the port must be 1-65535). Values are validated as :func:`rank_launch` says.
    """
    job: str | None = None
    run_id = env.get("TORCHELASTIC_RUN_ID")
    if isinstance(run_id, str) and run_id.strip() and run_id != NO_RUN_ID and len(run_id) <= _MAX_ENV_VALUE:
        job = run_id
    else:
        addr, port = env.get("MASTER_ADDR"), env.get("MASTER_PORT")
        port_n = _count(port, minimum=1) if isinstance(port, str) and len(port) <= 5 else None
        if isinstance(addr, str) and addr.strip() and len(addr) <= _MAX_ENV_VALUE and port_n and port_n <= 65535:
            job = f"{addr}:{port_n}"
    return rank_launch(job, env.get("RANK"), env.get("WORLD_SIZE"), env.get("LOCAL_RANK"), "env")


def launch_from_setup(setup: Mapping[str, object] | tuple[tuple[str, object], ...]) -> RankLaunch | None:
    """The launch identity a probe published in its ProbeInfo setup (keys ``job_id`` str,
    ``rank``, ``world_size``, ``local_rank`` ints), or None when absent or invalid."""
    values = dict(setup) if not isinstance(setup, Mapping) else setup
    return rank_launch(values.get("job_id"), values.get("rank"), values.get("world_size"),
                       values.get("local_rank"), "probe")
