"""Rewrite the test modules' asserts once for all xdist workers, each worker a share of them.

pytest rewrites the ``assert`` statements of each test module (and conftest.py) when it imports
it, and caches the rewritten code in ``__pycache__/NAME.cpython-311-pytest-X.Y.Z.pyc``
(``_pytest/assertion/rewrite.py``, ``AssertionRewritingHook.exec_module``). On a fresh clone,
as CI runs it, the workers of ``scripts/test.sh`` start collecting at the same moment, find no
cached file and each rewrite every module: 6-9 s of CPU per process, measured on this 2-core
machine (``pytest --collect-only`` without / with the cached files: 17.6-20.5 s vs 11.1-11.7 s).
Here each worker, before it collects, writes the cached files of its share (every n-th module;
the workers start together, so the shares are done side by side): then every worker reads the
others' files instead of rewriting. A module whose file is not there yet when a worker imports
it is rewritten by that worker as before (only time lost: pytest writes and replaces the file
atomically, and reads it only if it matches the source).

The files written are the ones pytest itself writes, through pytest's own functions (the same
code, the same validity check on the source's mtime and size when a worker reads one), so a
worker's modules are the same whether this ran or not. Nothing is done where pytest would not
write its cache either (``PYTHONDONTWRITEBYTECODE``, ``--assert=plain``), or where these
internals of pytest are not found (another pytest version): the workers then rewrite as before.
"""

from __future__ import annotations

import fnmatch
import sys
from pathlib import Path

import pytest


def _rewritten_files(config: pytest.Config) -> list[Path]:
    """The files pytest would rewrite for this run's paths: test files named on the command
    line, and under each directory the files matching ``python_files`` and the conftest.py files."""
    patterns = config.getini("python_files")
    files: list[Path] = []
    for arg in config.args or config.getini("testpaths"):
        path = Path(config.invocation_params.dir, str(arg).split("::", 1)[0])
        if path.is_file() and path.suffix == ".py":
            files.append(path)
        elif path.is_dir():
            files.extend(p for p in sorted(path.rglob("*.py"))
                         if "__pycache__" not in p.parts
                         and (p.name == "conftest.py" or any(fnmatch.fnmatch(p.name, pat) for pat in patterns)))
    return list(dict.fromkeys(files))


def write_rewritten_pycs(config: pytest.Config, share: tuple[int, int] = (0, 1)) -> int:
    """Write pytest's cached rewritten module for each file of this run's share that has none
    (or a stale one). ``share``: (index, count), the files ``index::count`` of the run's files in
    path order. Returns how many were written; 0 where pytest would not cache them."""
    try:
        from _pytest.assertion import rewrite
    except ImportError:  # pragma: no cover - pytest moved its internals: the workers rewrite
        return 0
    needed = ("_read_pyc", "_rewrite_test", "_write_pyc", "get_cache_dir", "try_makedirs", "PYC_TAIL", "assertstate_key")
    if sys.dont_write_bytecode or not all(hasattr(rewrite, name) for name in needed):
        return 0
    state = config.stash.get(rewrite.assertstate_key, None)
    if state is None or getattr(state, "mode", None) != "rewrite":
        return 0
    written = 0
    index, count = share
    for source in _rewritten_files(config)[index::count]:
        cache_dir = rewrite.get_cache_dir(source)
        if not rewrite.try_makedirs(cache_dir):
            continue
        pyc = cache_dir / (source.name[:-3] + rewrite.PYC_TAIL)
        if rewrite._read_pyc(source, pyc, state.trace) is not None:
            continue  # cached and current
        try:
            source_stat, code = rewrite._rewrite_test(source, config)
        except SyntaxError:
            continue  # the worker's import reports it, as without this
        written += bool(rewrite._write_pyc(state, code, source_stat, pyc))
    return written
