"""The allocation order of a step, generated headlessly, replayed through the allocator model.

The reserve (torch reserved minus allocated) of the caching allocator depends on the order in
which tensors are allocated and freed (:mod:`.cuda_allocator_sim`). Without torch, this module
generates that order from what the estimator knows -- the architecture's parameter tensors, a
layer's saved tensors and temporaries (sizes and dtypes of :mod:`gpumem_tui.estimator.components`),
the gradients, the optimizer states and temporaries, the logits and loss, gradient
checkpointing's recompute, and ``generate()``'s KV-cache growth -- and replays it through
:class:`~.cuda_allocator_sim.CachingAllocator`. The estimate takes the simulated
``peak_reserved - peak_allocated`` as its allocator reserve (:func:`simulated_reserve_bytes`).

The loop is the one users run and the H100 ground truth measured (``../shared/validation/gpu/
gpu_truth.py``): the model's tensors are built first (parameters in module order, peft's
adapters after the base model), then three training steps of forward (labels given, the output
dropped), backward, ``optimizer.step()`` and ``zero_grad(set_to_none=True)`` -- the optimizer
states appear lazily in the first step (``torch/optim/adamw.py``, ``_init_group``:
``zeros_like`` per parameter), which places them into blocks the first forward cached. For
inference: one no-grad forward with the cache, or ``generate()``. QLoRA (peft's k-bit
preparation: the load, quantization and fp32 casts of the build, 4-bit Linears over an fp32
stream) comes from :mod:`.cuda_kbit_events`.

The tensor-level order per op (one layer's: :mod:`.cuda_layer_events`) follows the
``transformers`` modules (Llama / GPT-2 / BERT layers) and autograd: a node runs backward
when its output gradient is complete, allocates its input gradients (and a weight gradient, which ``AccumulateGrad`` keeps as ``.grad``), then its
saved tensors and the output gradient are released (``torch/csrc/autograd/engine.cpp``,
``retain_graph=False``). A layer's saved tensors are the estimator's (their sum is matched to
:func:`~gpumem_tui.estimator.components.layer_activations` by one remainder tensor), so the
simulation sees the same bytes as the analytic estimate, in an order. What it does not know:
kernel-internal workspaces other than cuBLAS's, the driver's segment addresses, other streams.
Checked on the 22 H100 cases (``benchmarks/gpu_accuracy.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from gpumem_tui.estimator.architecture import ModelArchitecture
from gpumem_tui.estimator.devices import cuda_kbit_events as K
from gpumem_tui.estimator.devices.cuda_allocator_sim import Block
from gpumem_tui.estimator.devices.cuda_kernels import library_workspace_bytes
from gpumem_tui.estimator.devices.cuda_layer_events import LayerEvents, Run, StepShapes
from gpumem_tui.estimator.recipes import rules as R
from gpumem_tui.estimator.spec import TrainingSpec

#: decode steps x layers simulated at most (each appends to every layer's cache); beyond, the
#: analytic reserve keeps ``estimate`` fast (under 1 us per event, about a dozen events per
#: layer and decode step)
MAX_DECODE_LAYER_STEPS = 4096

#: training steps simulated: the first (optimizer states created lazily) and one steady step.
#: gpu_truth.py measured three; a simulated third step changed none of the 22 H100 cases
#: (benchmarks/gpu_accuracy.py gives identical figures with 2 and 3)
TRAIN_STEPS = 2


@dataclass(frozen=True, slots=True)
class SimResult:
    """Simulated figures of the whole run (bytes): peaks of allocated and reserved."""

    peak_allocated: int
    peak_reserved: int

    @property
    def reserve(self) -> int:
        """``peak_reserved - peak_allocated``: what the allocator holds beyond the peak."""
        return max(0, self.peak_reserved - self.peak_allocated)


def supported(arch: ModelArchitecture, spec: TrainingSpec) -> bool:
    """Whether the generated order covers this spec (one CUDA device without ZeRO or model
    parallelism, dense layers, no checkpointing other than full, a bounded ``generate()``
    length; QLoRA as :func:`_kbit_covered` says); otherwise the analytic reserve is used."""
    return (spec.device == "cuda" and not arch.coarse and spec.tp == spec.pp == spec.dp == 1 and spec.zero == 0
            and not arch.num_experts and not arch.mla and spec.grad_ckpt in ("none", "full")
            and (spec.task in ("train", "lora", "inference") and spec.quant == "none" or _kbit_covered(arch, spec))
            and not spec.grads_persist
            and spec.optimizer in ("adamw", "adam", "sgd", "sgd-momentum")
            and arch.kind in ("decoder", "encoder") and arch.num_layers * max(1, spec.new_tokens) <= MAX_DECODE_LAYER_STEPS
            and R.follows_measured_order(spec, kbit=spec.task == "qlora"))


def _kbit_covered(arch: ModelArchitecture, spec: TrainingSpec) -> bool:
    """QLoRA as :mod:`.cuda_kbit_events` generates it: a 4-bit bitsandbytes base with peft's
    k-bit preparation (fp32 non-quantized parameters) under the 16-bit autocast of the Trainer,
    over a fused SDPA kernel, in Llama-style layers (RMSNorm, gated MLP, rotary positions,
    sequential residuals): the layers whose k-bit saved set the analytic rule models (its fp32
    gated MLP, measured on the H100, ``tests/data/recipes_cuda``). Eager attention under
    autocast, LayerNorm and plain-MLP layers are not generated (there the generated order
    saved 10-56 % more than the analytic rule on the catalogue models)."""
    from gpumem_tui.estimator.components.kernels import fused_sdpa

    return (spec.task == "qlora" and spec.quant in ("nf4", "fp4") and R.kbit_fp32(spec)
            and R.autocast_over_16bit_weights(spec) and fused_sdpa(arch, spec) and arch.norm == "rmsnorm"
            and arch.gated_mlp and not arch.learned_positions and not arch.family.parallel_residual
            and not arch.family.norm_offset_fp32)


def _build_model(run: Run, st: StepShapes) -> tuple[list[Block], list[tuple[int, int]]]:
    """Allocate the parameters (and peft's adapters); returns the parameter handles and the
    trainable tensors as (elements, grad-order index)."""
    emb, layers, tail, _ = st.parameter_tensors()
    keys = [run.a(n * st.p) for n in emb]
    for layer in layers:
        keys += [run.a(n * st.p) for n in layer]
    keys += [run.a(n * st.p) for n in tail]
    return keys, []


def _adapters(st: StepShapes) -> list[int]:
    """Adapter tensors of one layer (elements): lora_A (r, d_in) and lora_B (d_out, r)."""
    r = st.spec.lora_rank or 0
    out = []
    for lin in st.linears:
        if lin.role in st.targets:
            out += [lin.count * r * lin.d_in, lin.count * lin.d_out * r]
    return out


class _Training:
    """The training loop of the module doc, as allocations: the model built (parameters,
    peft's adapters, the input ids), then :data:`TRAIN_STEPS` calls of :meth:`step`. Kept
    across steps: the optimizer states (made in the first step) and the cuBLAS workspaces
    of the forward and the autograd threads (made at their first matmul)."""

    def __init__(self, st: StepShapes) -> None:
        self.run = run = Run()
        self.st = st
        arch, spec = st.arch, st.spec
        adapters = [_adapters(st) for _ in range(arch.num_layers)] if st.lora else []
        self.kbit = isinstance(st, K.KbitShapes)
        if self.kbit:
            K.build_kbit_model(run, st)
        else:
            _build_model(run, st)
            for layer in adapters:
                for n in layer:
                    run.a(n * st.ab)
        run.a(8 * st.bs)  # the input ids, alive for the whole run
        self.layer = K.KbitLayerEvents(run, st) if self.kbit else LayerEvents(run, st)
        self.states: list[Block] = []
        self.ws_fwd: Block | None = None
        self.ws_bwd: Block | None = None
        self.ckpt = spec.grad_ckpt == "full"
        self.trainable = ([n for layer_ in adapters for n in layer_] if st.lora else None)
        # the training cache's k / v copies that attention does not save, held by the model
        # output until it is dropped (components.training_cache_forward_bytes), one per layer
        self.cache_per_layer = st.C.training_cache_forward_bytes(arch, spec, st.b, st.s) // max(1, arch.num_layers)

    def step(self) -> None:
        """One step: forward (:meth:`forward_layers`), the LM head and loss
        (:meth:`head_and_loss`), the output dropped unless the loop keeps it, backward
        (:meth:`loss_backward`, :meth:`backward_layers`, :meth:`embedding_grads`), the
        optimizer step and ``zero_grad(set_to_none=True)`` (:meth:`optimizer_step`)."""
        run, st = self.run, self.st
        grads: list[Block] = []
        x, saved_per_layer, casts_per_layer, cache = self.forward_layers()
        fin, xn, head_cast, logits, lp, lab = (K.kbit_head_and_loss(run, st, self.layer, x) if self.kbit
                                               else self.head_and_loss(x))
        if self.ckpt:  # the autocast context exits: casts nothing saved are released
            for casts in casts_per_layer:
                run.f(*casts)
        kept = logits if R.keeps_outputs(st.spec) else None
        if kept is None:
            run.f(logits, *cache)  # del out: its logits and its cache
            cache = []
        if self.kbit:
            gx, ws = K.kbit_loss_backward(run, st, fin, xn, head_cast, lp, lab, self.ws_bwd is None)
            self.ws_bwd, head_g = self.ws_bwd or ws, None
        else:
            gx, head_g = self.loss_backward(fin, xn, head_cast, lp, lab)
        self.backward_layers(gx, saved_per_layer, casts_per_layer, grads)
        self.embedding_grads(head_g, grads)
        self.optimizer_step(grads)
        run.f(kept, *cache)  # the loop's output reference (logits, cache) ends with the step

    def forward_layers(self) -> tuple[Block, list, list[list[Block]], list[Block]]:
        """The embedding and every layer's forward (no grad under full checkpointing, which
        keeps each layer's input); returns (the last layer's output, per layer its saved
        tensors or checkpointed input, per layer its autocast weight casts, the training
        cache's copies)."""
        run, st, layer = self.run, self.st, self.layer
        emb = run.a(st.bs * st.h * (4 if st.prec.amp else st.e))
        if self.ws_fwd is None:
            self.ws_fwd = run.a(library_workspace_bytes(False))
        x = emb
        saved_per_layer: list = []
        casts_per_layer: list[list[Block]] = []
        cache: list[Block] = []
        for _i in range(st.arch.num_layers):
            if self.ckpt:
                out, sv = layer.forward(x, grad=False)
                saved_per_layer.append(x)  # the checkpoint keeps the layer input
            else:
                out, sv = layer.forward(x, grad=True)
                saved_per_layer.append(sv)
                if x not in sv:
                    run.f(x)
            if self.cache_per_layer:
                cache.append(run.a(self.cache_per_layer))
            casts_per_layer.append(layer.take_casts())
            x = out
        return x, saved_per_layer, casts_per_layer, cache

    def head_and_loss(self, x: Block) -> tuple[list[Block], Block, Block | None, Block, Block, Block]:
        """Final norm, LM head, loss (transformers ForCausalLMLoss: fp32 upcast,
        log_softmax) on the last layer's output ``x``; returns (the final norm's saved
        tensors and ``x``, the normed output, the head weight's autocast cast, the logits,
        the fp32 log-probabilities, the labels)."""
        run, st, arch = self.run, self.st, self.st.arch
        e, bs, h, V = st.e, st.bs, st.h, st.V
        fin: list[Block] = []
        if arch.final_norm:
            xn = self.layer.norm(fin, True, True)
        else:
            xn = run.a(bs * h * e)
        fin.append(x)
        head_cast = run.a(V * arch.embed_width * e) if st.prec.amp and arch.head in ("lm", "mlm") else None
        logits = run.a(bs * V * e)
        up32 = run.a(bs * V * 4) if e != 4 else None
        lab = run.a(8 * bs)
        lp = run.a(bs * V * 4)
        run.f(up32)
        return fin, xn, head_cast, logits, lp, lab

    def loss_backward(self, fin: list[Block], xn: Block, head_cast: Block | None, lp: Block,
                      lab: Block) -> tuple[Block, Block | None]:
        """The loss's backward (log_softmax, the fp32 upcast), the LM head's (its weight
        gradient when the whole model trains) and the final norm's; the autograd thread's
        cuBLAS workspace at its first matmul. Returns (the last layer's output gradient, the
        head weight's gradient or ``None``)."""
        run, st, arch = self.run, self.st, self.st.arch
        e, bs, h, V = st.e, st.bs, st.h, st.V
        g_lp = run.a(bs * V * 4)
        g_in = run.a(bs * V * 4)
        run.f(g_lp, lp, lab)
        g_lo = run.a(bs * V * e) if e != 4 else g_in
        if e != 4:
            run.f(g_in)
        if self.ws_bwd is None:  # the autograd thread's cuBLAS workspace, at its first matmul
            self.ws_bwd = run.a(library_workspace_bytes(True) - library_workspace_bytes(False))
        gx = run.a(bs * h * e)
        head_g = run.a(V * arch.embed_width * st.g) if st.spec.task == "train" else None
        run.f(g_lo, head_cast)
        tmp = [run.a(bs * h * 4) for _ in range(2)]
        run.f(*tmp)
        gxn = run.a(bs * h * e)
        run.f(gx, *fin, xn)
        return gxn, head_g

    def backward_layers(self, gx: Block, saved_per_layer: list, casts_per_layer: list[list[Block]],
                        grads: list[Block]) -> None:
        """Every layer's backward, last first, from ``gx`` (freed); under full checkpointing
        each layer's forward is recomputed first (under the forward's autocast). Weight
        gradients are appended to ``grads``."""
        run, layer = self.run, self.layer
        for i in reversed(range(self.st.arch.num_layers)):
            if self.ckpt:
                inp = saved_per_layer[i]
                out, sv = layer.forward(inp, grad=True)  # recomputed under the forward's autocast
                run.f(out)
                g_new = layer.backward(gx, sv, grads)
                if inp not in sv:
                    run.f(inp)
                run.f(*layer.take_casts())
            else:
                g_new = layer.backward(gx, saved_per_layer[i], grads)
                run.f(*casts_per_layer[i])
            gx = g_new
        run.f(gx)

    def embedding_grads(self, head_g: Block | None, grads: list[Block]) -> None:
        """The embedding's weight gradient (dense) when the whole model trains; with tied
        embeddings summed with the head's ``head_g`` into one ``.grad``."""
        run, st, arch = self.run, self.st, self.st.arch
        if st.spec.task == "train":
            dense = run.a(st.V * arch.embed_width * st.g)
            if arch.tie_word_embeddings and head_g is not None:
                summed = run.a(st.V * arch.embed_width * st.g)
                run.f(head_g, dense)
                grads.append(summed)
            else:
                grads += [dense] + ([head_g] if head_g is not None else [])

    def optimizer_step(self, grads: list[Block]) -> None:
        """``optimizer.step()``: the states created in the first step (``zeros_like`` per
        trainable tensor: two for Adam(W), one for SGD with momentum), then the foreach or
        single-tensor Adam temporaries; then ``zero_grad(set_to_none=True)`` frees ``grads``."""
        run, st, spec = self.run, self.st, self.st.spec
        sizes = self.trainable if self.trainable is not None else _all_param_sizes(st)
        sb = st.ab if st.lora else st.st
        if not self.states:
            per = 2 if spec.optimizer in ("adamw", "adam") else 1 if spec.optimizer == "sgd-momentum" else 0
            for n in sizes:
                for _ in range(per):
                    self.states.append(run.a(n * sb))
        impl = spec.resolved_optimizer_impl
        if spec.optimizer in ("adamw", "adam") and impl == "foreach":
            tmps = [run.a(n * sb) for n in sizes]
            run.f(*tmps)
        elif spec.optimizer in ("adamw", "adam") and impl == "single":
            for n in sizes:
                t1 = run.a(n * sb)
                t2 = run.a(n * sb)
                run.f(t1)
                run.f(t2)
        run.f(*grads)  # zero_grad(set_to_none=True)


def _train(st: StepShapes) -> SimResult:
    """Simulate the training run of ``st`` (:class:`_Training`: the model, then
    :data:`TRAIN_STEPS` steps); returns the peaks of allocated and reserved bytes."""
    training = _Training(st)
    for _step in range(TRAIN_STEPS):
        training.step()
    return SimResult(training.run.alloc.peak_allocated, training.run.alloc.reserved)


def _all_param_sizes(st: StepShapes) -> list[int]:
    emb, layers, tail, _ = st.parameter_tensors()
    out = list(emb)
    for layer in layers:
        out += layer
    return out + tail


def _infer(st: StepShapes) -> SimResult:
    run = Run()
    arch, spec = st.arch, st.spec
    _build_model(run, st)
    e, bs, h, V, b = st.e, st.bs, st.h, st.V, st.b
    ids = run.a(8 * bs)
    layer = LayerEvents(run, st)
    run.a(library_workspace_bytes(False))
    d = arch.head_dim
    kvh = arch.num_kv_heads
    x = run.a(bs * h * e)
    cache: list[list[Block]] = []
    for _i in range(arch.num_layers):
        out, _sv = layer.forward(x, grad=False)
        if arch.kind == "decoder":
            cache.append([run.a(b * kvh * st.s * d * spec.kv_bytes), run.a(b * kvh * st.s * d * spec.kv_bytes)])
        run.f(x)
        x = out
    nrm: list[Block] = []
    xn = layer.norm(nrm, False, False)
    run.f(x)
    if spec.new_tokens == 0:
        # --logits all: every position's logits stay alive with the cache; last: one position
        run.a(bs * V * e if spec.logits == "all" else b * V * e)
        run.f(xn)
        return SimResult(run.alloc.peak_allocated, run.alloc.reserved)
    last = run.a(b * V * e)
    run.f(xn)
    _decode(run, st, cache, ids, last)
    return SimResult(run.alloc.peak_allocated, run.alloc.reserved)


def _decode(run: Run, st: StepShapes, cache: list[list[Block]], ids: Block, last: Block) -> None:
    """``generate()``'s decode steps after the prefill: per new token the fp32 logits of the
    last position, the grown ids, and per layer the one-token activations and the KV cache
    grown by one position (``DynamicCache.update``: ``torch.cat([cache, new], dim=-2)``, a new
    tensor, the old one freed). The sizes that do not change with the step are computed once
    (the innermost loop runs new tokens x layers times)."""
    a, f = run.a, run.f
    arch, spec = st.arch, st.spec
    b, s, e = st.b, st.s, st.e
    logits, logits32, hidden = b * st.V * e, b * st.V * 4, b * st.h * e
    qkv, attn, mlp_bytes = b * (st.q + 2 * st.kv) * e, b * st.q * e, 3 * b * st.f * e
    kv_per_position = b * arch.num_kv_heads * arch.head_dim * spec.kv_bytes
    seq_ids = ids
    for t in range(spec.new_tokens):
        l32 = a(logits32)
        f(last)
        nxt = a(8 * b)
        new_ids = a(8 * b * (s + t + 1))
        f(seq_ids, l32, nxt)
        seq_ids = new_ids
        if t == spec.new_tokens - 1:
            break
        x = a(hidden)
        kv_bytes = kv_per_position * (s + t + 1)
        for i in range(arch.num_layers):
            layer_cache = cache[i]
            t1 = a(qkv)
            for j in range(2):
                new = a(kv_bytes)
                f(layer_cache[j])
                layer_cache[j] = new
            t2 = a(attn)
            f(t1)
            mlp = a(mlp_bytes)
            f(t2, mlp)
            out = a(hidden)
            f(x)
            x = out
        last = a(logits)
        f(x)


@lru_cache(maxsize=1024)
def simulate(arch: ModelArchitecture, spec: TrainingSpec) -> SimResult | None:
    """Replay the generated order of ``spec``'s run through the allocator model; ``None`` when
    :func:`supported` says the order is not modelled.

    It replays thousands of allocations (about 1.5-12 ms on the catalogue models), so results are
    kept per (architecture, spec), both frozen: the dashboard re-estimates a probed process's
    unchanged spec at every poll, and the what-if form revisits the same values.
    """
    if not supported(arch, spec):
        return None
    st = K.KbitShapes(arch, spec) if spec.task == "qlora" else StepShapes(arch, spec)
    return _infer(st) if spec.task == "inference" else _train(st)


def simulated_reserve_bytes(arch: ModelArchitecture, spec: TrainingSpec) -> int | None:
    """The allocator reserve (reserved - allocated at the peaks, bytes) of the simulated run,
    or ``None`` where the order is not modelled (the analytic share applies)."""
    res = simulate(arch, spec)
    return None if res is None else res.reserve
