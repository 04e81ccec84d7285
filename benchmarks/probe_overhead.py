"""Step-time overhead of the probe on the CPU demo job (prints figures; not a test).

    .venv/bin/python benchmarks/probe_overhead.py [--steps 8] [--rounds 3] [--model hf|builtin]

Runs the demo model (``gpumem_tui.demo.job``, default size: GPT-2 style, 4 layers, h=256,
V=8192, b=4, s=128, AdamW, fp32, CPU) in one process, alternating blocks of ``--steps`` steps
without the probe, with the full probe (hooks + live-tensor tracker + sampler thread), and with
the probe minus its tracker (``track_tensors=False``), ``--rounds`` times, so that load from
other processes hits all three alike. Prints the median step time of each and the ratios to
"without", the stream's bytes per step, and the one-time cost of ``attach``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--model", choices=("hf", "builtin"), default="hf")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()

    import torch

    import gpumem_tui.probe
    from gpumem_tui.demo import job as demo_job

    if args.threads:
        torch.set_num_threads(args.threads)
    job_args = demo_job.build_parser().parse_args(["--model", args.model])
    torch.manual_seed(0)
    model, config = demo_job._build_hf(job_args) if args.model == "hf" else demo_job._build_builtin(job_args)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step() -> tuple[float, float]:
        started, cpu = time.perf_counter(), time.process_time()
        tokens = torch.randint(0, job_args.vocab, (job_args.batch, job_args.seq))
        out = model(input_ids=tokens, labels=tokens)
        loss = out["loss"] if isinstance(out, dict) else out.loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return time.perf_counter() - started, time.process_time() - cpu

    for _ in range(2):  # warm up: lazy optimizer state, allocator, kernels, torch._dynamo import
        step()
    times: dict[str, list[float]] = {"without probe": [], "probe (tracker on)": [], "probe (tracker off)": []}
    cpu_times: dict[str, list[float]] = {name: [] for name in times}
    attach_cost: list[float] = []
    written: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.rounds):
            for name in times:
                probe = None
                if name != "without probe":
                    t0 = time.perf_counter()
                    probe = gpumem_tui.probe.attach(
                        model, opt, batch=job_args.batch, seq=job_args.seq, config=config, directory=tmp,
                        track_tensors=name == "probe (tracker on)",
                    )
                    attach_cost.append(time.perf_counter() - t0)
                    step()  # first step under a fresh probe: not timed
                    size0 = probe.path.stat().st_size
                for _ in range(args.steps):
                    wall, cpu = step()
                    times[name].append(wall)
                    cpu_times[name].append(cpu)
                if probe is not None:
                    written.append((probe.path.stat().st_size - size0) / args.steps)
                    probe.close()

    print(f"demo model ({args.model}): {sum(p.numel() for p in model.parameters()) / 1e6:.2f} M params, "
          f"b={job_args.batch} s={job_args.seq}, torch threads {torch.get_num_threads()}, "
          f"{args.rounds} rounds x {args.steps} steps")
    print("  (CPU time = this process's CPU seconds per step, probe thread included; less sensitive to")
    print("   other processes than wall time. Ratios are to 'without probe'.)")
    for label, table in (("wall", times), ("CPU", cpu_times)):
        base_med = statistics.median(table["without probe"])
        base_min = min(table["without probe"])
        for name, values in table.items():
            med, low = statistics.median(values), min(values)
            print(f"  {label:<4} {name:<20} median {med * 1000:8.1f} ms (x{med / base_med:5.3f})   "
                  f"min {low * 1000:8.1f} ms (x{low / base_min:5.3f})")
    print(f"  attach(): median {statistics.median(attach_cost) * 1000:.1f} ms; "
          f"stream: {statistics.median(written):.0f} bytes/step")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
