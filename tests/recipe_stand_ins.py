"""Stand-ins for libraries not installed here, shaped like the real ones where the probe reads
them (tests/test_probe_recipe.py): the quantized Linears of bitsandbytes
(bitsandbytes/nn/modules.py ``Linear4bit`` + ``Params4bit``, ``Linear8bitLt`` + ``Int8Params``),
auto-gptq (``QuantLinear``) and autoawq (``WQLinear_GEMM``), and DeepSpeed's engine
(deepspeed/runtime/engine.py). A module of their own, imported by the tests that use them: the
classes subclass torch's, and importing torch at the top of a test module costs every xdist
worker seconds of CPU while it collects.
"""

from __future__ import annotations

import torch


class QuantState:  # bitsandbytes.functional.QuantState's fields the probe reads
    def __init__(self, quant_type: str, nested: bool) -> None:
        self.quant_type, self.nested, self.blocksize = quant_type, nested, 64


class Params4bit(torch.nn.Parameter):  # bitsandbytes.nn.modules.Params4bit: packed uint8 data
    def __new__(cls, data, quant_type="nf4", compress_statistics=True):
        self = torch.Tensor._make_subclass(cls, data, False)
        self.quant_type, self.compress_statistics = quant_type, compress_statistics
        self.quant_storage = torch.uint8
        self.quant_state = QuantState(quant_type, compress_statistics)
        return self


class Linear4bit(torch.nn.Module):  # bitsandbytes.nn.Linear4bit: two 4-bit values per byte
    def __init__(self, d_in: int, d_out: int, compute_dtype=torch.bfloat16) -> None:
        super().__init__()
        self.in_features, self.out_features, self.compute_dtype = d_in, d_out, compute_dtype
        self.weight = Params4bit(torch.zeros(d_in * d_out // 2, 1, dtype=torch.uint8))


class Int8Params(torch.nn.Parameter):  # bitsandbytes.nn.modules.Int8Params
    def __new__(cls, data):
        return torch.Tensor._make_subclass(cls, data, False)


class Linear8bitLt(torch.nn.Module):
    def __init__(self, d_in: int, d_out: int) -> None:
        super().__init__()
        self.weight = Int8Params(torch.zeros(d_out, d_in, dtype=torch.int8))


class QuantLinear(torch.nn.Module):  # auto_gptq/nn_modules/qlinear: bits, group_size, packed buffers
    def __init__(self, bits: int, group_size: int, d_in: int, d_out: int) -> None:
        super().__init__()
        self.bits, self.group_size, self.infeatures, self.outfeatures = bits, group_size, d_in, d_out
        self.register_buffer("qweight", torch.zeros(d_in * bits // 32, d_out, dtype=torch.int32))


class WQLinear_GEMM(torch.nn.Module):  # noqa: N801 - autoawq's class name
    def __init__(self, w_bit: int, group_size: int, d_in: int, d_out: int) -> None:
        super().__init__()
        self.w_bit, self.group_size, self.in_features, self.out_features = w_bit, group_size, d_in, d_out
        self.register_buffer("qweight", torch.zeros(d_in, d_out * w_bit // 32, dtype=torch.int32))


class OffloadDeviceEnum:  # deepspeed.runtime.zero.offload_config.OffloadDeviceEnum member
    value = "cpu"


class DeepSpeedEngine(torch.nn.Module):  # deepspeed/runtime/engine.py: the methods the probe asks
    def __init__(self, module, stage: int) -> None:
        super().__init__()
        self.module, self._stage = module, stage

    def zero_optimization_stage(self) -> int:
        return self._stage

    def zero_offload_optimizer(self):
        return type("DeepSpeedZeroOffloadOptimizerConfig", (), {"device": OffloadDeviceEnum()})()

    def zero_offload_param(self):
        return None
