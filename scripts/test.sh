#!/usr/bin/env bash
# Sets up .venv if needed and runs the whole test suite. "No tests collected" (exit 5) is a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || exit 1
# The fleet tests run a real Prometheus server (Debian's package); CI machines run as root.
if ! command -v prometheus >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        apt-get install -y -q prometheus >/dev/null 2>&1 \
            || { apt-get update -q >/dev/null && apt-get install -y -q prometheus >/dev/null; }
    else
        echo "setup: 'prometheus' is missing (the fleet tests need it): apt-get install prometheus" >&2
    fi
fi
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"
rc=$?
if [ "$rc" -eq 5 ]; then echo "pytest collected no tests: failing" >&2; exit 1; fi
exit "$rc"
