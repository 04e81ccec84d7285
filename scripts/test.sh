#!/usr/bin/env bash
# Sets up .venv if needed and runs the whole test suite. "No tests collected" (exit 5) is a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || exit 1
# Debian packages the tests run for real; CI machines run as root. The fleet tests run a
# Prometheus server, the browser test of `gpumem-tui serve` a headless Chromium.
apt_install_missing() {  # COMMAND PACKAGE WHY
    command -v "$1" >/dev/null 2>&1 && return 0
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$2" >/dev/null \
            || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$2" >/dev/null; }
    fi
    command -v "$1" >/dev/null 2>&1 && return 0
    # A component the README promises is installed or the run fails: never a green run that
    # skipped the tests needing it.
    echo "setup: '$1' is missing ($3): apt-get install $2" >&2
    exit 1
}
apt_install_missing prometheus prometheus "the fleet tests need it"
apt_install_missing promtool prometheus "the alert rules test needs it (Debian's prometheus package ships it)"
apt_install_missing chromium chromium "the browser test of gpumem-tui serve needs it"
# -n: the tests run on several worker processes. Much of the suite's time is child processes
# starting and answering, so more workers than cores pays: 4 on 2 cores (a quiet machine, one
# run each: pytest 269 s with -n 4, 288 s with -n 3; each worker also collects the whole
# suite, ~2.5 s of CPU since torch is imported only by the worker that runs the tests marked
# torch_in_process, ~9.5 s before; more workers than 4 still cost that much each).
# GPUMEM_TEST_WORKERS=0 runs it in one process. --dist loadgroup: tests sharing a
# module-scoped fixture (a Prometheus server, a loaded model, a replayed dashboard) stay on one
# worker, so it is built once (tests/conftest.py marks them). -rs: every skip is listed with its reason;
# --durations: the slowest tests, where the suite's time goes.
# Bytecode cache on: a machine that sets PYTHONDONTWRITEBYTECODE (this sandbox and CI do) would
# compile the package again in every worker and in every `python -m gpumem_tui` a test starts.
unset PYTHONDONTWRITEBYTECODE
.venv/bin/python -m compileall -q gpumem_tui tests >/dev/null
.venv/bin/python -m pytest -q -p no:cacheprovider -rs -n "${GPUMEM_TEST_WORKERS:-4}" --dist loadgroup --durations=25 "$@"
rc=$?
if [ "$rc" -eq 5 ]; then echo "pytest collected no tests: failing" >&2; exit 1; fi
exit "$rc"
