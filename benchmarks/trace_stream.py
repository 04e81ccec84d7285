"""Memory and time of ``compare`` and ``replay`` on a large trace (they must stream).

The issue: a 189 MB trace took 1.97 GB and 37 s to compare, and one line of 10**6 processes
took 445 MB. Target: a ~200 MB trace under 300 MB peak RSS, memory not growing with the
file's size.

Generates in a temporary directory:

- ``big.jsonl``: ~``--megabytes`` MB, one record per 0.1 s of trace time, like
  ``gpumem-tui record`` writes on a training box: one GPU, ``--processes`` NVML rows with
  long command lines, one probed process (a small GPT-2, its ProbeInfo in every record as the
  probe re-sends it), a probe sample with categories per record, a phase mark and a phase
  high-water mark per step of 0.5 s;
- ``wide.jsonl``: three records, the middle one listing 10**6 processes (~45 MB line).

Then runs each measurement in a fresh Python process and prints its wall seconds and peak RSS
(``ru_maxrss``): the import baseline; ``compare`` (``compare_trace``); the replay's loading
(the indexing pass of ``ReplaySource``) and seeks, each followed by the poll that reads up to
the new position: to the end (reads every record), back to the middle, back 10 s from the
end, forward 10 s; and the same on ``wide.jsonl``.

Usage: .venv/bin/python benchmarks/trace_stream.py [--megabytes 200] [--processes 40]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
T0 = 1.79e9
PID = 4242
GPT2 = {"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "vocab_size": 50257,
        "n_positions": 1024, "architectures": ["GPT2LMHeadModel"], "layer_norm_epsilon": 1e-05,
        "activation_function": "gelu_new", "resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1}
MiB = 1 << 20


def _record(i: int, processes: int) -> dict:
    when = T0 + i * 0.1
    step = i // 5
    record: dict = {
        "time": when, "driver_version": "580.159.04", "cuda_driver_version": "13.0", "nvml_error": None,
        "devices": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-6b539e9c-f019-732b-27eb-a2100dbcc7f4",
                     "memory_total_bytes": 85520809984, "memory_used_bytes": 20 << 30, "utilization_gpu_percent": 97.0,
                     "temperature_c": 60.0, "power_draw_w": 500.0, "power_limit_w": 700.0, "error": None,
                     "field_errors": []}],
        "processes": [{"pid": PID if k == 0 else 20_000 + k, "device_index": 0, "type": "compute",
                       "used_memory_bytes": (3 << 30) + (i % 50) * MiB, "sm_percent": 90.0, "user": "alice",
                       "command": f"python train.py --config configs/run_{k}.yaml --output /scratch/alice/run_{k}",
                       "cpu_percent": 101.0, "rss_bytes": 4 << 30, "start_time": T0 - 100, "status": "ok",
                       "container": None, "field_errors": [], "container_pid": None} for k in range(processes)],
        "probes": [{"time": when, "pid": PID, "device": "cuda:0", "allocated_bytes": (2 << 30) + (i % 50) * MiB,
                    "reserved_bytes": 3 << 30, "peak_allocated_bytes": (2 << 30) + 60 * MiB,
                    "categories": {"parameters": 500 * MiB, "gradients": 500 * MiB, "optimizer_states": 1000 * MiB,
                                   "activations": (i % 50) * MiB}}],
        "probe_infos": [{"pid": PID, "model_config": GPT2, "setup": {"batch": 8, "seq": 1024, "dtype": "bf16",
                                                                    "optimizer": "AdamW"}, "ended": False}],
        "phase_marks": [], "notices": [],
    }
    if i % 5 == 0:
        record["phase_marks"] = [{"time": when, "pid": PID, "phase": "forward", "step": step}]
        record["phase_peaks"] = [{"pid": PID, "step": step, "phase": "forward", "start": when - 0.5, "end": when,
                                  "peak_bytes": (2 << 30) + 60 * MiB, "device": "cuda:0", "steps": 1}]
    return record


def _header() -> str:
    return json.dumps({"format": "gpumem-tui-trace", "version": 1, "created": T0, "interval": 0.1}) + "\n"


def write_big(path: Path, megabytes: int, processes: int) -> int:
    target = megabytes * 1_000_000
    with path.open("w") as out:
        out.write(_header())
        i = 0
        while out.tell() < target:
            out.write(json.dumps(_record(i, processes), separators=(",", ":")) + "\n")
            i += 1
    return i


def write_wide(path: Path, processes: int = 1_000_000) -> None:
    with path.open("w") as out:
        out.write(_header())
        out.write(json.dumps({"time": T0}) + "\n")
        out.write('{"time":%r,"processes":[' % (T0 + 1))
        for k in range(processes):  # written row by row: this process stays small too
            out.write(('{"pid":%d,"device_index":0,"type":"compute"}' % (k % 4_000_000)) + ("," if k + 1 < processes else ""))
        out.write("]}\n")
        out.write(json.dumps({"time": T0 + 2}) + "\n")


CHILD = r'''
import json, sys, time
sys.path.insert(0, sys.argv[1])
what, path = sys.argv[2], sys.argv[3]
from gpumem_tui.analysis.comparison import ComparisonError
from gpumem_tui.analysis.process_estimate import compare_trace
from gpumem_tui.telemetry.replay import ReplaySource
out = {}
def timed(name, fn):
    start = time.perf_counter()
    value = fn()
    out[name + " s"] = round(time.perf_counter() - start, 2)
    return value
if what == "compare":
    start = time.perf_counter()
    try:
        result = compare_trace(path, pid=None)
        out["samples"] = result["samples"]
        out["steps listed"] = len(result["steps"])
    except ComparisonError as exc:
        out["compare says"] = str(exc)
    out["compare s"] = round(time.perf_counter() - start, 2)
elif what.startswith("replay"):
    prebuild = what == "replay"
    if prebuild:  # the background pass has run by the time a user seeks far: let it finish
        pass
    clock = [0.0]
    src = timed("open (index pass)", lambda: ReplaySource(path, clock=lambda: clock[0], prebuild=prebuild))
    out["records"] = src.snapshot_count
    out["checkpoints"] = len(src._scan.checkpoints)
    snap = timed("first poll", src.poll)
    out["first poll processes"] = len(snap.processes)
    end = src.duration
    if prebuild:
        timed("background checkpoint pass (waited for)", lambda: [time.sleep(0.2) for _ in iter(
            lambda: len(src._saved) < len(src._scan.checkpoints), False)])
    for name, target in (("seek to end", end), ("seek back to middle", end / 2),
                         ("seek back to end - 10 s", end - 10), ("seek forward 10 s", end)):
        src.seek(target)
        snap = timed(name, src.poll)
        if name == "seek back to middle":
            out["processes shown there"] = len(snap.processes)
            out["cap notices"] = [n for n in snap.notices if "beyond" in n]
    src.close()
# VmHWM: this process's peak RSS (ru_maxrss would carry the parent's across exec)
with open("/proc/self/status") as status:
    hwm = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
out["peak RSS MiB"] = round(hwm / 1024, 1)
print(json.dumps(out))
'''


def run_child(what: str, path: Path) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, str(ROOT), what, str(path)], capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1:]}
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=200)
    parser.add_argument("--processes", type=int, default=40)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        big, wide = Path(tmp) / "big.jsonl", Path(tmp) / "wide.jsonl"
        started = time.perf_counter()
        records = write_big(big, args.megabytes, args.processes)
        write_wide(wide)
        print(f"generated in {time.perf_counter() - started:.0f} s: {big.name} {big.stat().st_size / 1e6:.0f} MB, "
              f"{records} records ({records / 10:.0f} s of trace); {wide.name} {wide.stat().st_size / 1e6:.0f} MB "
              "(one line of 10**6 processes)")
        print("import baseline:", run_child("none", big))
        for path in (big, wide):
            for what in ("compare", "replay-no-prebuild", "replay"):
                print(f"{path.name} {what}:", run_child(what, path))


if __name__ == "__main__":
    main()
