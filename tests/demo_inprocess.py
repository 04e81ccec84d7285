"""Run the built-in demo job (:mod:`gpumem_tui.demo.job`) in the test process.

A child ``python -m gpumem_tui.demo.job`` spends most of its CPU importing torch (and
transformers for ``--model hf``): measured 5-8 s per run against ~1 s of training, and the
tests that only read what the job's probe streamed started one per case. The test process has
torch already; the job's code, its probe and the stream it writes are the same (checked when
this was introduced: the measured peak, the activations group and the published setup of all
four tests/test_demo_estimate.py cases were byte-identical to a child's). tests/test_demo.py
keeps the job as a real child process (started by ``gpumem-tui demo`` and by
:func:`gpumem_tui.demo.process.start_demo_job`), with its signals and its parent check.
"""

from __future__ import annotations

import signal
from collections.abc import Sequence


def run_demo_job(argv: Sequence[str]) -> int:
    """``python -m gpumem_tui.demo.job ARGV`` in this process; returns its exit code.

    The job installs SIGTERM / SIGINT handlers (a stop request ends it after the step) and
    ``--threads`` sets torch's thread count: both are put back afterwards, so the test process
    is left as it was. The probe it attaches is closed by the job itself. A stop while the job
    is still loading ends the PROCESS at once (``job._end_now``, os._exit): a test that stops it
    then patches ``_end_now`` (tests/test_demo.py)."""
    import torch

    from gpumem_tui.demo import job

    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    threads = torch.get_num_threads()
    try:
        return job.main(list(argv))
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        torch.set_num_threads(threads)
