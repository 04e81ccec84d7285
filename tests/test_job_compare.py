"""``gpumem-tui compare`` of a trace with several ranks of one job (issue 21).

The trace is written with the project's recorder from probe-like records (tests/rank_traces.py).
Expected figures are computed from the same trace one process at a time
(``compare --pid``), so the checks are that the job report holds each rank's own comparison,
the worst rank and the imbalance, and that single-process output did not change.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import rank_traces  # noqa: E402
from rank_traces import MiB, Rank  # noqa: E402

from gpumem_tui.analysis.job_compare import compare_trace_ranks  # noqa: E402
from gpumem_tui.analysis.comparison import ComparisonError  # noqa: E402
from gpumem_tui.analysis.process_estimate import compare_trace  # noqa: E402
from gpumem_tui.analysis.compare_cli import format_comparison, main  # noqa: E402


@pytest.fixture
def job_trace(tmp_path):
    return rank_traces.write_trace(tmp_path / "job.jsonl")


def test_every_rank_is_its_own_comparison_and_the_worst_and_imbalance_follow(job_trace):
    result = compare_trace_ranks(job_trace)
    json.dumps(result, allow_nan=False)
    ranks = result["ranks"]
    assert [(r["rank"], r["pid"], r["probed"]) for r in ranks] == [(0, 2001, True), (1, 2002, True), (2, 2003, False)]
    for r in ranks[:2]:
        alone = compare_trace(job_trace, pid=r["pid"])  # what compare --pid says of that rank
        for key in ("peak_predicted_bytes", "peak_measured_bytes", "peak_error_percent", "measured_figure", "predicted"):
            assert r[key] == alone[key]
    errors = {r["rank"]: r["peak_error_percent"] for r in ranks[:2]}
    job = result["job"]
    worst = max(errors, key=lambda k: abs(errors[k]))
    assert job["worst_rank"] == worst and job["worst_error_percent"] == errors[worst]
    # NVML lists every rank: the imbalance is in NVML used, highest per rank over the trace
    nvml = [r.nvml_used for r in rank_traces.default_ranks()]
    assert [r["nvml_peak_bytes"] for r in ranks] == nvml
    assert job["peak_figure"] == "NVML used"
    assert (job["largest_peak_bytes"], job["smallest_peak_bytes"]) == (max(nvml), min(nvml))
    assert job["imbalance"] == round(max(nvml) / min(nvml), 3)
    assert (job["job_id"], job["world_size"], job["ranks_seen"], job["notice"]) == (rank_traces.JOB, 3, 3, None)


def test_the_text_report_lists_each_rank_the_worst_and_the_imbalance(job_trace):
    result = compare_trace_ranks(job_trace)
    text = format_comparison(result)
    lines = text.splitlines()
    assert lines[0].startswith(f"job {rank_traces.JOB}: world size 3, 3 of 3 ranks")
    rank_lines = [line for line in lines if line.split()[:1] in (["0"], ["1"], ["2"])]
    assert [line.split()[1] for line in rank_lines] == ["2001", "2002", "2003"]
    for line, r in zip(rank_lines, result["ranks"][:2]):
        assert f"{r['peak_error_percent']:+.1f}" in line and "torch allocated" in line
    assert "not probed" in rank_lines[2]
    worst = result["job"]["worst_rank"]
    assert f"worst rank: {worst} " in text and f"imbalance: {result['job']['imbalance']:.2f}×" in text


def test_pid_still_compares_one_process_with_the_output_of_before(job_trace, capsys):
    assert main([str(job_trace), "--pid", "2002"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("pid 2002 on cuda: measured figure torch allocated")
    assert out.strip() == format_comparison(compare_trace(job_trace, pid=2002))


def test_compare_json_of_a_job(job_trace, capsys):
    assert main([str(job_trace), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data == compare_trace_ranks(job_trace)


def test_plot_of_a_job_asks_for_a_rank(job_trace, capsys):
    assert main([str(job_trace), "--plot"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--pid" in err and "2001" in err


def test_probed_processes_of_different_jobs_are_compared_as_before(tmp_path):
    ranks = [Rank(2001, 0, 0, 2300 * MiB, 2900 * MiB, world_size=2),
             Rank(2002, 0, 1, 2300 * MiB, 2900 * MiB, world_size=2, job_id="10.0.0.8:29500")]
    path = rank_traces.write_trace(tmp_path / "two.jsonl", ranks)
    with pytest.raises(ComparisonError, match="several probed processes"):
        compare_trace_ranks(path)


def test_one_probed_rank_is_a_single_process_comparison(tmp_path):
    ranks = [Rank(2001, 0, 0, 2300 * MiB, 2900 * MiB), Rank(2002, 1, 1, 0, 2900 * MiB, probed=False)]
    path = rank_traces.write_trace(tmp_path / "one.jsonl", ranks)
    assert compare_trace_ranks(path) == compare_trace(path)


def test_bad_rank_claims_are_reported_with_a_notice(tmp_path, capsys):
    ranks = [Rank(11, 0, 0, 2300 * MiB, 2900 * MiB), Rank(12, 0, 1, 2400 * MiB, 3000 * MiB, world_size=4),
             Rank(13, 5, 2, 0, 2800 * MiB, probed=False)]
    path = rank_traces.write_trace(tmp_path / "bad.jsonl", ranks)
    assert main([str(path)]) == 0
    out = capsys.readouterr().out
    notes = [line for line in out.splitlines() if line.startswith("note: ")]
    assert len(notes) == 1
    assert "world size (3, 4)" in notes[0] and "rank 0 claimed by pids 11, 12" in notes[0]
    assert "rank 5 >= world size 3 (pid 13)" in notes[0]
    assert [line.split()[:2] for line in out.splitlines()[2:5]] == [["0", "11"], ["0", "12"], ["5", "13"]]


def test_compare_of_a_job_through_the_command(job_trace):
    # the real entry point, in a fresh interpreter (as a user runs it)
    done = subprocess.run([sys.executable, "-m", "gpumem_tui", "compare", str(job_trace)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"job {rank_traces.JOB}:") and "worst rank:" in done.stdout
