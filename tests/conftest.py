"""Shared fixtures. Owned by the telemetry helper; others may add fixtures at the END, additive only.

- ``fake_nvml``: a :class:`fake_pynvml.FakeNvml` with two GPUs installed as ``pynvml``.
- ``no_nvml``: a fake whose ``nvmlInit`` fails with "NVML Shared Library Not Found".
- ``spawn``: start real short-lived child processes (``spawn()`` -> Popen); all are killed
  and reaped at teardown.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from hypothesis import settings

sys.path.insert(0, str(Path(__file__).parent))

# CI (.ci/run sets CI=1): hypothesis draws the same examples on every run, so a red or green
# run is the code's doing, not the draw's; a failure found once is found again.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

from fake_pynvml import NVML_ERROR_LIBRARY_NOT_FOUND, FakeNvml  # noqa: E402
from waiting import wait_until  # noqa: E402


@pytest.fixture
def fake_nvml(monkeypatch) -> FakeNvml:
    """Two fake GPUs, no processes, installed as ``sys.modules['pynvml']``."""
    fake = FakeNvml(gpus=2)
    fake.install(monkeypatch)
    return fake


@pytest.fixture
def no_nvml(monkeypatch) -> FakeNvml:
    """A ``pynvml`` whose ``nvmlInit`` raises NVMLError_LibraryNotFound (no driver here)."""
    fake = FakeNvml(gpus=0)
    fake.init_error = NVML_ERROR_LIBRARY_NOT_FOUND
    fake.install(monkeypatch)
    return fake


@pytest.fixture
def spawn():
    """Factory for real child processes: ``spawn(seconds=600, user=None, argv=None)`` (all killed at teardown, so a long life costs nothing and a slow test never outlives its child)."""
    children: list[subprocess.Popen] = []
    own_command_line = psutil.Process().cmdline()

    def _spawn(seconds: float = 600.0, user: int | None = None, argv: list[str] | None = None) -> subprocess.Popen:
        if argv is None:
            # another user may not be able to run our venv interpreter: use sleep(1) then
            argv = ["sleep", str(seconds)] if user is not None else [sys.executable, "-c", f"import time; time.sleep({seconds})"]
        cmd = argv
        proc = subprocess.Popen(cmd, user=user, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        children.append(proc)
        # wait for exec: until then /proc shows our own command line. Compared whole, not by
        # its length: an xdist worker's is `python -c ...`, as long as a Python child's, and a
        # signal sent before the exec is lost with the forked copy (a SIGINT test waited 60 s).
        # Not compared with ``cmd``: a shim on PATH (pyenv's python3) execs another argv[0],
        # and bytes or very long arguments read back otherwise. Empty while the exec is under
        # way (a command read then is the bare name, "[python]").
        def exec_done() -> bool:
            try:
                line = psutil.Process(proc.pid).cmdline()
                return bool(line) and line != own_command_line
            except psutil.Error:  # gone already: nothing more to wait for
                return True

        wait_until(exec_done, what=f"the child {cmd[:1]} to start", poll=0.005)
        return proc

    yield _spawn
    for proc in children:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


# ---- shared validation data (../shared): a missing file fails the test that needs it ----------
from shared_data import GPU_DIR, H100_TRACE, require  # noqa: E402


@pytest.fixture
def no_user_config(tmp_path, monkeypatch) -> Path:
    """The user's own gpumem-tui config kept out of the test: ``GPUMEM_TUI_CONFIG_DIR`` names
    an empty folder under ``tmp_path`` (returned); the UI modules use it on every test
    (``pytestmark = pytest.mark.usefixtures("no_user_config")``)."""
    folder = tmp_path / "cfg"
    monkeypatch.setenv("GPUMEM_TUI_CONFIG_DIR", str(folder))
    return folder


@pytest.fixture(scope="session")
def shared_gpu_dir() -> Path:
    """``../shared/validation/gpu`` (the H100 measurements); the test fails if it is missing."""
    return require(GPU_DIR / "dev_truth_h100.jsonl").parent


@pytest.fixture(scope="session")
def h100_trace() -> Path:
    """``../shared/validation/gpu/trace_h100.jsonl``; the test fails if it is missing."""
    return require(H100_TRACE)


# --- test-suite speed (w-tspeed): running under pytest-xdist -----------------------------------


#: the xdist group of the tests marked ``torch_in_process`` (pyproject.toml's markers)
TORCH_GROUP = "torch-in-process"


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the marks (--dist loadgroup)
def pytest_collection_modifyitems(config, items):
    """Keep the tests of a module that share a module- or class-scoped fixture on one xdist
    worker: under ``--dist loadgroup`` (scripts/test.sh) each group runs on a single worker, so
    an expensive shared fixture (a Prometheus server with its exporters, a model measured once)
    is built once, not once per worker that happens to get one of its tests. Tests without such a
    fixture are spread one by one. Harmless without xdist (the mark is only read by it).

    Tests marked ``torch_in_process`` (they import torch in the test process) all go to one
    group, so one worker imports torch (and transformers, peft...) instead of all of them: the
    test modules import it inside the tests, not at the top, which made every worker import it
    while collecting (~6 s of a worker's ~9.5 s collection CPU). That group's tests then share
    their module-scoped fixtures on that one worker too."""
    for item in items:
        if item.get_closest_marker("torch_in_process") is not None:
            item.add_marker(pytest.mark.xdist_group(TORCH_GROUP))
            continue
        if item.get_closest_marker("xdist_group") is not None:
            continue  # a group the test names itself (tests/package_source.py: one parse per worker)
        fixture_defs = getattr(item, "_fixtureinfo", None)
        if fixture_defs is None:
            continue
        shared = any(defs[-1].scope in ("module", "class", "package")
                     for defs in fixture_defs.name2fixturedefs.values() if defs)
        if shared:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))


# --- test-suite speed (w-child): one torch CPU thread per process -----------------------------
# The suite runs 4 xdist workers on 2 cores, and each starts torch jobs (the demo job, measure's
# ranks, framework jobs). torch's default of one OpenMP thread per core makes every parallel
# region spin-wait for threads that have no core to run on: measured on tests/test_demo.py,
# 20.3 s of child CPU with the default, 16.9 s with one thread. The figures the tests check
# (tensor bytes, phases, peaks) do not depend on the thread count. Set before any test module
# imports torch (OpenMP reads it when torch loads); children inherit it. An explicit setting wins.
os.environ.setdefault("OMP_NUM_THREADS", "1")


def pytest_configure(config):
    """Under xdist, each worker first rewrites the asserts of its share of the test modules
    (tests/rewrite_cache.py): on a fresh clone every worker otherwise rewrote every module
    itself while collecting, 6-9 s of CPU each."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        from rewrite_cache import write_rewritten_pycs

        write_rewritten_pycs(config, share=(int(workerinput["workerid"].removeprefix("gw")), workerinput["workercount"]))


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session):
    """Move what collecting left alive (torch, transformers, Textual, every test module: the
    bulk of a worker's heap) out of the garbage collector's reach (gc.freeze), as the dashboard
    does once it is up (gpumem_tui/ui/app_common.py freeze_gc). Each full collection during the
    tests walked all of it: measured with gc.callbacks over 63 UI tests after collecting the
    suite, full passes took 8.5 s of 46.8 s of test CPU (0.66 s each), frozen 5.9 s (0.21 s
    each); and pytest's five collections at the end of a session (unraisableexception) 0.2 s
    each. Garbage is collected first, so nothing is kept that was already unreachable.

    The young generation is then collected as seldom as the running dashboard has it
    (``freeze_gc``: YOUNG_GENERATION_THRESHOLD, 20 000 against CPython's 700): the UI tests make
    Textual's short-lived segments and styles by the million. Four UI files in one process
    (test_ui, test_ui_screen_fixes, test_estimator_panel, test_process_estimate), time in
    collector passes measured with gc.callbacks: 7.5 s of 41.8 s of CPU with CPython's 700
    (2561 young passes), 3.8 s of 38.3 s with 20 000 (82)."""
    from gpumem_tui.ui.app_common import freeze_gc

    freeze_gc()


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """A worker that has run its share leaves its heap to the OS
    (gpumem_tui/support/shutdown.py, as ``python -m gpumem_tui`` does at exit): the torch
    worker's interpreter shutdown otherwise frees torch's and transformers' objects one by one
    (1.2-1.9 s of CPU per process measured for the torchrun ranks), at the end of the run
    where nothing else overlaps it. After every other unconfigure hook (trylast)."""
    if getattr(config, "workerinput", None) is not None:
        from gpumem_tui.support.shutdown import leave_heap_to_os

        leave_heap_to_os()


# --- test-suite speed (w-collect): torch only on the worker that runs the torch tests ----------
_HAD_TORCH = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    # before the test's fixtures: one of them may be what imports torch
    item.stash[_HAD_TORCH] = "torch" in sys.modules
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """Fail a test that imported torch in this process without the ``torch_in_process`` mark:
    under xdist it would run on any worker, which then pays seconds of CPU for torch (and its
    heap weighs on every later garbage collection there); with the mark it joins the one worker
    that has it (pytest_collection_modifyitems above). A test that failed already keeps its own
    error."""
    result = yield
    if not item.stash.get(_HAD_TORCH, True) and "torch" in sys.modules \
            and item.get_closest_marker("torch_in_process") is None:
        raise AssertionError(f"{item.nodeid} imported torch in the test process: mark it "
                             "@pytest.mark.torch_in_process (tests/conftest.py)")
    return result
