"""The built-in demo training job: a small GPT-2-style causal LM trained on random tokens.

Run as a child process (torch is imported here, never in the dashboard)::

    python -m gpumem_tui.demo.job --steps 20 --probe-dir DIR

It builds ``transformers.GPT2LMHeadModel`` from a small ``GPT2Config`` (random init, no
downloads; ``--model builtin`` or a missing transformers uses an equivalent hand-written
GPT-2 block stack with the same parameter count), trains it with AdamW on random tokens on
CUDA when there is a GPU and on the CPU otherwise, and is instrumented by
``gpumem_tui.probe`` so the dashboard shows its memory and phases. The default size takes
about 0.2-0.5 s per step on two CPU cores and peaks at about 200 MiB of live tensors
(fp32, b=4, s=128, 4 layers, h=256, V=8192: 5.3 M parameters).

SIGTERM / SIGINT end the job after the current step, closing the probe cleanly; while it
starts (importing torch or transformers, building the model and its optimizer) they end it at
once, with exit code 0 and no probe stream, instead of after seconds of imports.
Exit codes: 0 done, 1 runtime failure, 2 bad arguments (one line on stderr).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import signal
import sys
import time
from collections.abc import Sequence
from typing import Any

from gpumem_tui.support.cli_support import InputError, OneLineParser, non_negative_seconds, positive_int, positive_seconds
from gpumem_tui.support.import_gc import import_out_of_collector
from gpumem_tui.support.text import print_error

DEFAULTS = {"vocab": 8192, "layers": 4, "hidden": 256, "heads": 4, "batch": 4, "seq": 128}


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="python -m gpumem_tui.demo.job", description="Built-in demo training job.")
    parser.add_argument("--steps", type=int, default=0, help="training steps (0: until stopped) [0]")
    parser.add_argument("--probe-dir", default=None, help="where the probe writes (default: the probe default)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--model", choices=("auto", "hf", "builtin"), default="auto",
                        help="hf: transformers GPT2LMHeadModel; builtin: the hand-written equivalent")
    parser.add_argument("--batch", type=positive_int, default=DEFAULTS["batch"])
    parser.add_argument("--seq", type=positive_int, default=DEFAULTS["seq"])
    parser.add_argument("--layers", type=positive_int, default=DEFAULTS["layers"])
    parser.add_argument("--hidden", type=positive_int, default=DEFAULTS["hidden"])
    parser.add_argument("--heads", type=positive_int, default=DEFAULTS["heads"])
    parser.add_argument("--vocab", type=positive_int, default=DEFAULTS["vocab"])
    parser.add_argument("--pause", type=non_negative_seconds, default=0.0, help="idle seconds between steps [0]")
    parser.add_argument("--threads", type=positive_int, default=None, help="torch CPU threads")
    parser.add_argument("--nice", type=int, default=0, help="niceness increment (lower CPU priority)")
    parser.add_argument("--parent-pid", type=int, default=None,
                        help="stop when this process is no longer the parent (the dashboard died)")
    parser.add_argument("--no-probe", action="store_true", help="run without the probe (benchmarks)")
    parser.add_argument("--probe-interval", type=positive_seconds, default=0.1,
                        help="seconds between the probe's periodic samples [0.1]; longer than a step "
                             "shows what the per-phase high-water marks add")
    parser.add_argument("--keep-output", action="store_true",
                        help="keep the model output referenced through backward and the optimizer step, "
                        "as many hand-written loops do (the probe detects and publishes it)")
    parser.add_argument("--quiet", action="store_true", help="no per-step line on stdout")
    return parser


def gpt2_config_dict(args: argparse.Namespace) -> dict[str, Any]:
    """The GPT-2 config of the demo model (the fields ``transformers.GPT2Config`` takes)."""
    return {
        "model_type": "gpt2",
        "vocab_size": args.vocab,
        "n_positions": max(args.seq, 1),
        "n_embd": args.hidden,
        "n_layer": args.layers,
        "n_head": args.heads,
        "bos_token_id": 0,
        "eos_token_id": 0,
        "tie_word_embeddings": True,
        # GPT2Config's defaults, stated: the builtin model uses the same (the estimator reads
        # them; attention dropout decides the CPU SDPA kernel)
        "attn_pdrop": 0.1,
        "resid_pdrop": 0.1,
        "embd_pdrop": 0.1,
    }


def _build_hf(args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    # before any tensor of the model exists: what the import made is frozen (support/import_gc);
    # only a speed-up: where that module path is not there, the import below says what is missing
    with contextlib.suppress(ImportError):
        import_out_of_collector("transformers", "transformers.models.gpt2.modeling_gpt2")
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(**{k: v for k, v in gpt2_config_dict(args).items() if k != "model_type"})
    return GPT2LMHeadModel(config), config.to_dict()


def _build_builtin(args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    import torch
    from torch import nn

    class Block(nn.Module):
        """A GPT-2 block: pre-LayerNorm attention and a 4h GELU MLP (same parameters as HF)."""

        def __init__(self, h: int, heads: int) -> None:
            super().__init__()
            self.ln_1 = nn.LayerNorm(h)
            self.attn = nn.Linear(h, 3 * h)
            self.proj = nn.Linear(h, h)
            self.ln_2 = nn.LayerNorm(h)
            self.fc = nn.Linear(h, 4 * h)
            self.out = nn.Linear(4 * h, h)
            self.heads = heads
            self.drop = nn.Dropout(0.1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, s, h = x.shape
            q, k, v = self.attn(self.ln_1(x)).split(h, dim=2)
            q, k, v = (t.view(b, s, self.heads, h // self.heads).transpose(1, 2) for t in (q, k, v))
            y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=0.1 if self.training else 0.0)
            x = x + self.drop(self.proj(y.transpose(1, 2).reshape(b, s, h)))
            return x + self.drop(self.out(_gelu_new(self.fc(self.ln_2(x)))))

    def _gelu_new(x: torch.Tensor) -> torch.Tensor:
        # GPT-2's tanh approximation of GELU written op by op, as transformers' "gelu_new"
        # runs it (Hendrycks & Gimpel 2016, arXiv 1606.08415, Sec. 2): its saved
        # intermediates are what the estimator counts (a fused F.gelu keeps 3 bsf fewer)
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))

    class TinyGPT(nn.Module):
        def __init__(self, cfg: dict[str, Any]) -> None:
            super().__init__()
            h = cfg["n_embd"]
            self.wte = nn.Embedding(cfg["vocab_size"], h)
            self.wpe = nn.Embedding(cfg["n_positions"], h)
            self.drop = nn.Dropout(0.1)
            self.blocks = nn.ModuleList(Block(h, cfg["n_head"]) for _ in range(cfg["n_layer"]))
            self.ln_f = nn.LayerNorm(h)

        def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None) -> Any:
            pos = torch.arange(input_ids.shape[1], device=input_ids.device)
            x = self.drop(self.wte(input_ids) + self.wpe(pos))
            for block in self.blocks:
                x = block(x)
            logits = self.ln_f(x) @ self.wte.weight.t()  # tied LM head, as GPT-2
            if labels is None:
                return logits
            # shift the labels, not the logits (as transformers' causal-LM loss): no copy of
            # the logits, the last position ignored
            shifted = nn.functional.pad(labels, (0, 1), value=-100)[:, 1:]
            loss = nn.functional.cross_entropy(
                logits.float().view(-1, logits.shape[-1]), shifted.reshape(-1), ignore_index=-100
            )
            return {"loss": loss, "logits": logits}

    cfg = gpt2_config_dict(args)
    return TinyGPT(cfg), cfg


def training_loss(model: Any, tokens: Any, hf: bool) -> Any:
    """The loss of one forward on ``tokens`` (shape (batch, seq), labels = the tokens), with
    the model output released before it is returned.

    This is the training step the estimator models (and ``gpumem-tui measure`` runs), the
    same as Hugging Face ``Trainer.training_step`` (``compute_loss`` returns only the loss):
    keeping the output referenced through ``backward()`` and ``optimizer.step()`` pins its
    ``b x s x V`` logits (16 MiB at the demo's default size, 9 % of its peak) and, with
    ``use_cache``, a KV cache of every layer. A training forward needs no KV cache, so
    ``use_cache=False`` is passed to the HF model (as ``gpumem-tui measure`` does).
    """
    out = model(input_ids=tokens, labels=tokens, use_cache=False) if hf else model(
        input_ids=tokens, labels=tokens
    )
    loss = out["loss"] if isinstance(out, dict) else out.loss
    del out  # the logits go now; the loss graph keeps only what backward needs
    return loss


def _pick_device(choice: str) -> str:
    import torch

    if choice == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda: torch sees no CUDA device")
    if choice == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return choice


def _use_hf(choice: str) -> bool:
    """Whether ``--model`` ``choice`` builds the transformers model: hf, or auto when transformers
    imports (it is imported here, the seconds of it included)."""
    if choice != "auto":
        return choice == "hf"
    try:
        import_out_of_collector("transformers")
    except ImportError:
        return False
    return True


def _load(args: argparse.Namespace) -> tuple[Any, ...] | None:
    """Import torch, build the model and its optimizer: ``(torch, device, use_hf, model,
    config, optimizer)``, or None when the job is not to run (its parent is already gone)."""
    if args.parent_pid is not None and os.getppid() != args.parent_pid:
        return None  # started by a process that is already gone: nothing to show to anyone
    if args.nice > 0:
        try:
            os.nice(args.nice)
        except OSError:
            pass

    # the collector paused for torch's import, then its objects frozen: later passes (the
    # seconds of torch._dynamo the optimizer imports, training) no longer walk them
    import_out_of_collector("torch")
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = _pick_device(args.device)
    use_hf = _use_hf(args.model)
    model, config = _build_hf(args) if use_hf else _build_builtin(args)
    model.to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    return torch, device, use_hf, model, config, optimizer


def _end_now(code: int) -> None:
    """End the process at once with exit ``code`` (``os._exit``), the standard streams flushed.

    For a stop that arrives while the job loads: nothing is attached or written yet (no probe
    stream, no step line), so there is nothing to close, and an exception raised into an
    import in progress is not an option (a library that catches it goes on half-imported:
    seen here, torch interrupted, then transformers failing to import GPT-2)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, RuntimeError):  # closed, or a write the signal interrupted
            pass
    os._exit(code)


def run(args: argparse.Namespace) -> int:
    """Train until ``args.steps`` steps are done (or forever) or a stop signal arrives."""
    stop = {"now": False, "loading": True}

    def _request_stop(signum: int, frame: Any) -> None:
        stop["now"] = True
        if stop["loading"]:
            # the dashboard quit in its first seconds: end now, not after seconds of imports
            _end_now(0)

    signal.signal(signal.SIGTERM, _request_stop)
    signal.signal(signal.SIGINT, _request_stop)
    loaded = _load(args)
    stop["loading"] = False  # from here a stop ends the job after its current step
    if loaded is None:
        return 0
    torch, device, use_hf, model, config, optimizer = loaded
    probe = None
    if not args.no_probe:
        import gpumem_tui.probe

        probe = gpumem_tui.probe.attach(
            model, optimizer, batch=args.batch, seq=args.seq, task="train",
            config=config, directory=args.probe_dir, interval=args.probe_interval,
            extra={"model_name": "gpumem-tui demo GPT-2", "demo_model": "hf" if use_hf else "builtin",
                   "use_cache": False,  # the forward below passes use_cache=False
                   # the builtin model calls SDPA (HF publishes config._attn_implementation itself)
                   **({} if use_hf else {"attention": "sdpa"})},
        )
    step = 0
    try:
        while not stop["now"] and (args.steps <= 0 or step < args.steps):
            if args.parent_pid is not None and os.getppid() != args.parent_pid:
                break  # the dashboard that started us is gone: do not train on as an orphan
            started = time.perf_counter()
            tokens = torch.randint(0, args.vocab, (args.batch, args.seq), device=device)
            if args.keep_output:  # outputs = model(...); outputs.loss.backward(); ...
                out = model(input_ids=tokens, labels=tokens, use_cache=False) if use_hf else model(
                    input_ids=tokens, labels=tokens
                )
                loss = out["loss"] if isinstance(out, dict) else out.loss
            else:
                out = None
                loss = training_loss(model, tokens, use_hf)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            del out, loss, tokens
            step += 1
            if not args.quiet:
                print(f"step {step} {time.perf_counter() - started:.3f}s", flush=True)
            if args.pause and not stop["now"]:
                time.sleep(args.pause)
    finally:
        if probe is not None:
            probe.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    try:
        args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    except InputError as exc:
        print_error("demo_job", exc)
        return 2
    if args.hidden % args.heads:
        print(f"demo_job: --hidden {args.hidden} is not divisible by --heads {args.heads}", file=sys.stderr)
        return 2
    try:
        return run(args)
    except ImportError as exc:
        print(f"demo_job: needs torch ({exc}); install gpumem-tui[torch]", file=sys.stderr)
        return 1
    except RuntimeError as exc:
        print_error("demo_job", exc)
        return 1


if __name__ == "__main__":
    exit_code = main()
    from gpumem_tui.support.shutdown import leave_heap_to_os

    leave_heap_to_os()  # the probe is closed: torch's heap goes to the OS, not freed one by one
    raise SystemExit(exit_code)
