"""One job, many ranks (issue 21): the launch identity of a process and the Job value.

Launch identities come from another process (its environment or its probe stream): the
checks here are that bad values are refused or flagged, never raised, and that a job's
figures are computed from its ranks (largest / smallest peak, worst error) in one figure.
"""

from __future__ import annotations

import os
import subprocess
import sys

import psutil
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from gpumem_tui.analysis.jobs import RankPeak, build_jobs, rank_identities
from gpumem_tui.analysis.comparison import FIGURE_ALLOCATED, FIGURE_CPU_LIVE, FIGURE_NVML_USED
from gpumem_tui.telemetry.host import HostEnricher, read_launch
from gpumem_tui.telemetry.launch import (
    MAX_JOB_ID,
    MAX_WORLD_SIZE,
    RankLaunch,
    launch_from_environ,
    launch_from_setup,
    rank_launch,
)
from gpumem_tui.telemetry.model import ProbeInfo, ProcessSample, ProcessType
from gpumem_tui.telemetry.serialize import process_from_dict, process_to_dict
from waiting import wait_until

MiB = 1 << 20


def _env(**extra: str) -> dict[str, str]:
    env = {"MASTER_ADDR": "10.0.0.7", "MASTER_PORT": "29500", "RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}
    env.update(extra)
    return env


# -- launch identity ------------------------------------------------------------------------


def test_environment_names_the_job_by_run_id_else_master_address():
    assert launch_from_environ(_env()) == RankLaunch("10.0.0.7:29500", 1, 4, 1, "env")
    assert launch_from_environ(_env(TORCHELASTIC_RUN_ID="run-7f3a")).job_id == "run-7f3a"
    assert launch_from_environ({"RANK": "0", "WORLD_SIZE": "2"}) is None  # no rendezvous: no job
    assert launch_from_environ({}) is None
    # torchrun's default --rdzv-id "none" is shared by unrelated jobs: the rendezvous names it
    assert launch_from_environ(_env(TORCHELASTIC_RUN_ID="none")).job_id == "10.0.0.7:29500"


@pytest.mark.parametrize("bad", [
    {"RANK": "-1"}, {"RANK": "one"}, {"RANK": "1.0"}, {"RANK": ""}, {"RANK": "١"},  # Arabic-Indic one
    {"WORLD_SIZE": "0"}, {"WORLD_SIZE": str(MAX_WORLD_SIZE + 1)}, {"WORLD_SIZE": "9" * 40},
    {"MASTER_PORT": "0"}, {"MASTER_PORT": "70000"}, {"MASTER_PORT": "http"}, {"MASTER_ADDR": " "},
    {"MASTER_ADDR": "x" * 300},
])  # fmt: skip
def test_environment_values_that_are_not_a_launchers_are_refused(bad):
    assert launch_from_environ(_env(**bad)) is None


def test_a_bad_local_rank_only_loses_the_label_and_a_long_job_id_is_cut():
    assert launch_from_environ(_env(LOCAL_RANK="-3")) == RankLaunch("10.0.0.7:29500", 1, 4, None, "env")
    long = launch_from_environ(_env(TORCHELASTIC_RUN_ID="r" * 200))
    assert long is not None and long.job_id == "r" * MAX_JOB_ID


def test_probe_setup_keys_are_read_as_published_and_checked():
    setup = (("batch", 4), ("job_id", "10.0.0.7:29500"), ("rank", 2), ("world_size", 4), ("local_rank", 0))
    assert launch_from_setup(setup) == RankLaunch("10.0.0.7:29500", 2, 4, 0, "probe")
    assert launch_from_setup((("rank", 1), ("world_size", 2))) is None  # no job id
    assert launch_from_setup((("job_id", "j"), ("rank", True), ("world_size", 2))) is None  # a bool is no rank
    assert launch_from_setup((("job_id", 7), ("rank", 0), ("world_size", 2))) is None  # job id not text
    assert launch_from_setup((("job_id", "j"), ("rank", 0), ("world_size", -2))) is None


@given(rank=st.integers(), world=st.integers())
def test_rank_launch_keeps_exactly_the_plausible_ints(rank, world):
    launch = rank_launch("job", rank, world)
    plausible = 0 <= rank <= MAX_WORLD_SIZE and 1 <= world <= MAX_WORLD_SIZE
    assert (launch is not None) == plausible
    if launch is not None:
        assert (launch.rank, launch.world_size) == (rank, world)


@given(text=st.text(max_size=300))
def test_any_job_id_text_is_kept_literally_or_refused(text):
    assume(text.strip())
    launch = rank_launch(text, 0, 2)
    if len(text) <= 256:
        assert launch is not None and launch.job_id == text[:MAX_JOB_ID]
    else:
        assert launch is None


def test_launch_survives_a_trace_round_trip_and_a_bad_one_is_dropped():
    sample = ProcessSample(5, 0, ProcessType.COMPUTE, launch=RankLaunch("a:1", 1, 2, 1, "env"))
    assert process_from_dict(process_to_dict(sample)) == sample
    raw = process_to_dict(sample)
    raw["launch"] = {"job_id": "a:1", "rank": "x", "world_size": 2}
    assert process_from_dict(raw).launch is None and process_from_dict(raw).pid == 5
    raw["launch"] = ["not", "an", "object"]
    assert process_from_dict(raw).launch is None
    assert "launch" not in process_to_dict(ProcessSample(6, 0, ProcessType.COMPUTE))  # old traces: as before


# -- the host layer reads it from a live process ---------------------------------------------


@pytest.fixture
def launched_child():
    env = dict(os.environ, **_env(TORCHELASTIC_RUN_ID="run-test", RANK="3", WORLD_SIZE="8", LOCAL_RANK="3"))
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE, env=env)
    try:
        # the environment is in /proc once exec is done: wait for psutil to read the child's own
        wait_until(lambda: psutil.Process(child.pid).environ().get("TORCHELASTIC_RUN_ID") == "run-test",
                   what="the child's own environment in /proc", ignore=(psutil.Error,))
        yield child
    finally:
        child.stdin.close()  # type: ignore[union-attr]
        child.wait()


@pytest.mark.parametrize("fast", [True, False])
def test_host_layer_reads_a_launched_process_environment_once(launched_child, monkeypatch, fast):
    calls = []
    real = psutil.Process.environ

    def counted(self):
        calls.append(self.pid)
        return real(self)

    monkeypatch.setattr(psutil.Process, "environ", counted)
    enricher = HostEnricher(in_container=False, fast=fast)
    sample = ProcessSample(launched_child.pid, 0, ProcessType.COMPUTE)
    for _ in range(3):  # three polls
        [row] = enricher.enrich([sample])
        assert row.launch == RankLaunch("run-test", 3, 8, 3, "env")
    assert calls == [launched_child.pid]  # read once, then cached with the process's details
    # our own process has no launch
    assert enricher.enrich([ProcessSample(os.getpid(), 0, ProcessType.COMPUTE)])[0].launch is None


@pytest.mark.parametrize("error", [psutil.AccessDenied(1), psutil.NoSuchProcess(1), psutil.ZombieProcess(1), OSError("io")])
def test_an_unreadable_environment_means_no_grouping(monkeypatch, error):
    def refuse(self):
        raise error

    monkeypatch.setattr(psutil.Process, "environ", refuse)
    assert read_launch(psutil.Process(os.getpid())) is None
    row = HostEnricher(in_container=False).enrich([ProcessSample(os.getpid(), 0, ProcessType.COMPUTE)])[0]
    assert row.launch is None and row.command  # the row itself is as before


# -- the job value -----------------------------------------------------------------------------


def _rank(pid, rank, world=3, job="j:1", nvml=None, probe=None, predicted=None, error=None, figure=FIGURE_ALLOCATED):
    return RankPeak(pid, RankLaunch(job, rank, world, rank), 0, nvml, probe, figure if probe is not None else None,
                    predicted, error)


def test_a_job_holds_its_ranks_in_rank_order_with_imbalance_and_worst_rank():
    ranks = [_rank(12, 2, nvml=3000 * MiB), _rank(10, 0, nvml=2900 * MiB, probe=2300 * MiB, predicted=2400 * MiB, error=4.3),
             _rank(11, 1, nvml=3130 * MiB, probe=2700 * MiB, predicted=2400 * MiB, error=-11.1), _rank(99, 0, job="other:2", world=1)]
    [job] = build_jobs(ranks)  # the lone process of a world of one is no job
    assert [r.rank for r in job.ranks] == [0, 1, 2] and job.world_size == 3 and job.ranks_seen == 3
    assert job.peak_figure == FIGURE_NVML_USED  # every rank has it
    assert (job.largest_peak_bytes, job.smallest_peak_bytes) == (3130 * MiB, 2900 * MiB)
    assert job.imbalance == pytest.approx(3130 / 2900)
    assert job.worst is not None and job.worst.pid == 11  # |-11.1| > |4.3|
    assert job.notice is None
    assert job.to_json()["worst_rank"] == 1 and job.to_json()["imbalance"] == round(3130 / 2900, 3)


def test_the_imbalance_never_mixes_figures():
    # NVML used missing on one rank (a CPU job): the probe's figure, when all have the same one
    cpu = build_jobs([_rank(1, 0, probe=100, figure=FIGURE_CPU_LIVE), _rank(2, 1, probe=150, figure=FIGURE_CPU_LIVE)])[0]
    assert cpu.peak_figure == FIGURE_CPU_LIVE and cpu.imbalance == 1.5
    # one rank has only NVML used, the other only torch allocated: no common figure, no imbalance
    mixed = build_jobs([_rank(1, 0, nvml=100), _rank(2, 1, probe=150)])[0]
    assert mixed.peak_figure is None and mixed.imbalance is None and mixed.largest_peak_bytes is None
    # two figures from the probes (CUDA and CPU ranks): none either
    two = build_jobs([_rank(1, 0, probe=100, figure=FIGURE_CPU_LIVE), _rank(2, 1, probe=150)])[0]
    assert two.peak_figure is None and two.imbalance is None
    # a rank at 0 bytes: no ratio
    assert build_jobs([_rank(1, 0, nvml=0), _rank(2, 1, nvml=10)])[0].imbalance is None


def test_bad_rank_claims_are_shown_as_one_line_never_raised():
    ranks = [_rank(10, 0, world=4), _rank(11, 0, world=4), _rank(12, 5, world=4), _rank(13, 1, world=2)]
    [job] = build_jobs(ranks)
    assert len(job.ranks) == 4 and job.world_size == 4  # the most common claim
    notice = job.notice or ""
    assert "\n" not in notice
    assert "world size (2, 4)" in notice and "rank 0 claimed by pids 10, 11" in notice
    assert "rank 5 >= world size 4 (pid 12)" in notice
    assert job.ranks_seen == 3  # ranks 0, 1 and 5


def test_a_hostile_job_id_is_printable_in_the_notice():
    [job] = build_jobs([_rank(1, 0, job="\x1b[31m[bold]x"), _rank(2, 0, job="\x1b[31m[bold]x")])
    assert job.job_id == "\x1b[31m[bold]x"  # the value is kept literally
    assert "\x1b" not in (job.notice or "")  # the notice escapes control characters


def test_rank_identities_prefer_the_probes_word_over_the_environment():
    env = RankLaunch("env-job", 1, 2, 1, "env")
    processes = [ProcessSample(7, 0, ProcessType.COMPUTE, launch=env), ProcessSample(8, 1, ProcessType.COMPUTE, launch=env)]
    infos = {7: ProbeInfo(7, setup=(("job_id", "probe-job"), ("rank", 0), ("world_size", 2)))}
    ids = rank_identities(processes, infos)
    assert ids[7] == RankLaunch("probe-job", 0, 2, None, "probe") and ids[8] == env


def test_a_probe_that_published_torchruns_default_run_id_joins_the_job_its_environment_names():
    env = RankLaunch("127.0.0.1:29517", 0, 2, 0, "env")
    processes = [ProcessSample(7, None, ProcessType.HOST, launch=env),
                 ProcessSample(8, None, ProcessType.HOST, launch=RankLaunch("127.0.0.1:29517", 1, 2, 1, "env"))]
    infos = {7: ProbeInfo(7, setup=(("job_id", "none"), ("rank", 0), ("world_size", 2)))}
    ids = rank_identities(processes, infos)
    assert ids[7] == RankLaunch("127.0.0.1:29517", 0, 2, None, "probe")
    [job] = build_jobs(RankPeak(pid, launch) for pid, launch in ids.items())
    assert [r.pid for r in job.ranks] == [7, 8]
    # without a readable environment the probe's word stands
    assert rank_identities([], infos)[7].job_id == "none"
