"""The estimator against published measured peaks (../shared/validation/published_measured.csv).

Run: .venv/bin/python benchmarks/published_validation.py [path/to/published_measured.csv]

Each row is compared like with like, by the kind of figure it reports:
- "nvml used" rows (nvidia-smi): the estimate's allocated peak + allocator reserve + CUDA
  context. The context is the one measured in the same source (its "cuda context only" row,
  1343 MiB on that V100 box); that row is the calibration and is not scored. The error with the
  estimator's default context (500 MiB, lazy loading) is printed too.
- "max_memory_allocated" / "peak active memory" rows: the allocated peak only (no context, no
  reserve).
Rows whose setup the estimator does not model (torch.compile, chunked cross-entropy, activation
offloading, optimizer-in-backward, unpacked variable-length data, an unpublished prompt length)
are printed with the reason and left out of the median. Beside each row: accelerate's rule
(16 B/param fp32, 8 B/param 16-bit for training, weights only for inference, no activations).
"""

from __future__ import annotations

import csv
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from gpumem_tui.estimator import components as C
from gpumem_tui.estimator.architecture import ModelArchitecture, load_architecture
from gpumem_tui.estimator.estimate import estimate
from gpumem_tui.estimator.quantization import QuantFormat
from gpumem_tui.estimator.spec import TrainingSpec

from gpu_accuracy import shared_dir  # noqa: E402 -- benchmarks/ is on sys.path when run as a script

CSV = shared_dir() / "validation" / "published_measured.csv"
GiB = 1 << 30
MiB = 1 << 20


@dataclass(frozen=True)
class Row:
    """How one CSV row maps onto the estimator (``spec`` None = not modelled, ``why`` says why)."""

    expect: str  # substring of the CSV's task column, to catch a reordered file
    model: str
    kind: str  # "nvml" | "allocated"
    spec: TrainingSpec | None
    why: str = ""
    weights_only: bool = False
    context_only: bool = False


def _bert(**kw) -> TrainingSpec:  # noqa: ANN003
    # the guide's own stack (its nvidia-smi output is dated 2022-01-11, so torch <= 1.10): the
    # hf-trainer-2022 recipe -- HF AdamW loop (per tensor), model.zero_grad() with torch 1.x's
    # set_to_none=False keeps gradients allocated, softmax keeps its input (torch <= 1.10);
    # eager BERT, dropout on, on a V100
    base = dict(seq=512, attention="eager", optimizer="adamw", recipe="hf-trainer-2022", device="cuda", dtype="fp32")
    base.update(kw)
    return TrainingSpec(**base)  # type: ignore[arg-type]


def _amp(**kw) -> TrainingSpec:  # noqa: ANN003
    return _bert(dtype="fp16", mixed_precision=True, **kw)


_TT = dict(batch=2, seq=4096, dtype="bf16", attention="flash", optimizer="adamw", optimizer_impl="fused",
           device="cuda")
_OCTO = dict(task="inference", batch=1, dtype="bf16", attention="eager", device="cuda")
_LOAD_IN_4BIT = QuantFormat("fp4", double_quant=False, compute_dtype="fp32")

ROWS: list[Row] = [
    Row("cuda context only", "bert-large-uncased", "nvml", None, "calibration: the source's CUDA context", context_only=True),
    Row("weights only", "bert-large-uncased", "nvml", _bert(batch=1), weights_only=True),
    Row("full FT", "bert-large-uncased", "nvml", _bert(batch=4)),
    Row("full FT", "bert-large-uncased", "nvml", _bert(batch=1, grad_accum=4)),
    Row("full FT", "bert-large-uncased", "nvml", _bert(batch=1, grad_accum=4, grad_ckpt="full")),
    Row("full FT", "bert-large-uncased", "nvml", _amp(batch=4)),
    Row("full FT", "bert-large-uncased", "nvml", _amp(batch=1, grad_accum=4, grad_ckpt="full")),
    Row("full FT", "bert-large-uncased", "nvml", _bert(batch=4, optimizer="adafactor")),
    Row("full FT", "bert-large-uncased", "nvml", _amp(batch=1, grad_accum=4, grad_ckpt="full", optimizer="adafactor")),
    Row("full FT", "bert-large-uncased", "nvml", _bert(batch=4, optimizer="adamw-8bit")),
    Row("full FT", "bert-large-uncased", "nvml", _amp(batch=1, grad_accum=4, grad_ckpt="full", optimizer="adamw-8bit")),
    Row("unpacked", "llama-3.2-3b", "allocated", None, "variable-length unpacked batches (lengths not published)"),
    Row("packed dataset", "llama-3.2-3b", "allocated", TrainingSpec(**_TT)),  # type: ignore[arg-type]
    Row("torch.compile", "llama-3.2-3b", "allocated", None, "torch.compile fuses kernels (not modelled)"),
    Row("chunked cross-entropy", "llama-3.2-3b", "allocated", None, "torch.compile + chunked cross-entropy"),
    Row("activation checkpointing", "llama-3.2-3b", "allocated", None, "torch.compile + chunked cross-entropy"),
    Row("optimizer step fused", "llama-3.2-3b", "allocated", None, "optimizer-in-backward + torch.compile"),
    Row("activation offloading", "llama-3.2-3b", "allocated", None, "activation offloading to the CPU"),
    Row("8-bit AdamW", "llama-3.2-3b", "allocated", None, "paged 8-bit AdamW in backward + offloading"),
    Row("LoRA", "llama-3.2-3b", "allocated", None, "LoRA with offloading + compile + chunked CE"),
    Row("QLoRA", "llama-3.2-3b", "allocated", None, "QLoRA with offloading + compile + chunked CE"),
    Row("max_new_tokens=60", "starcoder", "allocated", TrainingSpec(seq=80, **_OCTO)),  # type: ignore[arg-type]
    Row("load_in_8bit", "starcoder", "allocated", TrainingSpec(seq=80, quant="int8", **_OCTO)),  # type: ignore[arg-type]
    # load_in_4bit=True with BitsAndBytesConfig's defaults (transformers utils/quantization_config.py):
    # bnb_4bit_quant_type="fp4", no double quantization, bnb_4bit_compute_dtype None -> float32
    Row("load_in_4bit", "starcoder", "allocated", TrainingSpec(seq=80, quant="fp4", quant_format=_LOAD_IN_4BIT,
                                                               **_OCTO)),  # type: ignore[arg-type]
    Row("eager attention", "starcoder", "allocated", None, "prompt length not published ('several thousand')"),
    Row("SDPA flash", "starcoder", "allocated", None, "prompt length not published ('several thousand')"),
]


def _arch(name: str) -> ModelArchitecture:
    arch = load_architecture(name)
    if name.startswith("bert"):
        arch = arch.with_head("classification", 2)  # BertForSequenceClassification
    return arch


def accelerate_rule(arch: ModelArchitecture, spec: TrainingSpec, weights_only: bool) -> int:
    """accelerate estimate-memory: bytes/param by dtype; training 4x (Adam), no activations."""
    per = 4 if spec.dtype == "fp32" or spec.mixed_precision else 2
    if spec.task == "inference" or weights_only:
        if spec.quant == "int8":
            per = 1
        elif spec.quant in ("nf4", "fp4"):
            per = 0.5
        return int(per * arch.total_params)
    return int(4 * per * arch.total_params)


def main(path: Path = CSV) -> None:
    with path.open(newline="", encoding="utf-8") as fh:
        records = list(csv.DictReader(fh))
    if len(records) != len(ROWS):
        print(f"WARNING: {len(records)} rows in {path}, mapping knows {len(ROWS)}")
    context = C.CUDA_CONTEXT_BYTES
    for rec, row in zip(records, ROWS):
        if row.context_only:
            context = int(round(float(rec["measured_gb"]) * GiB / MiB)) * MiB
    print(f"CUDA context for the nvml rows: {context / MiB:.0f} MiB (measured in the same source); "
          f"estimator default {C.CUDA_CONTEXT_BYTES / MiB:.0f} MiB")
    print(f"{'#':>2} {'model':<19}{'setup':<44}{'figure':<10}{'measured':>9}{'estimate':>10}{'err':>8}"
          f"{'err@500':>9}{'accel.':>8}{'err':>8}")
    errors: list[float] = []
    default_ctx_errors: list[float] = []
    accel_errors: list[float] = []
    for i, (rec, row) in enumerate(zip(records, ROWS)):
        measured = float(rec["measured_gb"]) * GiB
        if row.expect.lower() not in rec["task"].lower():
            print(f"{i:>2} row text {rec['task']!r} does not match the mapping ({row.expect!r}): skipped")
            continue
        setup = f"{rec['task'][:24]} b={rec['batch']} {rec['dtype']} {rec['optimizer'][:10]}"
        if row.spec is None:
            print(f"{i:>2} {row.model:<19}{setup[:43]:<44}{row.kind:<10}{measured / GiB:>9.2f}"
                  f"{'-':>10}{'':>8}{'':>9}{'':>8}{'':>8}  not scored: {row.why}")
            continue
        arch = _arch(row.model)
        spec = row.spec
        if row.weights_only:
            allocated = C.parameter_bytes(arch, spec)
            reserve = 0
        else:
            est = estimate(arch, spec)
            allocated = est.allocated_peak_bytes
            reserve = est.components_bytes["allocator_reserve"]
        if row.kind == "nvml":
            predicted = allocated + reserve + context
            predicted_default = allocated + reserve + C.CUDA_CONTEXT_BYTES
        else:
            predicted = predicted_default = allocated
        accel = accelerate_rule(arch, spec, row.weights_only)
        err = (predicted - measured) / measured * 100
        err_default = (predicted_default - measured) / measured * 100
        accel_err = (accel - measured) / measured * 100
        errors.append(abs(err))
        default_ctx_errors.append(abs(err_default))
        accel_errors.append(abs(accel_err))
        print(f"{i:>2} {row.model:<19}{setup[:43]:<44}{row.kind:<10}{measured / GiB:>9.2f}{predicted / GiB:>10.2f}"
              f"{err:>+7.1f}%{err_default:>+8.1f}%{accel / GiB:>8.2f}{accel_err:>+7.1f}%")
    if errors:
        print(f"scored rows: {len(errors)} of {len(records)}; median |error|: estimator {statistics.median(errors):.1f}% "
              f"(with the default 500 MiB context: {statistics.median(default_ctx_errors):.1f}%), "
              f"accelerate's rule {statistics.median(accel_errors):.1f}%; worst estimator {max(errors):.1f}%")
    print("GiB = 2^30 bytes; 'nvml' rows include context + allocator reserve, 'allocated' rows tensor bytes only.")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else CSV)
