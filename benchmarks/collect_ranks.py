"""Re-create the per-rank ground truth under ``tests/data/ranks/``: every parallel strategy at
world sizes 2 and 4 on two tiny models, measured with ``gpumem-tui measure --nproc N --on cpu``.

Usage (from the repository root; each case takes seconds, all of them a few minutes on 2 cores)::

    nice -n 10 .venv/bin/python benchmarks/collect_ranks.py               # every case
    nice -n 10 .venv/bin/python benchmarks/collect_ranks.py --only fsdp2  # case names containing 'fsdp2'

Models: ``tests/data/ranks/configs/llama-tiny.json`` (2 Llama blocks, hidden 128, 8 heads,
4 KV heads, vocabulary 1024) and ``gpt2-tiny.json`` (2 GPT-2 blocks, hidden 128, 4 heads,
vocabulary 1024). Job: full training, b=2, s=64, fp32, AdamW (per-tensor loop, the CPU
default), SDPA, 2 steps (the second is reported). Strategies: fsdp2 (reshard after forward
true / false), fsdp1 (FULL_SHARD, SHARD_GRAD_OP, NO_SHARD), ddp (25 MiB buckets),
zero-redundancy, tp (Llama only: GPT-2's fused c_attn cannot be split by heads).

Each case is written to ``tests/data/ranks/<case>.json``::

    {"how": "gpumem-tui measure --nproc N --on cpu ..., torch X, gloo, <tracker>, <date>",
     "model": <config.json dict>, "spec": <TrainingSpec fields>,
     "strategy": {"kind", "world_size", ...options}, "ranks": [{"rank", "peak_bytes", ...}]}

Byte figures are live tensor storage bytes per rank (comparable to torch "allocated").
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RANKS = ROOT / "tests" / "data" / "ranks"
CONFIGS = RANKS / "configs"
JOB = ["--batch", "2", "--seq", "64", "--dtype", "fp32", "--optimizer", "adamw", "--attention", "sdpa",
       "--device", "cpu"]
#: the fields each rank keeps in the saved file
RANK_KEYS = ("rank", "peak_bytes", "peak_phase", "components_bytes", "tracker_categories", "detail_bytes", "phases")

sys.path.insert(0, str(ROOT))


def cases() -> list[tuple[str, str, list[str]]]:
    """(case name, model name, strategy flags) for every saved case."""
    strategies = [
        ("fsdp2-reshard", ["--strategy", "fsdp2", "--reshard-after-forward", "true"]),
        ("fsdp2-noreshard", ["--strategy", "fsdp2", "--reshard-after-forward", "false"]),
        ("fsdp1-full_shard", ["--strategy", "fsdp1", "--sharding-strategy", "FULL_SHARD"]),
        ("fsdp1-shard_grad_op", ["--strategy", "fsdp1", "--sharding-strategy", "SHARD_GRAD_OP"]),
        ("fsdp1-no_shard", ["--strategy", "fsdp1", "--sharding-strategy", "NO_SHARD"]),
        ("ddp", ["--strategy", "ddp", "--bucket-cap-mb", "25"]),
        ("zero-redundancy", ["--strategy", "zero-redundancy"]),
        ("tp", ["--strategy", "tp"]),
    ]
    out = []
    for model in ("llama-tiny", "gpt2-tiny"):
        for world in (2, 4):
            for name, flags in strategies:
                if name == "tp" and model != "llama-tiny":
                    continue
                out.append((f"{model}-{name}-w{world}", model, ["--nproc", str(world)] + flags))
    return out


def training_spec(config_path: Path) -> dict[str, Any]:
    """The estimator's TrainingSpec for :data:`JOB`, as a JSON dict of its fields."""
    from gpumem_tui.estimator.cli_args import spec_from_args
    from gpumem_tui.measure.cli import build_parser

    _, spec = spec_from_args(build_parser().parse_args([str(config_path), *JOB]))
    fields = {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec) if f.name != "warnings"}
    return {k: list(v) if isinstance(v, tuple) else v for k, v in fields.items()}


def measure_case(model: str, flags: list[str]) -> tuple[list[str], dict[str, Any]]:
    """Run the CLI for one case; return (its argument list, its --json output)."""
    config = CONFIGS / f"{model}.json"
    args = ["measure", str(config.relative_to(ROOT)), "--on", "cpu", *flags, *JOB, "--json"]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "gpumem_tui", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{model} {' '.join(flags)}: exit {done.returncode}: {done.stderr.strip()}")
    return args, json.loads(done.stdout)


def write_case(name: str, model: str, flags: list[str]) -> Path:
    """Measure one case and write ``tests/data/ranks/<name>.json``."""
    import torch

    args, data = measure_case(model, flags)
    config_path = CONFIGS / f"{model}.json"
    record = {
        "how": f"gpumem-tui {' '.join(args)}, torch {torch.__version__.split('+')[0]} CPU, gloo, "
               f"{data['tracker']}, {datetime.date.today().isoformat()}",
        "model": json.loads(config_path.read_text()),
        "spec": training_spec(config_path),
        "strategy": data["strategy"],
        "ranks": [{k: rank[k] for k in RANK_KEYS} for rank in data["ranks"]],
    }
    path = RANKS / f"{name}.json"
    path.write_text(json.dumps(record, indent=1) + "\n")
    return path


def main() -> None:
    """Measure the selected cases and write their files."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="only the case names containing this text")
    args = parser.parse_args()
    for name, model, flags in cases():
        if args.only in name:
            path = write_case(name, model, flags)
            peaks = [r["peak_bytes"] for r in json.loads(path.read_text())["ranks"]]
            print(f"{name:<34} peaks per rank {peaks}", flush=True)


if __name__ == "__main__":
    main()
