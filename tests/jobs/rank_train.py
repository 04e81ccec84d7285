"""A tiny real distributed training job, as a user writes it, with the gpumem-tui probe:
run by torchrun (``python -m torch.distributed.run --nproc-per-node 2 ...``) on the CPU over
gloo; used by tests/test_rank_job_e2e.py.

    python -m torch.distributed.run --nproc-per-node 2 --master-port PORT \
        tests/jobs/rank_train.py ddp|fsdp2 --probe-dir DIR [--steps N]

Each rank: a 2-layer GPT-2 (hidden 64, 2 heads, vocabulary 2048, fp32, ``use_cache=False``),
wrapped in DDP or FSDP2 ``fully_shard`` (each block, then the root), AdamW, the probe attached
to the WRAPPED model, ``steps`` plain steps (forward with labels, ``loss.backward()``,
``optimizer.step()``, ``optimizer.zero_grad()``), b=2, s=64, each rank its own tokens.
"""

from __future__ import annotations

import argparse
import os
import warnings

BATCH, SEQ, VOCAB = 2, 64, 2048


def _model(torch):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=VOCAB, n_positions=SEQ, use_cache=False)
    return GPT2LMHeadModel(config)


def _wrap(model, strategy: str, torch):
    if strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model)
    from torch.distributed.fsdp import fully_shard

    for block in model.transformer.h:
        fully_shard(block)
    fully_shard(model)
    return model


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("strategy", choices=("ddp", "fsdp2"))
    parser.add_argument("--probe-dir", required=True)
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    warnings.filterwarnings("ignore", category=FutureWarning)

    import torch
    import torch.distributed as dist

    import gpumem_tui.probe

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = _wrap(_model(torch), args.strategy, torch)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    probe = gpumem_tui.probe.attach(model, optimizer, batch=BATCH, seq=SEQ, task="train",
                                    directory=args.probe_dir, interval=0.05)
    generator = torch.Generator().manual_seed(1 + rank)
    for _ in range(args.steps):
        ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=generator)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    probe.close()
    dist.barrier()
    dist.destroy_process_group()
    print(f"rank {rank} pid {os.getpid()} done", flush=True)


if __name__ == "__main__":
    main()
    # Not part of the training loop the test models, and after everything it checks (the probe
    # closed its stream above, the process group is gone): the interpreter's shutdown would tear
    # down torch's and transformers' ~2500 modules object by object: 1.2-1.9 s of CPU per rank
    # measured, 0.2 s with the freeze (gpumem_tui/support/shutdown.py).
    from gpumem_tui.support.shutdown import leave_heap_to_os

    leave_heap_to_os()
