"""The allocation order of a QLoRA step (peft's k-bit preparation), for the allocator replay of
:mod:`.cuda_step_events`.

What differs from the plain LoRA step (:mod:`.cuda_layer_events`), by source:

- the model build (:func:`build_kbit_model`): transformers loads each weight in the spec's
  16-bit dtype and bitsandbytes quantizes a ``Linear4bit`` weight on the device
  (``Params4bit._quantize``: the 16-bit copy, then the packed 4-bit data and its block
  constants, the copy freed; ``bitsandbytes/nn/modules.py``), then
  ``prepare_model_for_kbit_training`` casts each 16-bit parameter left (embeddings, norms, an
  untied LM head) to fp32 (``param.data = param.data.to(torch.float32)``: the fp32 copy, then
  the 16-bit one freed; peft ``utils/other.py``), then peft adds fp32 adapters. The freed
  16-bit embedding stays cached: on the H100 records (``tests/data/recipes_cuda``,
  ``before_training``, Llama-3.2-1B nf4) the replay gives allocated 1.4526 GiB (measured
  1.4538), its maximum 1.9364 (1.9366) and reserved 2.0059 (1.9766);
- the residual stream, the norms and the gated MLP are fp32 (:func:`~..recipes.rules.
  residual_stream_bytes`): :class:`KbitShapes` sets the stream element size to 4 and keeps
  the 16-bit compute dtype for what autocast and bitsandbytes make 16-bit;
- a 4-bit Linear (:meth:`KbitLayerEvents.linear`) casts its input to the compute dtype,
  dequantizes its weight for the matmul (forward and backward), returns its output cast back
  to its input's dtype, and saves no input (``MatMul4Bit``, ``bitsandbytes/autograd/
  _functions.py``: only the quantized weight is kept);
- SDPA under autocast saves 16-bit casts of q, k and v; the fp32 LM head under autocast is
  a cached 16-bit weight cast with 16-bit logits (:func:`kbit_head_and_loss`); the loss backward
  likewise (:func:`kbit_loss_backward`). The quantized weights are identified by size: each
  layer Linear of ``arch.layer_linears()``; embeddings, norms and an untied LM head are not
  quantized.

The saved bytes per layer stay the analytic estimate's (the remainder tensor of
:meth:`~.cuda_layer_events.LayerEvents.top_up_saved`).
"""

from __future__ import annotations

from gpumem_tui.estimator.architecture import ModelArchitecture
from gpumem_tui.estimator.devices.cuda_allocator_sim import Block
from gpumem_tui.estimator.devices.cuda_layer_events import LayerEvents, Run, StepShapes
from gpumem_tui.estimator.spec import TrainingSpec

#: the elements per 4-bit block constant (bitsandbytes ``blocksize`` 64) and per constant of
#: double quantization (256)
BLOCK, NESTED_BLOCK = 64, 256


class KbitShapes(StepShapes):
    """:class:`StepShapes` of a QLoRA step: ``e`` (the stream, norms, MLP) fp32, ``e16`` the
    compute dtype of the 4-bit matmuls and of autocast; adapters as LoRA's."""

    def __init__(self, arch: ModelArchitecture, spec: TrainingSpec) -> None:
        super().__init__(arch, spec)
        from gpumem_tui.estimator.components import lora

        self.e16 = self.e
        self.e = 4
        self.lora = True
        self.targets = {lin.role for lin in lora.lora_targets(arch, spec)}
        self.ab = lora.adapter_bytes(spec, self.p)
        self.double_quant = bool(spec.quant_format is not None and spec.quant_format.double_quant)

    def quantized_bytes(self, n: int) -> list[int]:
        """The tensors of one quantized weight of ``n`` elements (bytes): the packed 4-bit
        data and the block constants (uint8 with double quantization, then its fp32
        constants; else fp32)."""
        blocks = -(-n // BLOCK)
        if self.double_quant:
            return [n // 2, blocks, 4 * -(-blocks // NESTED_BLOCK)]
        return [n // 2, 4 * blocks]


def build_kbit_model(run: Run, st: KbitShapes) -> None:
    """Load, quantize and k-bit-prepare the model, then add the adapters (module doc)."""
    arch = st.arch
    emb, layers, tail, _ = st.parameter_tensors()
    quantized = {lin.count * lin.d_in * lin.d_out for lin in st.linears}
    kept: list[tuple[int, Block]] = []  # the 16-bit parameters k-bit preparation casts
    for group in [emb] + layers + [tail]:
        for n in group:
            w16 = run.a(n * st.e16)
            if group is emb or group is tail or n not in quantized:
                kept.append((n, w16))
                continue
            for nbytes in st.quantized_bytes(n):
                run.a(nbytes)
            run.f(w16)
    for n, w16 in kept:
        run.a(n * 4)
        run.f(w16)
    r = st.spec.lora_rank or 0
    for _layer in range(arch.num_layers):
        for lin in st.linears:
            if lin.role in st.targets:
                run.a(lin.count * r * lin.d_in * st.ab)
                run.a(lin.count * lin.d_out * r * st.ab)


class KbitLayerEvents(LayerEvents):
    """A QLoRA layer: 4-bit Linears and autocast SDPA over the fp32 stream (module doc)."""

    def linear(self, x_saved: bool, d_in: int, d_out: int, role: str, saved: list[Block], grad: bool) -> Block:
        """A 4-bit Linear (and its fp32 adapter under autocast); returns the output handle:
        16-bit for the attention output projection (its input is SDPA's 16-bit output), else
        fp32 (the stream's dtype)."""
        st, run = self.st, self.run
        e16, bs = st.e16, st.bs
        stream_in = role != "o"
        xc = run.a(bs * d_in * e16) if stream_in else None  # x.to(compute_dtype)
        deq = run.a(d_in * d_out * e16)
        out16 = run.a(bs * d_out * e16)
        run.f(deq)
        out = run.a(bs * d_out * st.e) if stream_in else out16
        if stream_in:
            run.f(out16)
        run.f(xc)
        if role in st.targets and grad:
            r = st.spec.lora_rank or 0
            xin = run.a(bs * d_in * e16)  # autocast's cast of the input, saved by lora_A
            aout = run.a(bs * r * e16)
            bout = run.a(bs * d_out * e16)
            scaled = run.a(bs * d_out * e16)
            run.f(bout)
            summed = run.a(bs * d_out * (st.e if stream_in else e16))
            run.f(scaled, out)
            out = summed
            saved += [xin, aout]
        return out

    def fused_attention(self, attn_in: list[Block], saved: list[Block], grad: bool) -> Block:
        """SDPA under autocast: 16-bit casts of the fp32 q, k, v (saved with the 16-bit
        output and the log-sum-exp); the fp32 inputs are freed."""
        st, run = self.st, self.run
        e16, bs = st.e16, st.bs
        casts = [run.a(bs * st.q * e16), run.a(bs * st.kv * e16), run.a(bs * st.kv * e16)]
        run.f(*attn_in)
        return self.sdpa_kernel(casts, e16, saved, grad)

    def wgrad(self, role: str, d_in: int, d_out: int, grads: list[Block]) -> None:
        """The input gradient's dequantized weight and 16-bit result (``MatMul4Bit.backward``),
        then the adapter's gradients where adapted."""
        st, run = self.st, self.run
        deq = run.a(d_in * d_out * st.e16)
        g16 = run.a(st.bs * d_in * st.e16)
        run.f(deq, g16)
        super().wgrad(role, d_in, d_out, grads)


def kbit_head_and_loss(run: Run, st: KbitShapes, layer: LayerEvents,
                       x: Block) -> tuple[list[Block], Block, Block, Block, Block, Block]:
    """The fp32 final norm, the fp32 LM head under autocast (a cached 16-bit weight cast and
    a saved 16-bit cast of its input; 16-bit logits) and the loss (fp32 upcast,
    log_softmax); returns what ``cuda_step_events._Training.head_and_loss`` returns,
    with the head's 16-bit input in place of the normed output."""
    arch = st.arch
    e16, bs, h, V = st.e16, st.bs, st.h, st.V
    fin: list[Block] = []
    xn = layer.norm(fin, True, True) if arch.final_norm else run.a(bs * h * st.e)
    fin.append(x)
    head_cast = run.a(V * arch.embed_width * e16)
    xc = run.a(bs * h * e16)
    run.f(xn)
    logits = run.a(bs * V * e16)
    up32 = run.a(bs * V * 4)
    lab = run.a(8 * bs)
    lp = run.a(bs * V * 4)
    run.f(up32)
    return fin, xc, head_cast, logits, lp, lab


def kbit_loss_backward(run: Run, st: KbitShapes, fin: list[Block], xc: Block, head_cast: Block, lp: Block,
                       lab: Block, first: bool) -> tuple[Block, Block | None]:
    """The loss's backward (fp32), the 16-bit logits' gradient, the head's 16-bit input
    gradient cast back to the fp32 stream, the final norm's; ``first``: the autograd thread's
    first matmul, which makes its cuBLAS workspace. Returns (the last layer's output
    gradient, the workspace made or ``None``); the head trains nothing."""
    from gpumem_tui.estimator.devices.cuda_kernels import library_workspace_bytes

    e16, bs, h, V = st.e16, st.bs, st.h, st.V
    g_lp = run.a(bs * V * 4)
    g_in = run.a(bs * V * 4)
    run.f(g_lp, lp, lab)
    g_lo = run.a(bs * V * e16)
    run.f(g_in)
    ws = run.a(library_workspace_bytes(True) - library_workspace_bytes(False)) if first else None
    gx16 = run.a(bs * h * e16)
    run.f(g_lo, head_cast, xc)
    gx = run.a(bs * h * st.e)
    run.f(gx16)
    tmp = [run.a(bs * h * 4) for _ in range(2)]
    run.f(*tmp)
    gxn = run.a(bs * h * st.e)
    run.f(gx, *fin)
    return gxn, ws
