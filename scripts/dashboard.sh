#!/usr/bin/env bash
# Sets up .venv if needed and opens the dashboard. Without an NVIDIA driver it says so and
# runs the built-in demo: a real CPU training job whose measured memory it shows.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/gpumem-tui "$@"
