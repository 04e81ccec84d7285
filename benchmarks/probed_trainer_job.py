"""One of ``collect_cuda_recipes.py``'s Trainer cases run as a user runs it with gpumem-tui: the
``GpumemCallback`` probe in the Trainer (``gpumem_tui.integrations.transformers``), so that
``gpumem-tui record`` beside it writes a trace that ``gpumem-tui compare`` reads. Where
``collect_cuda_recipes.py`` checks the estimator given the right spec, this checks the product's
own path: the spec the probe reads off a real Trainer job, and the comparison it feeds.

    GPUMEM_TUI_PROBE_DIR=DIR gpumem-tui record -o TRACE --probe-dir DIR --interval 0.05 &
    GPUMEM_TUI_PROBE_DIR=DIR PYTHONPATH=. python3 benchmarks/probed_trainer_job.py CASE [--device cuda]
    kill -TERM %1; gpumem-tui compare TRACE

CASE is a case name of ``collect_cuda_recipes.CASES`` with a Trainer recipe; ``--tiny`` runs
its CPU smoke-test variant (tiny config, batch 2, seq 32). Same model, data and
``TrainingArguments`` as there, ``collect_recipes.STEPS`` steps. torch, transformers and peft
(and bitsandbytes for QLoRA); no GPU needed with ``--device cpu``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import collect_cuda_recipes as recipes  # noqa: E402
from collect_recipes import _dataset, _run_trainer  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    trainer_cases = [c["name"] for c in recipes.CASES if recipes.uses_trainer(c)]
    parser.add_argument("case", choices=trainer_cases, metavar="CASE", help=", ".join(trainer_cases))
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--tiny", action="store_true", help="the CPU smoke-test variant of the case")
    args = parser.parse_args()
    import torch

    from gpumem_tui.integrations.transformers import GpumemCallback

    case = next(c for c in recipes.CASES if c["name"] == args.case)
    if args.tiny:
        case = recipes.shrink(case)
    config = recipes.case_config(case)
    model = recipes.build_model(case, config, torch, args.device)
    rows = _dataset(case["batch"], case["seq"], int(config["vocab_size"]), torch)
    _run_trainer(model, rows, case["batch"], GpumemCallback(), **recipes.trainer_arguments(case, args.device))
    print(f"{case['name']}: {len(rows) // case['batch']} steps done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
