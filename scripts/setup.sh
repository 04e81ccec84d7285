#!/usr/bin/env bash
# Creates .venv and installs gpumem-tui with every extra. torch is pinned to the CPU build
# first (torch==2.13.0): an open "torch" requirement would pull a multi-GB CUDA build.
# A stamp of pyproject.toml's hash skips the pip work when nothing changed since the last run.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# System packages the tests use as real parts (issue 12): a Prometheus server for the fleet
# tests. Installed only when missing, so a prepared machine pays nothing.
if ! command -v prometheus >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
    else
        echo "setup.sh: prometheus is missing; install it (Debian: apt-get install prometheus)" >&2
        exit 1
    fi
fi
stamp=.venv/.gpumem-tui-setup
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ -x .venv/bin/gpumem-tui ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
    exit 0
fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q "torch==2.13.0"
.venv/bin/python -m pip install -q -e ".[torch,dev]"
echo "$want" > "$stamp"
