"""Phases of one step -> live bytes per phase -> peak and its breakdown.

Training (steady state, i.e. the second step: optimizer states exist, gradients were freed by
``zero_grad(set_to_none=True)``): forward (end of forward; with checkpointing also a layer's
transient working set), backward (the largest of several moments: the log-softmax backward,
the LM head, the final norm, the last and the first layer -- a walk through the layer's
backward in autograd order, see ``components.layer_backward.layer_backward_excess`` -- and the
embedding), optimizer step. Inference: prefill (attention/MLP working set of a layer, then the logits)
and decode. Checked against torch's MemTracker (benchmarks/estimator_accuracy.py, torch 2.13
CPU): 50 benchmark cases of 7 model families, median error 0.00 %, worst 0.13 %; 252 held-out
cases (random draws of seeds 11, 77, 2027, 4242, 9001, 31337 and the SDPA-dropout set), worst 3.9 %, 251
within 1 %. Each moment is a sum of component terms from
:mod:`gpumem_tui.estimator.components` (one module per component); the peak is the largest
moment and its breakdown is the ``components_bytes`` of the result.

Figures: ``peak_bytes`` on ``--device cuda`` includes the CUDA context and the allocator
reserve (comparable to NVML "used" of the process); ``figures`` in the JSON also gives the
allocated peak (comparable to ``torch.cuda.max_memory_allocated``) and the reserved peak
(``torch.cuda.max_memory_reserved``). On ``--device cpu`` all three are the live tensor bytes
(what torch's ``MemTracker`` reports).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from gpumem_tui.estimator.architecture import ModelArchitecture
from gpumem_tui.estimator.component_keys import COMPONENT_KEYS  # re-exported: its users import it from here
from gpumem_tui.estimator.checkpointing import CheckpointTerms, checkpoint_terms
from gpumem_tui.estimator.components.activations import final_saved_bytes
from gpumem_tui.estimator.components.context_and_reserve import allocator_reserve_bytes, cuda_context_bytes
from gpumem_tui.estimator.components.gradients import HeadGradTemps, gradient_bytes, head_gradient_temporaries
from gpumem_tui.estimator.components.inference import inference_working_bytes
from gpumem_tui.estimator.components.kv_cache import kv_cache_bytes, training_cache_copies, training_cache_forward_bytes
from gpumem_tui.estimator.components.layer_backward import layer_backward_excess
from gpumem_tui.estimator.components.logits_loss import (
    LogitsLoss, inference_logits_bytes, kept_output_bytes, logits_loss_bytes)
from gpumem_tui.estimator.components.lora import trainable_params
from gpumem_tui.estimator.components.optimizer_states import optimizer_intermediate_bytes, optimizer_state_bytes
from gpumem_tui.estimator.components.parameters import dequant_bytes, parameter_bytes
from gpumem_tui.estimator.precision import Precision, precision
from gpumem_tui.estimator.recipes import rules as R
from gpumem_tui.estimator.devices import cuda_kernels, cuda_step_events
from gpumem_tui.estimator.spec import TrainingSpec, check_spec_for


@dataclass(frozen=True)
class Phase:
    """One phase's peak: ``live_bytes`` (same figure as ``Estimate.peak_bytes``) and its
    breakdown by component (bytes)."""

    name: str
    live_bytes: int
    components: dict[str, int]


@dataclass(frozen=True)
class Estimate:
    """Predicted memory of one step on one device (bytes everywhere).

    ``components_bytes`` is the breakdown at the peak phase (keys: :data:`COMPONENT_KEYS`),
    summing to ``peak_bytes``. ``allocated_peak_bytes`` excludes context and reserve.
    ``simulated_reserve_bytes``: the caching allocator's reserve simulated for this exact shape
    (:mod:`gpumem_tui.estimator.devices.cuda_step_events`; None where not modelled, and then
    ``components_bytes["allocator_reserve"]`` is the analytic share). It is the
    ``allocator_reserve`` component, so ``peak_bytes`` (NVML used on CUDA) and ``figures``
    agree. The simulated reserve is not monotone in batch and sequence (where blocks land
    changes with every size; tens of MiB on the catalogue models), nor is the CUDA peak where
    the SDPA kernel changes with the shape (see :mod:`gpumem_tui.estimator.solve`).
    """

    model: str
    total_params: int
    trainable_params: int
    components_bytes: dict[str, int]
    peak_bytes: int
    peak_phase: str
    phases: tuple[Phase, ...]
    assumptions: tuple[str, ...]
    allocated_peak_bytes: int
    device: str
    method: str = "detailed"
    extra: dict[str, Any] = field(default_factory=dict)
    simulated_reserve_bytes: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The JSON shape of issue 3 (bytes as ints), plus ``model``, ``method`` and
        ``figures`` (which torch / NVML figure each total compares to)."""
        reserved = self.allocated_peak_bytes + self.components_bytes.get("allocator_reserve", 0)
        return {
            "model": self.model,
            "method": self.method,
            "total_params": self.total_params,
            "trainable_params": self.trainable_params,
            "components_bytes": {k: int(self.components_bytes.get(k, 0)) for k in COMPONENT_KEYS},
            "peak_bytes": int(self.peak_bytes),
            "peak_phase": self.peak_phase,
            "phases": [{"name": p.name, "live_bytes": int(p.live_bytes)} for p in self.phases],
            "assumptions": list(self.assumptions),
            "figures": {
                "allocated": int(self.allocated_peak_bytes),
                "reserved": int(reserved),
                "nvml_used": int(self.peak_bytes) if self.device == "cuda" else None,
                "reserve_model": ("simulated caching allocator" if self.simulated_reserve_bytes is not None
                                  else "analytic share" if self.device == "cuda" else None),
                "peak_bytes_is": "nvml_used" if self.device == "cuda" else "live tensor bytes (MemTracker)",
            },
        }


def _moment(**parts: int) -> dict[str, int]:
    out = dict.fromkeys(COMPONENT_KEYS, 0)
    for key, value in parts.items():
        out[key] += int(max(0, value))
    return out


@dataclass(slots=True)  # not frozen: a frozen init costs ~10x, and this is built per call
class _Casts:
    """16-bit weight copies autocast holds (bytes, one device; 0 without torch AMP): through the
    forward (``forward``) and what is left of them at the LM-head (and log-softmax), the
    final-norm and the last layer's backward."""

    forward: float
    head: float
    final: float
    last_layer: float


def _autocast_casts(arch: ModelArchitecture, spec: TrainingSpec, prec: Precision) -> _Casts:
    """Weight casts held by autocast from forward to backward (torch AMP only): 16-bit copies
    of every Linear weight (incl. the LM head; BERT's MLM head: transform dense + decoder),
    cached by autocast. In backward (outside the autocast context, whose cast cache is cleared
    on exit) a cast lives only while the op that saved it has not run backward; with full
    checkpointing the layers saved nothing in forward and each re-run layer casts its weights
    again (torch/utils/checkpoint.py recomputes under the forward's autocast state): one
    layer's casts at a time (measured, MemTracker, CPU autocast with checkpointing)."""
    e, h = prec.compute, arch.hidden_size
    amp_casts = 0
    head_lin = arch.vocab_size * arch.embed_width if arch.head == "lm" else (arch.vocab_size + h) * h if arch.head == "mlm" else 0
    if R.kbit_head_autocast(spec):
        # k-bit preparation: only the fp32 LM head is an autocast cast (the 4-bit Linears run
        # bitsandbytes' own op, not on autocast's lists); freed at the LM head's backward
        head = head_lin * e / (spec.tp * spec.pp)
        return _Casts(forward=head, head=head, final=0, last_layer=0)
    if prec.amp:
        amp_casts = (arch.linear_weight_params + head_lin) * e / (spec.tp * spec.pp)
    layer_casts = arch.linear_weight_params * e / (spec.tp * spec.pp) if prec.amp else 0
    if spec.grad_ckpt == "full":
        # until the LM head has run backward only its own (saved) cast remains
        return _Casts(forward=amp_casts, head=amp_casts - layer_casts, final=0,
                      last_layer=layer_casts / max(1, arch.num_layers))
    return _Casts(forward=amp_casts, head=amp_casts, final=amp_casts, last_layer=amp_casts)


@dataclass(slots=True)  # not frozen: a frozen init costs ~10x, and this is built per call
class _StepTerms:
    """The component terms a training step's moments combine (bytes, one device).

    ``P`` parameters, ``O`` optimizer states, ``G`` gradients after backward, ``stored`` the
    gradients alive before backward (``G`` when they persist, else 0), ``A`` activations at
    the end of forward, ``ck`` the checkpointing terms, ``LL`` logits and loss, ``X`` a
    layer's backward temporaries above its saved set (of which ``X_grads`` are its weight
    gradients), ``casts`` autocast's weight copies, ``head_w`` / ``emb_g`` the LM head's and
    the embeddings' stored gradients, ``HT`` the ``(V, h)`` gradient temporaries,
    ``labels_freed`` what nll_loss's backward frees, ``grad_hidden`` the incoming ``b s h``
    gradient, ``kept`` the logits the loop keeps, ``tied_sub`` a tied head's gradient not yet
    stored, ``e`` bytes per compute element.
    """

    P: int
    O: int
    G: int
    stored: int
    A: float
    ck: CheckpointTerms
    LL: LogitsLoss
    X: float
    X_grads: float
    casts: _Casts
    head_w: float
    emb_g: float
    HT: HeadGradTemps
    labels_freed: int
    grad_hidden: int
    kept: int
    tied_sub: float
    persist: bool
    e: int

    def grads(self, partial: float) -> float:
        """Gradients alive once ``partial`` of them have been produced in backward."""
        return self.G if self.persist else partial - self.tied_sub


def _step_terms(arch: ModelArchitecture, spec: TrainingSpec) -> _StepTerms:
    """Each component term of one training step of ``spec`` on ``arch``, computed once."""
    b, s = spec.batch, spec.seq
    prec = precision(spec)
    G = gradient_bytes(arch, spec)
    XB = layer_backward_excess(arch, spec, b, s)
    X, X_grads = XB.total / spec.tp, XB.grads / (spec.tp * spec.pp)
    X += dequant_bytes(arch, spec, backward=True)  # a quantized weight dequantized for its backward matmul
    full_training = spec.task == "train"
    shard_g = (spec.tp * spec.pp) * (spec.dp if spec.zero >= 2 else 1)
    head_w = (arch.vocab_size * arch.embed_width * prec.grad / shard_g
              if full_training and arch.head in ("lm", "mlm") else 0)
    # (V, h) gradient temporaries: a tied head's pending contribution, the embedding backward's
    # dense gradient and sum, an untied head's new gradient when a .grad exists
    HT = head_gradient_temporaries(arch, spec)
    persist = spec.grads_persist
    ck = checkpoint_terms(arch, spec, b, s)  # the recipe's checkpointing policy
    return _StepTerms(
        P=parameter_bytes(arch, spec), O=optimizer_state_bytes(arch, spec), G=G,
        stored=G if persist else 0,  # gradients that exist before backward starts
        A=ck.activations, ck=ck, LL=logits_loss_bytes(arch, spec, b, s), X=X, X_grads=X_grads,
        casts=_autocast_casts(arch, spec, prec), head_w=head_w,
        emb_g=arch.param_breakdown()["embeddings"] * prec.grad / shard_g if full_training else 0, HT=HT,
        # by the log-softmax backward, nll_loss's backward has run: its saved labels are freed
        # and the incoming gradient (a scalar) exists
        labels_freed=8 * b * s - 4 if arch.kind == "decoder" and not arch.coarse else 0,
        grad_hidden=b * s * arch.hidden_size * prec.compute,
        # the training loop keeps the model output: its logits (b x s x V, compute dtype; the
        # loss upcasts a copy) outlive the loss through backward and the optimizer step
        kept=kept_output_bytes(arch, spec, b, s),
        # the partial sums count the head's (sharded) stored gradient, which a tied head does
        # not have yet
        tied_sub=0 if persist or not HT.pending else head_w, persist=persist, e=prec.compute)


def _training_moments(arch: ModelArchitecture, spec: TrainingSpec) -> list[tuple[str, str, dict[str, int]]]:
    """``(phase, moment, bytes per component)`` of each moment of a steady-state training step."""
    t = _step_terms(arch, spec)
    ids = 8 * spec.batch * spec.seq  # input ids stay alive through the step
    step = ("optimizer_step", "optimizer step", _moment(
        parameters=t.P, optimizer_states=t.O, gradients=t.G,
        optimizer_intermediates=optimizer_intermediate_bytes(arch, spec), activations=ids, logits_and_loss=t.kept))
    return (_forward_moments(arch, spec, t) + _head_backward_moments(arch, spec, t)
            + _layer_backward_moments(arch, spec, t) + [step])


def _forward_moments(arch: ModelArchitecture, spec: TrainingSpec,
                     t: _StepTerms) -> list[tuple[str, str, dict[str, int]]]:
    """End of forward; with checkpointing also a checkpointed layer's forward."""
    b, s = spec.batch, spec.seq
    moments = [("forward", "end of forward", _moment(
        parameters=t.P, optimizer_states=t.O, gradients=t.stored, activations=t.A + t.casts.forward,
        logits_and_loss=t.LL.forward_peak, kv_cache=training_cache_forward_bytes(arch, spec, b, s)))]
    if t.ck.reruns:
        # a checkpointed layer runs forward without saving: its working set is transient, as
        # in a no-grad forward (minus the residual tensors, which are the saved layer inputs)
        work = inference_working_bytes(arch, spec, b, s) - 3 * b * s * arch.hidden_size * t.e
        moments.append(("forward", "checkpointed layer forward", _moment(
            parameters=t.P, optimizer_states=t.O, gradients=t.stored, activations=t.A + t.casts.forward + work)))
    return moments


def _head_backward_moments(arch: ModelArchitecture, spec: TrainingSpec,
                           t: _StepTerms) -> list[tuple[str, str, dict[str, int]]]:
    """The log-softmax, LM-head and final-norm backward.

    A tied LM head's ``(V, h)`` gradient is a backward temporary until the embedding backward
    adds its part and AccumulateGrad stores the sum: reported with the activations (and,
    without stored gradients, taken out of the partial gradient sums)."""
    b, s, e, h = spec.batch, spec.seq, t.e, arch.hidden_size
    tied_temp = t.HT.pending
    # final norm backward: its fp32 (RMSNorm) or compute-dtype temporaries while the whole
    # forward's activations are still saved and the LM-head gradient exists
    norm_tmp = 4 * b * s * h * 4 if arch.norm == "rmsnorm" else 2 * b * s * h * e
    head_input = b * s * h * e if arch.kind == "decoder" and spec.task == "train" else 0
    return [
        ("backward", "log-softmax backward", _moment(
            parameters=t.P, optimizer_states=t.O, gradients=t.stored, activations=t.A + t.casts.head - t.labels_freed,
            logits_and_loss=t.LL.backward_peak + t.kept)),
        ("backward", "LM head backward", _moment(
            parameters=t.P, optimizer_states=t.O, gradients=t.grads(t.head_w),
            activations=t.A + t.casts.head + t.grad_hidden + tied_temp + t.HT.head_new,
            logits_and_loss=t.LL.head_grad + t.kept)),
        ("backward", "final norm backward", _moment(
            parameters=t.P, optimizer_states=t.O, gradients=t.grads(t.head_w),
            activations=t.A - head_input - t.labels_freed + t.casts.final + t.grad_hidden + norm_tmp + tied_temp,
            logits_and_loss=t.kept)),
    ]


def _layer_backward_moments(arch: ModelArchitecture, spec: TrainingSpec,
                            t: _StepTerms) -> list[tuple[str, str, dict[str, int]]]:
    """The last and the first layer's backward (a walk through the layer's backward in autograd
    order, :func:`~gpumem_tui.estimator.components.layer_backward.layer_backward_excess`) and
    the embedding backward."""
    b, s = spec.batch, spec.seq
    ck, tied_temp = t.ck, t.HT.pending
    final = final_saved_bytes(arch, spec, b, s)
    fixed = t.A - ck.per_saved * arch.num_layers
    layer_g = (t.G - t.emb_g - t.head_w * (not arch.tie_word_embeddings)) / max(1, arch.num_layers)
    # a tied embedding already holds the LM head's gradient
    emb_pending = t.emb_g - (t.head_w if arch.tie_word_embeddings else 0)
    return [
        ("backward", "last layer backward", _moment(
            parameters=t.P, optimizer_states=t.O, gradients=t.grads(t.head_w) + (0 if t.persist else t.X_grads),
            activations=t.A - final - t.labels_freed + t.casts.last_layer + t.grad_hidden + t.X - t.X_grads
            + ck.recompute + tied_temp, logits_and_loss=t.kept)),
        ("backward", "first layer backward", _moment(
            parameters=t.P, optimizer_states=t.O, gradients=t.grads(t.G - emb_pending - layer_g + t.X_grads),
            activations=fixed - final - t.labels_freed - ck.masks_freed + ck.per_saved + t.grad_hidden + t.X - t.X_grads
            + ck.recompute + tied_temp
            + t.casts.forward / max(1, arch.num_layers), logits_and_loss=t.kept)),
        ("backward", "embedding backward", _moment(
            parameters=t.P, optimizer_states=t.O, gradients=t.G, activations=8 * b * s + t.HT.embedding,
            logits_and_loss=t.kept)),
    ]


def _inference_moments(arch: ModelArchitecture, spec: TrainingSpec) -> list[tuple[str, str, dict[str, int]]]:
    b, s = spec.batch, spec.seq
    P = parameter_bytes(arch, spec)
    work = inference_working_bytes(arch, spec, b, s) + dequant_bytes(arch, spec)
    logits = inference_logits_bytes(arch, spec, b)
    ids = 8 * b * s
    if arch.kind == "encoder":
        return [("prefill", "forward", _moment(parameters=P, activations=work + ids,
                                              logits_and_loss=b * s * arch.vocab_size * precision(spec).compute))]
    kv_prefill = kv_cache_bytes(arch, spec, b, s, prefill=True)
    # generate(): the cache grows to prompt + new tokens (DynamicCache.update concatenates one
    # position per decode step); without --new-tokens ``seq`` is the whole context
    kv = kv_cache_bytes(arch, spec, b, s + spec.new_tokens)
    layers = max(1, arch.num_layers)
    hidden = 2 * b * s * arch.hidden_size * precision(spec).compute
    if spec.logits == "all":
        # a plain forward whose output stays alive: every position's logits (the LM head runs
        # on the whole sequence, no fp32 upcast without labels; transformers
        # ``LlamaForCausalLM.forward``) next to the KV cache it returns
        every = b * s * arch.vocab_size * precision(spec).compute
        # at the LM head only the final norm's output (its input) is left of the hidden states
        return [
            ("prefill", "prefill attention/MLP", _moment(parameters=P, kv_cache=kv_prefill, activations=work + ids)),
            ("prefill", "prefill logits (all positions)", _moment(parameters=P, kv_cache=kv_prefill,
                                                                  activations=hidden // 2 + ids, logits_and_loss=every)),
        ]
    return [
        ("prefill", "prefill attention/MLP", _moment(parameters=P, kv_cache=kv_prefill, activations=work + ids)),
        ("prefill", "prefill logits", _moment(parameters=P, kv_cache=kv_prefill, activations=hidden + ids,
                                              logits_and_loss=logits)),
        ("decode", "decode step", _moment(parameters=P, kv_cache=kv + kv // layers,
                                          activations=inference_working_bytes(arch, spec, b, 1), logits_and_loss=logits)),
    ]


def estimate(arch: ModelArchitecture, spec: TrainingSpec, *, simulate_allocator: bool = True,
             moment_extra: Callable[[str, str], dict[str, int]] | None = None) -> Estimate:
    """Estimate the peak memory of one step of ``spec`` on ``arch`` (bytes).

    ``simulate_allocator=False`` keeps the analytic allocator reserve on CUDA: fast (no
    allocation replay) and monotone in batch and sequence while the kernels stay the same,
    which :mod:`gpumem_tui.estimator.solve` uses to bracket its answer before checking it
    with the simulated reserve. ``moment_extra(phase, label)``: bytes per component a parallel
    strategy adds at that moment of the step (:mod:`gpumem_tui.estimator.parallel.per_rank`).

    Raises:
        SpecError: the spec contradicts the architecture (see ``check_spec_for``).
    """
    warnings = check_spec_for(arch, spec)
    moments = _inference_moments(arch, spec) if spec.task == "inference" else _training_moments(arch, spec)
    for _phase, _label, parts in moments if moment_extra is not None else ():
        for key, value in moment_extra(_phase, _label).items():
            parts[key] += int(value)
    ctx = cuda_context_bytes(spec, arch)
    if spec.device == "cuda":
        # cuBLAS workspaces: in torch allocated, counted with the transient tensors
        ws = cuda_kernels.library_workspace_bytes(training=spec.task != "inference")
        for _phase, _label, parts in moments:
            parts["optimizer_intermediates" if _phase == "optimizer_step" else "activations"] += ws
    phases: dict[str, tuple[int, str, dict[str, int]]] = {}
    for phase, label, parts in moments:
        total = sum(parts.values())
        if phase not in phases or total > phases[phase][0]:
            phases[phase] = (total, label, parts)
    peak_name = max(phases, key=lambda n: phases[n][0])
    peak_alloc, peak_label, peak_parts = phases[peak_name]
    transient = peak_parts["activations"] + peak_parts["logits_and_loss"] + peak_parts["optimizer_intermediates"]
    # CUDA: the reserve of this exact shape's allocation order replayed through the
    # caching-allocator model (cuda_step_events); the analytic share where the order is not
    # modelled. Either way it is the one reserve of ``peak_bytes``, its components and
    # ``figures`` (torch reserved, NVML used): no figure carries another reserve.
    simulated = (cuda_step_events.simulated_reserve_bytes(arch, spec)
                 if spec.device == "cuda" and simulate_allocator else None)
    reserve = allocator_reserve_bytes(spec, peak_alloc, transient) if simulated is None else simulated
    out_phases = []
    for name, (total, _label, parts) in phases.items():
        parts = dict(parts)
        parts["cuda_context"] = ctx
        if name == peak_name:
            parts["allocator_reserve"] = reserve
        else:
            # the analytic share of the phase's own transients, never above the peak phase's
            # reserved total (torch's reserved memory only grows within a step)
            parts["allocator_reserve"] = max(0, min(
                allocator_reserve_bytes(spec, total, parts["activations"] + parts["logits_and_loss"]
                                          + parts["optimizer_intermediates"]),
                peak_alloc + reserve - total))
        out_phases.append(Phase(name, sum(parts.values()), parts))
    comps = dict(peak_parts)
    comps["cuda_context"] = ctx
    comps["allocator_reserve"] = reserve
    assumptions = _assumptions(arch, spec, peak_label) + warnings
    return Estimate(
        model=arch.name,
        total_params=arch.total_params,
        trainable_params=trainable_params(arch, spec),
        components_bytes=comps,
        peak_bytes=sum(comps.values()),
        peak_phase=peak_name,
        phases=tuple(out_phases),
        assumptions=tuple(assumptions),
        allocated_peak_bytes=peak_alloc,
        device=spec.device,
        simulated_reserve_bytes=simulated,
    )


def _assumptions(arch: ModelArchitecture, spec: TrainingSpec, peak_label: str) -> list[str]:
    prec = precision(spec)
    out = [f"peak at {peak_label}"]
    if spec.recipe != "torch" and spec.task != "inference":
        r = R.recipe(spec)
        out.append(f"recipe {r.name}: {r.title}; read from {r.source} ({r.version})")
    out.extend(arch.notes)
    if spec.task != "inference":
        out.append("steady-state step: optimizer states exist, gradients freed by zero_grad(set_to_none=True)")
        if prec.amp:
            out.append("mixed precision = torch autocast: fp32 weights/gradients/states, 16-bit compute")
        elif R.autocast_over_16bit_weights(spec):
            out.append(f"the recipe runs the forward under torch autocast ({spec.dtype}) over the {spec.dtype} weights "
                       f"(Trainer {spec.dtype}=True): fp32 adapters and fp32 k-bit head are cast to {spec.dtype}")
        elif prec.master:
            out.append("mixed precision = DeepSpeed style: 16-bit weights/gradients, fp32 master + states")
        impl = {"single": "single-tensor loop", "foreach": "foreach (list-wide temporaries)",
                "fused": "fused kernel"}[spec.resolved_optimizer_impl]
        if spec.optimizer_impl == "auto":
            impl += (" (DeepSpeed default with ZeRO)" if spec.zero else f" ({spec.recipe} recipe's default)"
                     if R.default_optimizer_impl(spec) else f" (torch default on {spec.device})")
        out.append(f"optimizer implementation: {impl}")
        if spec.grads_persist:
            out.append("gradients stay allocated through forward and backward (accumulation / set_to_none=False)")
        if R.keeps_outputs(spec):
            out.append("the loop keeps the model output: its logits stay alive through backward and the optimizer step")
        if training_cache_copies(arch, spec):
            out.append("training forward with the config's use_cache=true (as model(input_ids, labels=...) runs): "
                       "transformers fills a KV cache and attention saves its copies of k and v")
    if not arch.family.sdpa and spec.attention == "sdpa":
        out.append(f"transformers has no SDPA path for {arch.model_type}: modelled as eager attention")
    if spec.tp > 1:
        out.append("tensor parallelism with sequence parallelism (Korthikanti et al. 2022)")
    if spec.pp > 1:
        out.append("pipeline parallelism 1F1B: the first stage's p micro-batches of activations and the last "
                   "stage's logits are both counted (an upper bound for any one stage)")
    if spec.device == "cuda":
        out.append(
            f"peak includes CUDA context ({cuda_context_bytes(spec, arch) >> 20} MiB, "
            + ("measured on this box" if spec.measured_context is not None else "as measured on H100 / CUDA 13")
            + ") and allocator reserve: "
            "compare with NVML used; 'figures.allocated' compares with torch.cuda.max_memory_allocated"
        )
    else:
        out.append(f"device {spec.device}: live tensor bytes (torch MemTracker), no context, no allocator reserve")
    if arch.num_experts:
        shared = " plus the shared expert" if arch.shared_expert_size else ""
        out.append(
            f"MoE routing assumption: balanced -- {arch.experts_per_token} of {arch.num_experts} experts per token{shared}, "
            f"each expert sees k/E of the tokens (as measured on CPU with random weights and tokens); a worst case that routes "
            f"every token to the same experts needs up to {arch.num_experts // max(1, arch.experts_per_token)}x "
            "the expert activations"
        )
    return out
