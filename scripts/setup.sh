#!/usr/bin/env bash
# Creates .venv and installs gpumem-tui with every extra. torch is pinned to the CPU build
# first (torch==2.13.0): an open "torch" requirement would pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q "torch==2.13.0"
.venv/bin/python -m pip install -q -e ".[torch,dev]"
