"""One transformer layer's forward and backward as allocations (:class:`LayerEvents`), with
what they allocate through and from -- the run's allocator (:class:`Run`) and the spec's shapes
(:class:`StepShapes`) -- for the step replay of :mod:`.cuda_step_events` (its module doc gives
the loop, the sources and what is not known).

The tensor-level order per op follows the ``transformers`` modules (Llama / GPT-2 / BERT
layers) and autograd: a node runs backward when its output gradient is complete, allocates its
input gradients (and a weight gradient, which ``AccumulateGrad`` keeps as ``.grad``), then its
saved tensors and the output gradient are released (``torch/csrc/autograd/engine.cpp``,
``retain_graph=False``). A layer's saved tensors are the estimator's (their sum is matched to
:func:`~gpumem_tui.estimator.components.layer_activations` by one remainder tensor).
"""

from __future__ import annotations

from gpumem_tui.estimator.architecture import ModelArchitecture
from gpumem_tui.estimator.devices.cuda_allocator_sim import Block, CachingAllocator
from gpumem_tui.estimator.spec import TrainingSpec


class Run:
    """The allocator of one simulated run: ``a(nbytes)`` allocates (an int; returns the block
    as the tensor's handle), ``f(*handles)`` frees them in order (``None`` skipped). Handles of
    freed tensors must not be used again: the allocator reuses the block objects."""

    def __init__(self) -> None:
        self.alloc = CachingAllocator()
        self.a = self.alloc.take
        self.f = self.alloc.release_all


class StepShapes:
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


class LayerEvents:
    """One transformer layer's forward and backward as allocations (see the module doc)."""

    def __init__(self, run: Run, st: StepShapes) -> None:
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
        """Run the layer on ``x`` (freed by the caller); returns (output handle, saved handles).

        The order of the ``transformers`` layer: the attention block (norm, q/k/v projections
        and rotary embedding: :meth:`qkv_forward`; attention: :meth:`attention_forward`; the
        output projection: :meth:`out_projection`) and its residual add, then the MLP block
        (:meth:`mlp_forward`) and its residual add. With ``grad`` the tensors autograd saves
        are kept, topped up to the analytic layer activations (:meth:`top_up_saved`)."""
        run, arch = self.run, self.st.arch
        # a LayerNorm saves its input: the layer input stays alive until this layer's backward
        saved: list[Block] = [x] if grad and arch.norm == "layernorm" else []
        start = run.alloc.allocated
        attn_in = self.qkv_forward(saved, grad)
        ao = self.attention_forward(attn_in, saved, grad)
        mid = self.residual_add(self.out_projection(ao, saved, grad))
        out_key = self.residual_add(self.mlp_forward(saved, grad))
        if grad and arch.norm == "layernorm" and not arch.family.parallel_residual:
            # the second LayerNorm's input (a parallel-residual layer normalises its input x
            # twice, saved already: GPT-NeoX, components.layer_activations' ``inputs_read``)
            saved.append(mid)
        else:
            run.f(mid)
        if grad:
            self.top_up_saved(x, saved, start)
        return out_key, saved

    def qkv_forward(self, saved: list[Block], grad: bool) -> list[Block]:
        """The attention block's norm, the q/k/v projections (one fused qkv Linear or three)
        and the rotary embedding (:meth:`rotary`); returns attention's input handles, with
        the training cache's k / v copies where they replace them (:meth:`cache_copies`)."""
        st, run, arch = self.st, self.run, self.st.arch
        h, q, kv = st.h, st.q, st.kv
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
        attn_in = parts if arch.learned_positions else self.rotary(parts)
        if st.fused and arch.fused_qkv and grad and st.C.training_cache_copies(arch, st.spec):
            attn_in = self.cache_copies(attn_in)
        return attn_in

    def rotary(self, parts: list[Block]) -> list[Block]:
        """Rotary position embedding of q and k (``q * cos + rotate_half(q) * sin``, the same
        for k: transformers ``apply_rotary_pos_emb``); ``parts`` are the projections' outputs
        (q, k, v or the fused qkv); returns (rotary q, rotary k, v) or (rotary q, rotary k,
        fused output): the unrotated q and k are freed."""
        st, run = self.st, self.run
        e, bs = st.e, st.bs
        rq = []
        for width in (st.q, st.kv):
            t1, t2 = run.a(bs * width * e), run.a(bs * width * e)
            t3 = run.a(bs * width * e)
            run.f(t1, t2)
            t4 = run.a(bs * width * e)
            run.f(t3)
            rq.append(t4)
        v_key = parts[-1] if len(parts) == 3 else None
        run.f(*(parts[:2] if len(parts) == 3 else ()))
        return rq + ([v_key] if v_key is not None else parts)

    def attention_forward(self, attn_in: list[Block], saved: list[Block], grad: bool) -> Block:
        """Scaled dot-product attention over ``attn_in``, by a fused kernel
        (:meth:`fused_attention`) or eagerly (:meth:`eager_attention`); returns the
        attention output's handle (the output projection's input)."""
        if self.st.fused:
            return self.fused_attention(attn_in, saved, grad)
        return self.eager_attention(attn_in, saved, grad)

    def fused_attention(self, attn_in: list[Block], saved: list[Block], grad: bool) -> Block:
        """A fused SDPA / FlashAttention kernel: its output and the fp32 log-sum-exp per head
        and position (``b x a x s``), saved for backward with the kernel's inputs."""
        return self.sdpa_kernel(attn_in, self.st.e, saved, grad)

    def sdpa_kernel(self, inputs: list[Block], elem: int, saved: list[Block], grad: bool) -> Block:
        """The fused kernel over its ``inputs`` (q, k, v): its output (``elem`` bytes per
        element) and the fp32 log-sum-exp, saved for backward with the inputs (freed without
        grad); returns the output's handle."""
        st, run = self.st, self.run
        out = run.a(st.bs * st.q * elem)
        lse = run.a(st.b * st.a * st.s * 4)
        if grad:
            saved += inputs + [lse]
        else:
            run.f(*inputs, lse)
        return out

    def eager_attention(self, attn_in: list[Block], saved: list[Block], grad: bool) -> Block:
        """Eager attention (transformers ``eager_attention_forward``): k / v repeated for
        grouped-query heads where the family repeats them, the ``b x a x s x s`` scores,
        softmax and dropout, the weighted sum of v; returns the output's handle (the
        ``transpose().contiguous()`` copy of the weighted sum)."""
        st, run, arch = self.st, self.run, self.st.arch
        e, bs, q = st.e, st.bs, st.q
        sq = st.b * st.a * st.s * st.s
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
        return ao

    def out_projection(self, ao: Block, saved: list[Block], grad: bool) -> Block:
        """The attention output projection ``o`` on ``ao`` and the hidden dropout; returns
        the handle the residual adds."""
        st, run = self.st, self.run
        o = self.linear(True, st.q, st.h, "o", saved, grad)
        if grad and st.saves_input("o") and not st.fused:
            saved.append(ao)
        elif not (grad and st.fused):
            run.f(ao)
        elif grad and st.fused:
            saved.append(ao)
        return self.hidden_dropout(o, saved, grad)

    def hidden_dropout(self, x: Block, saved: list[Block], grad: bool) -> Block:
        """Dropout on a block's output in training (the family's ``hidden_dropout``): a
        saved one-byte mask and a new output; returns the output's handle (``x`` freed)."""
        st, run = self.st, self.run
        if st.arch.hidden_dropout > 0 and grad:
            m = run.a(st.bs * st.h)
            d = run.a(st.bs * st.h * st.e)
            saved.append(m)
            run.f(x)
            return d
        return x

    def residual_add(self, x: Block) -> Block:
        """The residual add of a block's output ``x`` (freed); returns the sum's handle."""
        st, run = self.st, self.run
        out = run.a(st.bs * st.h * st.e)
        run.f(x)
        return out

    def mlp_forward(self, saved: list[Block], grad: bool) -> Block:
        """The MLP block: its norm, the up (and gate) projections with the activation
        (:meth:`gated_up_projection` or :meth:`up_projection`), the down projection and the
        hidden dropout; returns the handle the residual adds."""
        st, run, arch = self.st, self.run, self.st.arch
        n2 = self.norm(saved, grad, True)
        if arch.gated_mlp:
            mlp_saved, prod = self.gated_up_projection(saved, grad)
        else:
            mlp_saved, prod = self.up_projection(saved, grad)
        down_saves = st.saves_input("down") or arch.activation == "relu"
        if grad and any(st.saves_input(r) for r in ("gate", "up", "gate_up")):
            saved.append(n2)
        else:
            run.f(n2)
        dn = self.linear(True, st.f, st.h, "down", saved, grad)
        if grad:
            saved += mlp_saved + ([prod] if down_saves else [])
            if not down_saves:
                run.f(prod)
        else:
            run.f(*mlp_saved, prod)
        return self.hidden_dropout(dn, saved, grad)

    def gated_up_projection(self, saved: list[Block], grad: bool) -> tuple[list[Block], Block]:
        """A gated MLP's gate and up projections (one fused ``gate_up`` Linear or two), the
        activation of the gate and the product ``act(gate) * up``; returns (the tensors its
        backward needs, the product: the down projection's input)."""
        st, run, arch = self.st, self.run, self.st.arch
        e, bs, h, f = st.e, st.bs, st.h, st.f
        if arch.fused_gate_up:
            gu = self.linear(True, h, 2 * f, "gate_up", saved, grad)
            act = run.a(bs * f * e)
            prod = run.a(bs * f * e)
            return [gu, act], prod
        gate = self.linear(True, h, f, "gate", saved, grad)
        act = run.a(bs * f * e)
        up = self.linear(True, h, f, "up", saved, grad)
        prod = run.a(bs * f * e)
        return [gate, act, up], prod

    def up_projection(self, saved: list[Block], grad: bool) -> tuple[list[Block], Block]:
        """A plain MLP's up projection and activation (``gelu_new``'s tanh form keeps three
        temporaries); returns (the tensors its backward needs, the activation: the down
        projection's input)."""
        st, run, arch = self.st, self.run, self.st.arch
        e, bs, h, f = st.e, st.bs, st.h, st.f
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
        return mlp_saved, prod

    def top_up_saved(self, x: Block, saved: list[Block], start: int) -> None:
        """Top the layer's saved bytes up to the analytic estimate's
        (:func:`~gpumem_tui.estimator.components.layer_activations`) with one remainder
        tensor; ``start`` is the allocated bytes before the layer ran (the layer output is
        not saved; a saved layer input counts)."""
        st, run = self.st, self.run
        have = run.alloc.allocated - start - (st.bs * st.h * st.e)
        if saved and saved[0] == x:
            have += x.size
        rest = st.layer_saved - have
        if rest > 0:
            saved.append(run.a(int(rest)))

    # backward ---------------------------------------------------------------------------
    def backward(self, gx: Block, saved: list[Block], grads: list[Block]) -> Block:
        """The layer's backward from the output gradient ``gx`` (freed here); weight
        gradients appended to ``grads``; returns the input gradient's handle.

        Autograd's order, the reverse of :meth:`forward`: the MLP block
        (:meth:`mlp_backward`), attention and its output projection
        (:meth:`attention_backward`), the q/k/v projections and the first norm
        (:meth:`qkv_backward`); each node releases the saved tensors it consumed."""
        saved = list(saved)
        gm = self.mlp_backward(gx, saved, grads)
        gq, gk, gv = self.attention_backward(saved, grads)
        return self.qkv_backward(gq, gk, gv, gm, saved, grads)

    def wgrad(self, role: str, d_in: int, d_out: int, grads: list[Block]) -> None:
        """The weight gradient of the Linear of ``role`` (``AccumulateGrad`` keeps it as
        ``.grad``), appended to ``grads``; with LoRA the adapter's two gradients, if adapted."""
        st, run = self.st, self.run
        if not st.lora:
            grads.append(run.a(d_in * d_out * st.g))
        elif role in st.targets:
            r = st.spec.lora_rank or 0
            grads.append(run.a(r * d_out * st.ab))
            grads.append(run.a(r * d_in * st.ab))

    def release(self, saved: list[Block], n: int) -> None:
        """Free the last ``n`` saved tensors: those consumed by the node that just ran."""
        for _ in range(min(n, len(saved))):
            self.run.f(saved.pop())

    def norm_backward(self) -> Block:
        """A norm's backward: two fp32 temporaries, then its input gradient's handle."""
        st, run = self.st, self.run
        tmp = [run.a(st.bs * st.h * 4) for _ in range(2)]
        run.f(*tmp)
        return run.a(st.bs * st.h * st.e)

    def mlp_backward(self, gx: Block, saved: list[Block], grads: list[Block]) -> Block:
        """The MLP block's backward from ``gx`` (freed): the down projection, the
        activation and up (and gate) projections (:meth:`gated_mlp_backward` or
        :meth:`plain_mlp_backward`), the norm; returns the gradient of the block's input
        (the residual stream)."""
        st, run = self.st, self.run
        g1 = run.a(st.bs * st.f * st.e)
        self.wgrad("down", st.f, st.h, grads)
        self.release(saved, 1)
        if st.arch.gated_mlp:
            h1, h2 = self.gated_mlp_backward(g1, saved, grads)
        else:
            h1, h2 = self.plain_mlp_backward(g1, saved, grads)
        gn = self.norm_backward()
        run.f(h1, h2)
        self.release(saved, 3)
        gm = run.a(st.bs * st.h * st.e)
        run.f(gx, gn)
        return gm

    def gated_mlp_backward(self, g1: Block, saved: list[Block], grads: list[Block]) -> tuple[Block, Block]:
        """From the product's gradient ``g1`` (freed): the gradients of ``act(gate)`` and
        ``up``, the activation's backward, then the up and gate projections'; returns their
        two input gradients."""
        st, run = self.st, self.run
        e, bs, h, f = st.e, st.bs, st.h, st.f
        g2, g3 = run.a(bs * f * e), run.a(bs * f * e)
        run.f(g1)
        self.release(saved, 2)
        g4 = run.a(bs * f * e)
        run.f(g2)
        self.release(saved, 1)
        h1 = run.a(bs * h * e)
        self.wgrad("up", h, f, grads)
        run.f(g3)
        h2 = run.a(bs * h * e)
        self.wgrad("gate", h, f, grads)
        run.f(g4)
        return h1, h2

    def plain_mlp_backward(self, g1: Block, saved: list[Block], grads: list[Block]) -> tuple[Block, None]:
        """From the activation's output gradient ``g1`` (freed): the activation's backward,
        then the up projection's; returns (its input gradient, ``None``)."""
        st, run = self.st, self.run
        g2 = run.a(st.bs * st.f * st.e)
        run.f(g1)
        self.release(saved, 2)
        h1 = run.a(st.bs * st.h * st.e)
        self.wgrad("up", st.h, st.f, grads)
        run.f(g2)
        return h1, None

    def attention_backward(self, saved: list[Block], grads: list[Block]) -> tuple[Block, Block, Block]:
        """The output projection's backward, then attention's (the fused kernel's backward,
        or :meth:`eager_attention_backward`); returns the gradients of q, k and v."""
        st, run = self.st, self.run
        e, bs, q, kv = st.e, st.bs, st.q, st.kv
        go = run.a(bs * q * e)
        self.wgrad("o", q, st.h, grads)
        if not st.fused:
            return self.eager_attention_backward(go, saved)
        acc = run.a(bs * q * 4) if e != 4 else None
        gq, gk, gv = run.a(bs * q * e), run.a(bs * kv * e), run.a(bs * kv * e)
        run.f(acc, go)
        self.release(saved, 4)
        return gq, gk, gv

    def eager_attention_backward(self, go: Block, saved: list[Block]) -> tuple[Block, Block, Block]:
        """Eager attention's backward from its output gradient ``go`` (freed); returns the
        gradients of q, k and v."""
        st, run, arch = self.st, self.run, self.st.arch
        e, bs, q = st.e, st.bs, st.q
        sq = st.b * st.a * st.s * st.s
        # matmul backward, dropout, ``.to`` and softmax backward, scaling, matmul backward
        gp, gv = run.a(sq * e), run.a(bs * q * e)
        run.f(go)
        self.release(saved, 2)
        if arch.attention_dropout > 0:
            gd = run.a(sq * e)
            run.f(gp)
            self.release(saved, 2)
            gp = gd
        fp32 = arch.family.softmax_fp32 and e != 4
        g32 = run.a(sq * 4) if fp32 else None
        run.f(gp if fp32 else None)
        gs = run.a(sq * 4 if fp32 else sq * e)
        run.f(g32, None if fp32 else gp)
        self.release(saved, 1)
        gc = run.a(sq * e) if fp32 else gs
        run.f(gs if fp32 else None)
        gsc = run.a(sq * e)
        run.f(gc)
        gq, gk = run.a(bs * q * e), run.a(bs * q * e)
        run.f(gsc)
        self.release(saved, 2)
        return gq, gk, gv

    def qkv_backward(self, gq: Block, gk: Block, gv: Block, gm: Block, saved: list[Block],
                     grads: list[Block]) -> Block:
        """The q/k/v projections' backward from their output gradients (freed) and the first
        norm's; the rest of the saved tensors are released; returns the layer input's
        gradient: the norm's plus the residual's ``gm`` (freed)."""
        st, run, arch = self.st, self.run, self.st.arch
        e, bs, h, q, kv = st.e, st.bs, st.h, st.q, st.kv
        grads_in = []
        for key, width, role in ((gq, q, "q"), (gk, kv, "k"), (gv, kv, "v")):
            hi = run.a(bs * h * e)
            self.wgrad(role if not arch.fused_qkv else "qkv", h, width, grads)
            grads_in.append(hi)
            run.f(key)
        gn = self.norm_backward()
        run.f(*grads_in)
        self.release(saved, len(saved))
        gi = run.a(bs * h * e)
        run.f(gm, gn)
        return gi
