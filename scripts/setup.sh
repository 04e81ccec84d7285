#!/usr/bin/env bash
# Creates .venv and installs gpumem-tui with every extra. torch is pinned to the CPU build
# first (torch==2.13.0): an open "torch" requirement would pull a multi-GB CUDA build.
# A stamp of pyproject.toml's hash skips the pip work when nothing changed since the last run.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
stamp=.venv/.gpumem-tui-setup
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ -x .venv/bin/gpumem-tui ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
    exit 0
fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q "torch==2.13.0"
.venv/bin/python -m pip install -q -e ".[torch,dev]"
# An editable install compiles nothing, and a machine that sets PYTHONDONTWRITEBYTECODE never
# writes the cache: every start would compile the modules it imports (about a fifth of the
# instructions to the dashboard's first frame, benchmarks/first_frame.py). Compile them once.
env -u PYTHONDONTWRITEBYTECODE .venv/bin/python -m compileall -q gpumem_tui >/dev/null
echo "$want" > "$stamp"
