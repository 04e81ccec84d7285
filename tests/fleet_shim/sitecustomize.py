"""Test shim: with GPUMEM_FAKE_NVML=N set, a child Python gets the fake NVML with N GPUs as
``pynvml`` (and GPUMEM_FAKE_PID's process on GPU 0 with 3 GiB), so an exporter started by the
fleet tests reports GPUs on this GPU-less machine. Only on PYTHONPATH in those tests.

GPUMEM_FAKE_PIDS=P1,P2,... (benchmarks/exporter_cost.py) puts each of those PIDs on every
GPU, as a data-parallel job would be, with SM % and memory-bandwidth % samples."""

import os
import sys

if os.environ.get("GPUMEM_FAKE_NVML"):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from fake_pynvml import GiB, MiB, FakeNvml

    _fake = FakeNvml(gpus=int(os.environ["GPUMEM_FAKE_NVML"]))
    if os.environ.get("GPUMEM_FAKE_PID"):
        _fake.add_process(0, int(os.environ["GPUMEM_FAKE_PID"]), used=3 * GiB)
    for _i, _pid in enumerate(p for p in os.environ.get("GPUMEM_FAKE_PIDS", "").split(",") if p):
        for _gpu in range(len(_fake.gpus)):
            _fake.add_process(_gpu, int(_pid), used=(100 + _i) * MiB, sm=_i % 100, mem=_i % 50)
    sys.modules["pynvml"] = _fake.module
