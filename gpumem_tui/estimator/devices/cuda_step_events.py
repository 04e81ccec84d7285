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
inference: one no-grad forward with the cache, or ``generate()``.

The tensor-level order per op follows the ``transformers`` modules (Llama / GPT-2 / BERT
layers) and autograd: a node runs backward when its output gradient is complete, allocates its
input gradients (and a weight gradient, which ``AccumulateGrad`` keeps as ``.grad``), then its
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
from gpumem_tui.estimator.devices.cuda_allocator_sim import Block, CachingAllocator
from gpumem_tui.estimator.devices.cuda_kernels import library_workspace_bytes
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
    length); otherwise the analytic reserve is used."""
    return (spec.device == "cuda" and not arch.coarse and spec.tp == spec.pp == spec.dp == 1 and spec.zero == 0
            and not arch.num_experts and not arch.mla and spec.grad_ckpt in ("none", "full")
            and spec.task in ("train", "lora", "inference") and not spec.grads_persist and spec.quant == "none"
            and spec.optimizer in ("adamw", "adam", "sgd", "sgd-momentum")
            and arch.kind in ("decoder", "encoder") and arch.num_layers * max(1, spec.new_tokens) <= MAX_DECODE_LAYER_STEPS
            and R.follows_measured_order(spec))


class _Run:
    """The allocator of one simulated run: ``a(nbytes)`` allocates (an int; returns the block
    as the tensor's handle), ``f(*handles)`` frees them in order (``None`` skipped). Handles of
    freed tensors must not be used again: the allocator reuses the block objects."""

    def __init__(self) -> None:
        self.alloc = CachingAllocator()
        self.a = self.alloc.take
        self.f = self.alloc.release_all


class _Step:
    """Shapes and element sizes of one spec (bytes per element: e compute, p param, g grad,
    st state)."""

    def __init__(self, arch: ModelArchitecture, spec: TrainingSpec) -> None:
        from gpumem_tui.estimator import components as C
        from gpumem_tui.estimator.components import kernels, lora

        self.C = C
        self.arch, self.spec = arch, spec
        prec = C.precision(spec)
        self.prec = prec
        self.e, self.p, self.g, self.st = prec.compute, prec.param, prec.grad, prec.state
        self.b, self.s = spec.batch, spec.seq
        self.bs = self.b * self.s
        self.h, self.f = arch.hidden_size, arch.intermediate_size
        self.q, self.kv = arch.q_dim, arch.kv_dim
        self.a = arch.num_heads
        self.V = arch.vocab_size
        self.lora = spec.task == "lora"
        self.train = spec.task != "inference"
        self.targets = {lin.role for lin in lora.lora_targets(arch, spec)} if self.lora else set()
        self.ab = lora.adapter_bytes(spec, self.p)
        self.fused = kernels.fused_sdpa(arch, spec)
        # the layer's saved bytes of the analytic estimate (the remainder tensor tops them up)
        self.layer_saved = C.layer_activations(arch, spec, self.b, self.s).total if self.train else 0
        self.linears = arch.layer_linears()
        self.peft32 = lora.peft_fp32(spec)

    def saves_input(self, role: str) -> bool:
        """Whether the Linear of ``role`` saves its (compute-dtype) input: every trained one;
        with LoRA only adapted ones, and none with peft's fp32 adapters (the adapter saves its
        own fp32 copy; :func:`~gpumem_tui.estimator.components.layer_activations`)."""
        return not self.lora or (role in self.targets and not self.peft32)

    # ----- model tensors ----------------------------------------------------------------
    def parameter_tensors(self) -> tuple[list[int], list[list[int]], list[int], list[int]]:
        """(embedding tensors, per-layer tensors, final/head tensors, trainable sizes in
        elements in autograd order of their gradients' first use)."""
        arch, h = self.arch, self.h
        norm = [h, h] if arch.norm == "layernorm" else [h]
        emb = [self.V * arch.embed_width]
        if arch.learned_positions:
            emb.append(arch.learned_positions * h)
        if arch.type_vocab_size:
            emb.append(arch.type_vocab_size * h)
        if arch.family.embedding_norm:
            emb += norm
        layer: list[int] = []
        for lin in self.linears:
            layer.append(lin.count * lin.d_in * lin.d_out)
            if lin.bias:
                layer.append(lin.count * lin.d_out)
        layer += norm * arch.norms_per_layer
        tail = list(norm) if arch.final_norm else []
        if arch.head == "lm" and not arch.tie_word_embeddings:
            tail.append(self.V * arch.embed_width)
        elif arch.head == "mlm":
            tail += [h * h, h, h, h, self.V]
        return emb, [layer] * arch.num_layers, tail, layer


def _build_model(run: _Run, st: _Step) -> tuple[list[Block], list[tuple[int, int]]]:
    """Allocate the parameters (and peft's adapters); returns the parameter handles and the
    trainable tensors as (elements, grad-order index)."""
    emb, layers, tail, _ = st.parameter_tensors()
    keys = [run.a(n * st.p) for n in emb]
    for layer in layers:
        keys += [run.a(n * st.p) for n in layer]
    keys += [run.a(n * st.p) for n in tail]
    return keys, []


def _adapters(st: _Step) -> list[int]:
    """Adapter tensors of one layer (elements): lora_A (r, d_in) and lora_B (d_out, r)."""
    r = st.spec.lora_rank or 0
    out = []
    for lin in st.linears:
        if lin.role in st.targets:
            out += [lin.count * r * lin.d_in, lin.count * lin.d_out * r]
    return out


class _Layer:
    """One transformer layer's forward and backward as allocations (see the module doc)."""

    def __init__(self, run: _Run, st: _Step) -> None:
        self.run, self.st = run, st
        # torch autocast's 16-bit casts of the fp32 Linear weights, made at their first use in
        # the forward (``cached_cast``, aten/src/ATen/autocast_mode.cpp: leaf weights that
        # require grad are cached until the autocast context exits; the matmul saves its cast
        # for backward, so a cast outlives the context until its layer's backward)
        self.casts: list[Block] = []

    def take_casts(self) -> list[Block]:
        """The weight casts made since the last call (handles), handed to the caller."""
        out, self.casts = self.casts, []
        return out

    # forward ----------------------------------------------------------------------------
    def norm(self, saved: list[Block], grad: bool, feeds_saving: bool) -> Block:
        """A norm: returns its output handle; saved tensors appended to ``saved``."""
        st, run = self.st, self.run
        bsh, bs = st.bs * st.h, st.bs
        if st.arch.norm == "layernorm":
            out = run.a(bsh * st.e)
            stats = run.a(bs * 4), run.a(bs * 4)
            if grad:
                saved += list(stats)
            else:
                run.f(*stats)
            return out
        up = run.a(bsh * 4) if st.e != 4 or st.arch.family.norm_offset_fp32 else None
        pw = run.a(bsh * 4)
        rs = run.a(bs * 4)
        run.f(pw)
        nrm = run.a(bsh * 4)
        cast = run.a(bsh * st.e) if st.e != 4 else None
        out = run.a(bsh * st.e)
        if grad:
            saved += [k for k in (up, rs) if k is not None]
            if not st.lora:
                saved.append(cast if cast is not None else nrm)
                run.f(nrm if cast is not None else None)
            else:
                run.f(nrm, cast)
        else:
            run.f(up, rs, nrm, cast)
        return out

    def linear(self, x_saved: bool, d_in: int, d_out: int, role: str, saved: list[Block], grad: bool) -> Block:
        """A Linear (and its peft adapter); returns the output handle."""
        st, run = self.st, self.run
        if st.prec.amp and st.train:
            self.casts.append(run.a(d_in * d_out * st.e))
        out = run.a(st.bs * d_out * st.e)
        if st.lora and role in st.targets and grad:
            r = st.spec.lora_rank or 0
            c = 4 if st.ab == 4 and st.e != 4 else st.e
            xin = run.a(st.bs * d_in * c) if c != st.e else None
            aout = run.a(st.bs * r * c)
            bout = run.a(st.bs * d_out * c)
            summed = run.a(st.bs * d_out * c)
            run.f(bout, out)
            out = run.a(st.bs * d_out * st.e) if c != st.e else summed
            if c != st.e:
                run.f(summed)
            saved += [k for k in (xin, aout) if k is not None]
        return out

    def cache_copies(self, attn_in: list[Block]) -> list[Block]:
        """A training forward with a ``DynamicCache`` over a fused qkv projection and a fused
        SDPA kernel (which saves its inputs as given): attention
        reads k and v from the cache's copies (``DynamicLayer.update``: ``torch.cat``), so the
        fused output stays pinned only through q where q is a view of it (learned positions,
        GPT-2); with rotary q and k are new tensors and nothing pins it once v is copied
        (GPT-NeoX). The rule of :func:`~gpumem_tui.estimator.components.training_cache_copies`
        (measured on the H100, ``dev_truth_h100.jsonl``: Pythia-410M, GPT-2)."""
        st, run = self.st, self.run
        copies = [run.a(st.bs * st.kv * st.e), run.a(st.bs * st.kv * st.e)]
        if st.arch.learned_positions:  # attn_in: [qkv]; q (a view) keeps it
            return attn_in + copies
        rq, rk, qkv = attn_in  # rotary q, rotary k, the fused output (v a view of it)
        run.f(rk, qkv)
        return [rq] + copies

    def forward(self, x: Block, grad: bool) -> tuple[Block, list[Block]]:
        """Run the layer on ``x`` (freed by the caller); returns (output handle, saved handles)."""
        st, run, arch, spec = self.st, self.run, self.st.arch, self.st.spec
        e, bs, h, f, q, kv = st.e, st.bs, st.h, st.f, st.q, st.kv
        sq = st.b * st.a * st.s * st.s
        # a LayerNorm saves its input: the layer input stays alive until this layer's backward
        saved: list[Block] = [x] if grad and arch.norm == "layernorm" else []
        start = run.alloc.allocated
        n1 = self.norm(saved, grad, True)
        if arch.fused_qkv:
            qkv = self.linear(True, h, q + 2 * kv, "qkv", saved, grad)
            parts = [qkv]
        else:
            parts = [self.linear(True, h, q, "q", saved, grad), self.linear(True, h, kv, "k", saved, grad),
                     self.linear(True, h, kv, "v", saved, grad)]
        keep_n1 = grad and any(st.saves_input(r) for r in ("q", "k", "v", "qkv"))
        if keep_n1:
            saved.append(n1)
        else:
            run.f(n1)
        if not arch.learned_positions:  # rotary: q * cos + rotate_half(q) * sin, same for k
            rq = []
            for width in (q, kv):
                t1, t2 = run.a(bs * width * e), run.a(bs * width * e)
                t3 = run.a(bs * width * e)
                run.f(t1, t2)
                t4 = run.a(bs * width * e)
                run.f(t3)
                rq.append(t4)
            v_key = parts[-1] if len(parts) == 3 else None
            run.f(*(parts[:2] if len(parts) == 3 else ()))
            attn_in = rq + ([v_key] if v_key is not None else parts)
        else:
            attn_in = parts
        if st.fused and arch.fused_qkv and grad and st.C.training_cache_copies(arch, spec):
            attn_in = self.cache_copies(attn_in)
        if st.fused:
            out = run.a(bs * q * e)
            lse = run.a(st.b * st.a * st.s * 4)
            if grad:
                saved += attn_in + [lse]
            else:
                run.f(*attn_in, lse)
            ao = out
        else:
            reps = []
            if arch.num_kv_heads != arch.num_heads and arch.family.eager_qkv == "repeat_kv":
                reps = [run.a(bs * q * e), run.a(bs * q * e)]
            # matmul, * scaling, + mask, softmax(dtype=float32) (an fp32 copy of its input,
            # then ``_softmax``), ``.to(dtype)``, dropout (transformers ``eager_attention_forward``;
            # ATen ``softmax(input, dim, dtype)`` converts first)
            scores = run.a(sq * e)
            scaled = run.a(sq * e)
            run.f(scores)
            masked = run.a(sq * e)
            run.f(scaled)
            fp32 = arch.family.softmax_fp32 and e != 4
            # the masked scores stay bound (``attn_weights``) until the assignment completes
            up = run.a(sq * 4) if fp32 else None
            sm = run.a(sq * 4 if fp32 else sq * e)
            run.f(up)
            probs = run.a(sq * e) if fp32 else None
            run.f(masked)
            drop = None
            if arch.attention_dropout > 0 and grad:
                drop = run.a(sq), run.a(sq * e)
            out = run.a(bs * q * e)
            ao = run.a(bs * q * e)
            run.f(out)
            if grad:
                saved += attn_in + reps + [k for k in (sm, probs) if k is not None] + (list(drop) if drop else [])
            else:
                run.f(*attn_in, *reps, sm, probs, *(drop or ()))
        o = self.linear(True, q, h, "o", saved, grad)
        if grad and st.saves_input("o") and not st.fused:
            saved.append(ao)
        elif not (grad and st.fused):
            run.f(ao)
        elif grad and st.fused:
            saved.append(ao)
        if arch.hidden_dropout > 0 and grad:
            m = run.a(bs * h)
            d = run.a(bs * h * e)
            saved.append(m)
            run.f(o)
            o = d
        mid = run.a(bs * h * e)
        run.f(o)
        n2 = self.norm(saved, grad, True)
        if arch.gated_mlp:
            if arch.fused_gate_up:
                gu = self.linear(True, h, 2 * f, "gate_up", saved, grad)
                act = run.a(bs * f * e)
                prod = run.a(bs * f * e)
                mlp_saved = [gu, act]
            else:
                gate = self.linear(True, h, f, "gate", saved, grad)
                act = run.a(bs * f * e)
                up = self.linear(True, h, f, "up", saved, grad)
                prod = run.a(bs * f * e)
                mlp_saved = [gate, act, up]
        else:
            up = self.linear(True, h, f, "up", saved, grad)
            # ReLU saves its output (the down projection's input), not its input
            mlp_saved = [up] if arch.activation != "relu" else []
            if arch.activation == "relu":
                prod = run.a(bs * f * e)
                run.f(up)
            if arch.activation == "gelu_new":
                ts = [run.a(bs * f * e) for _ in range(3)]
                mlp_saved += ts
            if arch.activation != "relu":
                prod = run.a(bs * f * e)
        down_saves = st.saves_input("down") or arch.activation == "relu"
        if grad and any(st.saves_input(r) for r in ("gate", "up", "gate_up")):
            saved.append(n2)
        else:
            run.f(n2)
        dn = self.linear(True, f, h, "down", saved, grad)
        if grad:
            saved += mlp_saved + ([prod] if down_saves else [])
            if not down_saves:
                run.f(prod)
        else:
            run.f(*mlp_saved, prod)
        if arch.hidden_dropout > 0 and grad:
            m = run.a(bs * h)
            d = run.a(bs * h * e)
            saved.append(m)
            run.f(dn)
            dn = d
        out_key = run.a(bs * h * e)
        run.f(dn)
        if grad and arch.norm == "layernorm" and not arch.family.parallel_residual:
            # the second LayerNorm's input (a parallel-residual layer normalises its input x
            # twice, saved already: GPT-NeoX, components.layer_activations' ``inputs_read``)
            saved.append(mid)
        else:
            run.f(mid)
        if grad:
            have = run.alloc.allocated - start - (bs * h * e)
            if saved and saved[0] == x:
                have += x.size
            rest = st.layer_saved - have
            if rest > 0:
                saved.append(run.a(int(rest)))
        return out_key, saved

    # backward ---------------------------------------------------------------------------
    def backward(self, gx: Block, saved: list[Block], grads: list[Block]) -> Block:
        """The layer's backward from the output gradient ``gx`` (freed here); weight
        gradients appended to ``grads``; returns the input gradient's handle."""
        st, run, arch = self.st, self.run, self.st.arch
        e, bs, h, f, q, kv = st.e, st.bs, st.h, st.f, st.q, st.kv
        sq = st.b * st.a * st.s * st.s
        saved = list(saved)

        def wgrad(role: str, d_in: int, d_out: int) -> None:
            if not st.lora:
                grads.append(run.a(d_in * d_out * st.g))
            elif role in st.targets:
                r = st.spec.lora_rank or 0
                grads.append(run.a(r * d_out * st.ab))
                grads.append(run.a(r * d_in * st.ab))

        def release(n: int) -> None:  # saved tensors consumed by the node that just ran
            for _ in range(min(n, len(saved))):
                run.f(saved.pop())

        # MLP
        g1 = run.a(bs * f * e)
        wgrad("down", f, h)
        release(1)
        if arch.gated_mlp:
            g2, g3 = run.a(bs * f * e), run.a(bs * f * e)
            run.f(g1)
            release(2)
            g4 = run.a(bs * f * e)
            run.f(g2)
            release(1)
            h1 = run.a(bs * h * e)
            wgrad("up", h, f)
            run.f(g3)
            h2 = run.a(bs * h * e)
            wgrad("gate", h, f)
            run.f(g4)
        else:
            g2 = run.a(bs * f * e)
            run.f(g1)
            release(2)
            h1 = run.a(bs * h * e)
            wgrad("up", h, f)
            run.f(g2)
            h2 = None
        tmp = [run.a(bs * h * 4) for _ in range(2)]
        run.f(*tmp)
        gn = run.a(bs * h * e)
        run.f(h1, h2)
        release(3)
        gm = run.a(bs * h * e)
        run.f(gx, gn)
        # attention
        go = run.a(bs * q * e)
        wgrad("o", q, h)
        if st.fused:
            acc = run.a(bs * q * 4) if e != 4 else None
            gq, gk, gv = run.a(bs * q * e), run.a(bs * kv * e), run.a(bs * kv * e)
            run.f(acc, go)
            release(4)
        else:
            # matmul backward, dropout, ``.to`` and softmax backward, scaling, matmul backward
            gp, gv = run.a(sq * e), run.a(bs * q * e)
            run.f(go)
            release(2)
            if arch.attention_dropout > 0:
                gd = run.a(sq * e)
                run.f(gp)
                release(2)
                gp = gd
            fp32 = arch.family.softmax_fp32 and e != 4
            g32 = run.a(sq * 4) if fp32 else None
            run.f(gp if fp32 else None)
            gs = run.a(sq * 4 if fp32 else sq * e)
            run.f(g32, None if fp32 else gp)
            release(1)
            gc = run.a(sq * e) if fp32 else gs
            run.f(gs if fp32 else None)
            gsc = run.a(sq * e)
            run.f(gc)
            gq, gk = run.a(bs * q * e), run.a(bs * q * e)
            run.f(gsc)
            release(2)
        grads_in = []
        for key, width, role in ((gq, q, "q"), (gk, kv, "k"), (gv, kv, "v")):
            hi = run.a(bs * h * e)
            wgrad(role if not arch.fused_qkv else "qkv", h, width)
            grads_in.append(hi)
            run.f(key)
        tmp = [run.a(bs * h * 4) for _ in range(2)]
        run.f(*tmp)
        gn = run.a(bs * h * e)
        run.f(*grads_in)
        release(len(saved))
        gi = run.a(bs * h * e)
        run.f(gm, gn)
        return gi


def _train(st: _Step) -> SimResult:
    run = _Run()
    arch, spec = st.arch, st.spec
    _build_model(run, st)
    adapters = [_adapters(st) for _ in range(arch.num_layers)] if st.lora else []
    for layer in adapters:
        for n in layer:
            run.a(n * st.ab)
    run.a(8 * st.bs)  # the input ids, alive for the whole run
    layer = _Layer(run, st)
    e, bs, h, V = st.e, st.bs, st.h, st.V
    states: list[Block] = []
    ws_fwd = ws_bwd = None
    ckpt = spec.grad_ckpt == "full"
    trainable = ([n for layer_ in adapters for n in layer_] if st.lora else None)
    # the training cache's k / v copies that attention does not save, held by the model
    # output until it is dropped (components.training_cache_forward_bytes), one per layer
    cache_per_layer = st.C.training_cache_forward_bytes(arch, spec, st.b, st.s) // max(1, arch.num_layers)
    for _step in range(TRAIN_STEPS):
        grads: list[Block] = []
        emb = run.a(bs * h * (4 if st.prec.amp else e))
        if ws_fwd is None:
            ws_fwd = run.a(library_workspace_bytes(False))
        x = emb
        saved_per_layer = []
        casts_per_layer: list[list[Block]] = []
        cache: list[Block] = []
        for _i in range(arch.num_layers):
            if ckpt:
                out, sv = layer.forward(x, grad=False)
                saved_per_layer.append(x)  # the checkpoint keeps the layer input
            else:
                out, sv = layer.forward(x, grad=True)
                saved_per_layer.append(sv)
                if x not in sv:
                    run.f(x)
            if cache_per_layer:
                cache.append(run.a(cache_per_layer))
            casts_per_layer.append(layer.take_casts())
            x = out
        # final norm, LM head, loss (transformers ForCausalLMLoss: fp32 upcast, log_softmax)
        fin: list[Block] = []
        if arch.final_norm:
            xn = layer.norm(fin, True, True)
        else:
            xn = run.a(bs * h * e)
        fin.append(x)
        head_cast = run.a(V * arch.embed_width * e) if st.prec.amp and arch.head in ("lm", "mlm") else None
        logits = run.a(bs * V * e)
        up32 = run.a(bs * V * 4) if e != 4 else None
        lab = run.a(8 * bs)
        lp = run.a(bs * V * 4)
        run.f(up32)
        if ckpt:  # the autocast context exits: casts nothing saved are released
            for casts in casts_per_layer:
                run.f(*casts)
        kept = logits if R.keeps_outputs(spec) else None
        if kept is None:
            run.f(logits, *cache)  # del out: its logits and its cache
            cache = []
        # backward
        g_lp = run.a(bs * V * 4)
        g_in = run.a(bs * V * 4)
        run.f(g_lp, lp, lab)
        g_lo = run.a(bs * V * e) if e != 4 else g_in
        if e != 4:
            run.f(g_in)
        if ws_bwd is None:  # the autograd thread's cuBLAS workspace, at its first matmul
            ws_bwd = run.a(library_workspace_bytes(True) - library_workspace_bytes(False))
        gx = run.a(bs * h * e)
        head_g = run.a(V * arch.embed_width * st.g) if spec.task == "train" else None
        run.f(g_lo, head_cast)
        tmp = [run.a(bs * h * 4) for _ in range(2)]
        run.f(*tmp)
        gxn = run.a(bs * h * e)
        run.f(gx, *fin, xn)
        gx = gxn
        for i in reversed(range(arch.num_layers)):
            if ckpt:
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
        if spec.task == "train":
            dense = run.a(V * arch.embed_width * st.g)
            if arch.tie_word_embeddings and head_g is not None:
                summed = run.a(V * arch.embed_width * st.g)
                run.f(head_g, dense)
                grads.append(summed)
            else:
                grads += [dense] + ([head_g] if head_g is not None else [])
        # optimizer step: states created in the first step, then foreach temporaries
        sizes = trainable if trainable is not None else _all_param_sizes(st)
        sb = st.ab if st.lora else st.st
        if not states:
            per = 2 if spec.optimizer in ("adamw", "adam") else 1 if spec.optimizer == "sgd-momentum" else 0
            for n in sizes:
                for _ in range(per):
                    states.append(run.a(n * sb))
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
        run.f(kept, *cache)  # the loop's output reference (logits, cache) ends with the step
    return SimResult(run.alloc.peak_allocated, run.alloc.reserved)


def _all_param_sizes(st: _Step) -> list[int]:
    emb, layers, tail, _ = st.parameter_tensors()
    out = list(emb)
    for layer in layers:
        out += layer
    return out + tail


def _infer(st: _Step) -> SimResult:
    run = _Run()
    arch, spec = st.arch, st.spec
    _build_model(run, st)
    e, bs, h, V, b = st.e, st.bs, st.h, st.V, st.b
    ids = run.a(8 * bs)
    layer = _Layer(run, st)
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
    seq_ids = ids
    for t in range(spec.new_tokens):
        l32 = run.a(b * V * 4)
        run.f(last)
        nxt = run.a(8 * b)
        new_ids = run.a(8 * b * (st.s + t + 1))
        run.f(seq_ids, l32, nxt)
        seq_ids = new_ids
        if t == spec.new_tokens - 1:
            break
        x = run.a(b * h * e)
        pos = st.s + t + 1
        for i in range(arch.num_layers):
            t1 = run.a(b * (st.q + 2 * st.kv) * e)
            for j in range(2):  # DynamicCache.update: torch.cat([cache, new], dim=-2)
                new = run.a(b * kvh * pos * d * spec.kv_bytes)
                run.f(cache[i][j])
                cache[i][j] = new
            t2 = run.a(b * st.q * e)
            run.f(t1)
            mlp = run.a(3 * b * st.f * e)
            run.f(t2, mlp)
            out = run.a(b * h * e)
            run.f(x)
            x = out
        last = run.a(b * V * e)
        run.f(x)
    return SimResult(run.alloc.peak_allocated, run.alloc.reserved)


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
    st = _Step(arch, spec)
    return _infer(st) if spec.task == "inference" else _train(st)


def simulated_reserve_bytes(arch: ModelArchitecture, spec: TrainingSpec) -> int | None:
    """The allocator reserve (reserved - allocated at the peaks, bytes) of the simulated run,
    or ``None`` where the order is not modelled (the analytic share applies)."""
    res = simulate(arch, spec)
    return None if res is None else res.reserve
