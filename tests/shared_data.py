"""The one place the tests find the shared validation data (``../shared`` beside the checkout).

The README and CI promise ``<checkout>/../shared`` (``$GPUMEM_SHARED`` overrides it, the rule
``benchmarks/gpu_accuracy.py`` uses for the benchmarks). A test that needs a file from it asks
for the ``shared_gpu_dir`` or ``h100_trace`` fixture (tests/conftest.py), or wears
:data:`needs_gpu_dir` / :data:`needs_h100_trace`; when the file is missing that test FAILS with
one line naming the path, never skips, and tests that need no shared data are not touched.
The paths below are not checked at import, so a module's other tests still run.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("GPUMEM_SHARED") or ROOT.parent / "shared")
GPU_DIR = SHARED / "validation" / "gpu"  # the H100 measurements (dev cases, truth, trace)
H100_TRACE = GPU_DIR / "trace_h100.jsonl"  # the recorded H100 dashboard trace (PIDs 1088, 1089)

needs_gpu_dir = pytest.mark.usefixtures("shared_gpu_dir")
needs_h100_trace = pytest.mark.usefixtures("h100_trace")


def require(path: Path) -> Path:
    """``path`` if it exists; otherwise fail the calling test with one line saying what is missing.

    Raises:
        pytest.fail.Exception: ``path`` does not exist.
    """
    if not path.exists():
        pytest.fail(f"{path} is missing: the tests need the shared data at {SHARED} (the checkout's "
                    "../shared, or $GPUMEM_SHARED; see README)", pytrace=False)
    return path
