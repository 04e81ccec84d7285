"""Estimator accuracy against measured ground truth (issue 3, "Accuracy"). Prints its figures.

For every case in ``benchmarks/data/measured_cpu.json`` (written by
``benchmarks/collect_ground_truth.py``: torch MemTracker, live tensor storage bytes, i.e. torch
"allocated"), run ``estimate(arch, spec)`` with ``--device cpu`` and print predicted vs measured
peak, the error in %, and the per-component errors at the peak; then the median |error| and the
worst case (targets: median <= 2 %, worst <= 5 %).

    .venv/bin/python benchmarks/estimator_accuracy.py              # no torch needed
    .venv/bin/python benchmarks/estimator_accuracy.py --live       # re-measure every case first (torch)
    .venv/bin/python benchmarks/estimator_accuracy.py --components # per-component table per case
    .venv/bin/python benchmarks/estimator_accuracy.py --json       # machine-readable
    .venv/bin/python benchmarks/estimator_accuracy.py --random 12 --seed 7   # held-out cases (torch)

``--random N`` draws N cases that are in no file (family, layers, batch, sequence, dtype, optimizer,
task, checkpointing; eager attention on the meta device, or SDPA on the real CPU for narrow
shapes), measures them live and compares: a check that the estimator generalises beyond the
ground-truth file it was tuned on.

Component errors compare the estimator's breakdown at its peak phase with the measured
breakdown at the measured peak; when the two peaks fall in different phases the component rows
compare different moments (flagged with "phase differs").
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DATA = ROOT / "benchmarks" / "data" / "measured_cpu.json"

from gpumem_tui.estimator.estimate import COMPONENT_KEYS as COMPONENTS  # noqa: E402 (after sys.path)

MEDIAN_TARGET = 2.0
WORST_TARGET = 5.0


def _spec(fields: dict[str, Any]) -> Any:
    from gpumem_tui.estimator.spec import TrainingSpec

    kw = dict(fields)
    kw["device"] = "cpu"
    return TrainingSpec(**kw)


def predict(case: dict[str, Any]) -> dict[str, Any]:
    """The estimator's JSON for one ground-truth case (device cpu)."""
    from gpumem_tui.estimator.architecture import load_architecture
    from gpumem_tui.estimator.estimate import estimate

    arch = load_architecture(str(Path(case["config"]) if Path(case["config"]).is_absolute() else ROOT / case["config"]))
    result = estimate(arch, _spec(case["spec"]))
    return result.to_json() if hasattr(result, "to_json") else dict(result)


def compare(case: dict[str, Any], pred: dict[str, Any]) -> dict[str, Any]:
    """Errors of one case: peak error % and per-component (predicted - measured) in bytes and %."""
    meas = case["measured"]
    peak_m, peak_p = int(meas["peak_bytes"]), int(pred["peak_bytes"])
    rows = {}
    for comp in COMPONENTS:
        m = int(meas["components_bytes"].get(comp, 0))
        p = int(pred.get("components_bytes", {}).get(comp, 0))
        rows[comp] = {
            "measured": m,
            "predicted": p,
            "diff": p - m,
            "error_pct": (100.0 * (p - m) / m) if m else (0.0 if p == 0 else None),
        }
    return {
        "id": case["id"],
        "on": case["on"],
        "attention": case["spec"].get("attention"),
        "measured_peak": peak_m,
        "predicted_peak": peak_p,
        "error_pct": 100.0 * (peak_p - peak_m) / peak_m,
        "measured_phase": meas.get("peak_phase"),
        "predicted_phase": pred.get("peak_phase"),
        "components": rows,
        "measured_phases": meas.get("phases", []),
        "predicted_phases": pred.get("phases", []),
    }


def _mib(n: int) -> str:
    return f"{n / 2**20:,.1f}"


_RANDOM_FAMILIES = {
    # catalogue name: (layers key, max sequence)
    "gpt2": ("n_layer", 1024), "gpt2-medium": ("n_layer", 1024), "bert-base-uncased": ("num_hidden_layers", 512),
    "llama-3.2-1b": ("num_hidden_layers", 4096), "llama-3.1-8b": ("num_hidden_layers", 4096),
    "mistral-7b": ("num_hidden_layers", 4096), "qwen2.5-0.5b": ("num_hidden_layers", 4096),
    "qwen2.5-1.5b": ("num_hidden_layers", 4096), "phi-3-mini-4k": ("num_hidden_layers", 4096),
    "gemma-2-2b": ("num_hidden_layers", 4096),
}


def random_cases(n: int, seed: int, config_dir: Path | None = None) -> list[dict[str, Any]]:
    """Measure ``n`` random cases live and return ground-truth records (configs in ``config_dir``,
    a temporary directory by default)."""
    import random
    import tempfile

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import collect_ground_truth as cgt  # noqa: E402

    rng = random.Random(seed)
    tmp = config_dir or Path(tempfile.mkdtemp(prefix="gpumem-accuracy-"))
    out = []
    for i in range(n):
        model = rng.choice(sorted(_RANDOM_FAMILIES))
        key, max_seq = _RANDOM_FAMILIES[model]
        encoder = model.startswith("bert")
        task = rng.choice(["train", "train", "train", "lora"] + ([] if encoder else ["inference"]))
        if encoder and task == "lora":
            task = "train"
        spec: dict[str, Any] = {
            "task": task,
            "batch": rng.choice([1, 2, 3, 4, 6, 8]),
            "seq": rng.choice([s for s in (64, 128, 200, 256, 384, 512, 1000, 1024, 2048) if s <= max_seq]),
            "dtype": rng.choice(["fp32", "bf16", "bf16", "fp16"]),
        }
        if task == "train":
            spec["optimizer"] = rng.choice(["adamw", "adamw", "adam", "sgd", "sgd-momentum"])
            spec["grad_ckpt"] = rng.choice(["none", "none", "full"])
            spec["grad_accum"] = rng.choice([1, 1, 1, 2, 4])
            spec["keep_grads"] = rng.random() < 0.15
            if spec["optimizer"] in ("adamw", "adam") and rng.random() < 0.25:
                spec["optimizer_impl"] = "foreach"
        if task == "lora":
            spec["lora_rank"] = rng.choice([4, 8, 16, 64])
            spec["lora_targets"] = rng.choice([("q", "v"), ("q", "k", "v", "o"), ("q", "k", "v", "o", "gate", "up", "down")])
        overrides: dict[str, Any] = {key: rng.choice([1, 2, 3, 4])}
        on = "meta"
        if rng.random() < 0.3:
            # real CPU, SDPA's real kernel: narrow widths so the run is fast and fits in RAM
            on = "cpu"
            spec["attention"] = "eager" if model.startswith("gemma") else "sdpa"
            spec["seq"] = min(spec["seq"], 512)
            if model.startswith("gpt2"):
                overrides.update({"n_embd": 256, "n_head": 4, "vocab_size": rng.choice([2048, 8192])})
            else:
                overrides.update({"hidden_size": 256, "intermediate_size": 704, "num_attention_heads": 4,
                                  "vocab_size": rng.choice([2048, 8192])})
                if not encoder:
                    overrides["num_key_value_heads"] = rng.choice([1, 2, 4])
                if model.startswith(("gemma", "llama")):
                    overrides["head_dim"] = 64
                overrides["pad_token_id"] = 0  # the catalogue's pad id may lie beyond the shrunken vocabulary
            if task == "train" and spec["dtype"] != "fp32" and rng.random() < 0.4:
                spec["mixed_precision"] = True
            if task == "train" and rng.random() < 0.2:
                spec["optimizer"] = "adafactor"  # CPU only: it calls .item()
                spec.pop("optimizer_impl", None)
            elif task == "train" and spec.get("optimizer") in ("adamw", "adam") and rng.random() < 0.3:
                spec["optimizer_impl"] = "fused"  # fused CPU kernel: real CPU only
        tag = f"{on}-{spec.get('attention', 'eager')}" + ("-amp" if spec.get("mixed_precision") else "")
        case_id = (f"random{seed}-{i:02d}-{model}-L{overrides[key]}-{spec['dtype']}-b{spec['batch']}-s{spec['seq']}"
                   f"-{task}-{tag}")
        out.append(cgt.measure_case((case_id, model, overrides, spec, on), directory=tmp))
        print(f"measured {case_id}", file=sys.stderr, flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="estimator accuracy vs measured ground truth")
    parser.add_argument("--data", type=Path, default=DATA, help="ground-truth JSON (default benchmarks/data/measured_cpu.json)")
    parser.add_argument("--live", action="store_true", help="re-measure every case with torch before comparing")
    parser.add_argument("--only", default=None, help="cases whose id contains this text")
    parser.add_argument("--components", action="store_true", help="print the per-component table of every case")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.add_argument("--random", type=int, default=0, metavar="N", help="measure N random held-out cases live (torch)")
    parser.add_argument("--seed", type=int, default=0, help="seed of --random (default 0)")
    parser.add_argument("--save", type=Path, default=None,
                        help="with --random: write the measured cases as a ground-truth file (configs beside it); "
                        "with --live: write the re-measured cases back")
    args = parser.parse_args(argv)

    try:
        data = json.loads(args.data.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        print(f"estimator_accuracy: cannot read {args.data}: {exc}", file=sys.stderr)
        return 2
    cases = [c for c in data["cases"] if args.only is None or args.only in c["id"]]
    if args.random:
        cfg_dir = args.save.parent / "configs" / args.save.stem if args.save else None
        cases = random_cases(args.random, args.seed, cfg_dir)
        if args.save:
            import torch
            import transformers

            args.save.write_text(json.dumps({
                "description": f"Held-out ground truth: {args.random} random cases (seed {args.seed}) drawn by "
                "benchmarks/estimator_accuracy.py --random, measured like measured_cpu.json.",
                "torch": torch.__version__, "transformers": transformers.__version__, "cases": cases,
            }, indent=1) + "\n", encoding="utf-8")
            data = json.loads(args.save.read_text(encoding="utf-8"))
    elif args.live:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        import collect_ground_truth as cgt  # noqa: E402

        fresh = []
        for c in cases:
            spec = dict(c["spec"])
            cfg = Path(c["config"]) if Path(c["config"]).is_absolute() else ROOT / c["config"]
            fresh.append(cgt.measure_case((c["id"], c["model"], c["overrides"], spec, c["on"]), directory=cfg.parent))
        cases = fresh
        if args.save:
            data["cases"] = [next((f for f in fresh if f["id"] == c["id"]), c) for c in data["cases"]]
            args.save.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")

    results = []
    failures = []
    for case in cases:
        try:
            pred = predict(case)
        except Exception as exc:  # a benchmark reports every case, even one the estimator rejects
            failures.append((case["id"], f"{type(exc).__name__}: {exc}"))
            continue
        results.append(compare(case, pred))

    errors = [abs(r["error_pct"]) for r in results]
    summary = {
        "cases": len(results),
        "families": sorted({c["model"].split("-")[0].split(".")[0] for c in cases}),
        "median_abs_error_pct": statistics.median(errors) if errors else None,
        "worst_abs_error_pct": max(errors) if errors else None,
        "worst_case": max(results, key=lambda r: abs(r["error_pct"]))["id"] if results else None,
        "targets": {"median_pct": MEDIAN_TARGET, "worst_pct": WORST_TARGET},
        "failures": failures,
    }
    if args.json:
        print(json.dumps({"summary": summary, "results": results}, indent=1))
        return 0

    print(f"ground truth: {args.data.relative_to(ROOT) if args.data.is_relative_to(ROOT) else args.data} "
          f"(torch {data.get('torch')}, transformers {data.get('transformers')}); figures in MiB (2^20 B), "
          "comparable to torch allocated; estimator with --device cpu")
    print()
    w = max([42] + [len(r["id"]) + 2 for r in results])
    head = f"{'case':<{w}}{'on':<6}{'measured':>11}{'predicted':>11}{'error':>9}  peak phase (measured / predicted)"
    print(head)
    print("-" * len(head))
    for r in results:
        flag = "" if r["measured_phase"] == r["predicted_phase"] else "  phase differs"
        print(f"{r['id']:<{w}}{r['on']:<6}{_mib(r['measured_peak']):>11}{_mib(r['predicted_peak']):>11}"
              f"{r['error_pct']:>+8.2f}%  {r['measured_phase']} / {r['predicted_phase']}{flag}")
        if args.components:
            for comp, row in r["components"].items():
                if row["measured"] == 0 and row["predicted"] == 0:
                    continue
                pct = "n/a" if row["error_pct"] is None else f"{row['error_pct']:+.1f}%"
                print(f"    {comp:<26}{_mib(row['measured']):>11}{_mib(row['predicted']):>11}{pct:>9}"
                      f"  diff {row['diff']:+,} B")
    for case_id, msg in failures:
        print(f"{case_id}: estimator failed: {msg}")
    print()
    if errors:
        med, worst = summary["median_abs_error_pct"], summary["worst_abs_error_pct"]
        print(f"cases: {len(results)} from {len(summary['families'])} families ({', '.join(summary['families'])})")
        print(f"median |error| of peak_bytes: {med:.2f} %  (target <= {MEDIAN_TARGET} %: {'met' if med <= MEDIAN_TARGET else 'NOT met'})")
        print(f"worst  |error| of peak_bytes: {worst:.2f} %  ({summary['worst_case']}; target <= {WORST_TARGET} %: "
              f"{'met' if worst <= WORST_TARGET else 'NOT met'})")
        # per-component summary: median |error| over cases where the component was measured > 0
        print("per-component |error| at the peak (cases where measured > 0 and both peaks in the same phase):")
        for comp in COMPONENTS:
            rows = [(abs(r["components"][comp]["error_pct"]), r["components"][comp]["diff"], r["id"]) for r in results
                    if r["components"][comp]["measured"] > 0 and r["measured_phase"] == r["predicted_phase"]]
            if rows:
                worst_err, worst_diff, worst_id = max(rows)
                print(f"    {comp:<24} median {statistics.median(e for e, _, _ in rows):6.2f} %  worst {worst_err:7.2f} %"
                      f" ({worst_diff / 2**20:+,.1f} MiB)  over {len(rows):>2} cases  (worst: {worst_id})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
