"""Test shim: with GPUMEM_FAKE_NVML=N set, a child Python gets the fake NVML with N GPUs as
``pynvml`` (and GPUMEM_FAKE_PID's process on GPU 0 with 3 GiB), so an exporter started by the
fleet tests reports GPUs on this GPU-less machine. Only on PYTHONPATH in those tests."""

import os
import sys

if os.environ.get("GPUMEM_FAKE_NVML"):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from fake_pynvml import GiB, FakeNvml

    _fake = FakeNvml(gpus=int(os.environ["GPUMEM_FAKE_NVML"]))
    if os.environ.get("GPUMEM_FAKE_PID"):
        _fake.add_process(0, int(os.environ["GPUMEM_FAKE_PID"]), used=3 * GiB)
    sys.modules["pynvml"] = _fake.module
