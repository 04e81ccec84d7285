"""One probe per training run, attached and marked on a framework's behalf, never fatal.

The callbacks of :mod:`gpumem_tui.integrations` share this: attach the probe
(:func:`gpumem_tui.probe.attach`) once with what the framework told them, mark phases from
the framework's hooks (the probe's own module and optimizer hooks mark most of them; a mark
of the phase already current does nothing, so a framework hook and a probe hook marking the
same moment agree), and close it when training ends. Whatever goes wrong -- a model the
probe cannot read, a probe already attached, a framework that calls hooks in an order this
code does not know -- turns into ONE ``RuntimeWarning`` (``warnings.warn``, so it shows once
per call site and tests can catch it) and the session goes quiet; training goes on.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

# token inputs only: an image or audio tensor has no sequence dimension the estimator means
_FORWARD_INPUTS = ("input_ids", "inputs_embeds", "x", "input")


def sequence_length(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[int | None, int | None]:
    """``(batch, seq)`` from a model call's inputs or a batch: the first 2-D+ tensor among
    ``input_ids``, ``inputs_embeds``... in ``kwargs``, a dict first positional argument, or
    the first positional tensor; a ``(b, s, ...)`` shape gives both, a tensor of one dimension
    only the batch. ``(None, None)`` when nothing has a shape."""
    candidates: list[Any] = [kwargs.get(name) for name in _FORWARD_INPUTS]
    for value in args[:2]:
        if isinstance(value, dict):
            candidates += [value.get(name) for name in _FORWARD_INPUTS]
        elif isinstance(value, (list, tuple)) and value:
            candidates.append(value[0])
        else:
            candidates.append(value)
    for value in candidates:
        shape = getattr(value, "shape", None)
        if shape is None or len(shape) == 0:
            continue
        dims = [int(d) for d in shape]
        return dims[0], (dims[1] if len(dims) >= 2 else None)
    return None, None


def check_version(who: str, package: str, version: object, known_majors: tuple[int, ...]) -> bool:
    """True when ``version``'s major number is one of ``known_majors`` (the releases this
    integration was written against); otherwise one ``RuntimeWarning`` saying so (the hooks and
    argument names it reads may differ: what it cannot read is left out) and False."""
    text = str(version)
    major = text.split(".", 1)[0]
    if major.isdigit() and int(major) in known_majors:
        return True
    warnings.warn(f"{who}: {package} {text} is not a version gpumem-tui knows (major "
                  f"{'/'.join(map(str, known_majors))}); probing what it can", RuntimeWarning, stacklevel=3)
    return False


def probe_options(setup: dict[str, Any], user: dict[str, Any], batch: int | None, seq: int | None) -> dict[str, Any]:
    """Keyword arguments for :func:`gpumem_tui.probe.attach`: ``batch``, ``seq`` and ``task``
    read from the framework (``setup["task"]``, default ``train``) unless the user's callback
    arguments ``user`` name them; the rest of ``setup`` goes to ``extra``, under the user's
    own ``extra``; any other user argument is passed on as given."""
    setup = dict(setup)
    options = dict(user)
    options.setdefault("task", setup.pop("task", "train"))
    setup.pop("task", None)
    options.setdefault("batch", batch)
    options.setdefault("seq", seq)
    options["extra"] = {**setup, **(options.get("extra") or {})}
    return options


class ProbeSession:
    """Holds the probe of one training run on behalf of a callback.

    ``name`` says who attached (shown in the warning). Attributes: ``probe`` (None until
    attached, and again after :meth:`close`), ``failed`` (the one warning's text, or None).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.probe: Any = None
        self.failed: str | None = None
        self._disarm: Callable[[], Any] | None = None

    def warn(self, what: str, exc: BaseException | None = None) -> None:
        """Warn once for this session (``RuntimeWarning``) and stop probing; training goes on."""
        if self.failed is None:
            detail = f": {type(exc).__name__}: {exc}" if exc is not None else ""
            self.failed = f"{self.name}: {what}{detail}; training goes on without the probe"
            warnings.warn(self.failed, RuntimeWarning, stacklevel=3)
        self.close()

    def attach(self, model: Any, optimizer: Any, **kwargs: Any) -> bool:
        """Attach the probe (:func:`gpumem_tui.probe.attach`) unless attached or failed;
        True when a probe is attached after the call. A failure warns once (never raises)."""
        if self.probe is not None or self.failed is not None:
            return self.probe is not None
        try:
            from gpumem_tui.probe import attach

            self.probe = attach(model, optimizer, **kwargs)
        except Exception as exc:
            self.warn("cannot attach the gpumem-tui probe", exc)
            return False
        writer_failed = getattr(getattr(self.probe, "_writer", None), "failed", None)
        if writer_failed:  # the writer already warned why (unsafe or unwritable directory)
            self.failed = f"{self.name}: the probe is not streaming: {writer_failed}"
        return True

    def attach_at_first_forward(self, model: Any, optimizer: Any, setup: dict[str, Any],
                                user: dict[str, Any], batch: int | None = None) -> None:
        """Attach when ``model`` is first called, with ``b`` and ``s`` read from that call's
        inputs (:func:`sequence_length`; ``batch`` when the inputs show none), ``setup`` and
        the user's arguments ``user`` (:func:`probe_options`). A torch forward pre-hook
        (``with_kwargs=True``) does it and removes itself; the first forward is marked, as the
        probe's own pre-hook joins only from the next call. Warns once if ``model`` cannot be
        hooked or the inputs have no sequence dimension (unless ``user`` gives ``seq``)."""
        register = getattr(model, "register_forward_pre_hook", None)
        if not callable(register):
            self.warn(f"cannot hook {type(model).__name__} (not a torch module)")
            return
        handle: list[Any] = []

        def first_forward(module: Any, args: tuple, kwargs: dict) -> None:
            while handle:
                handle.pop().remove()  # torch runs the hooks from a copy: removing here is safe
            self._disarm = None
            seen_batch, seq = sequence_length(args, kwargs)
            options = probe_options(setup, user, seen_batch or batch, seq)
            if options["seq"] is None:
                self.warn("the first batch has no (batch, sequence) shaped input; pass seq=")
            elif self.attach(model, optimizer, **options):
                self.mark("forward")

        result = self.guarded("cannot hook the model", register, first_forward, with_kwargs=True)
        if result is not None:
            handle.append(result)
            self._disarm = lambda: [h.remove() for h in handle]

    def mark(self, phase: str) -> None:
        """Mark ``phase`` now when a probe is attached; an error warns once."""
        probe = self.probe
        if probe is None or probe.closed:
            return
        try:
            probe.mark(phase)
        except Exception as exc:
            self.warn(f"cannot mark the {phase} phase", exc)

    def guarded(self, what: str, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``func(*args, **kwargs)``, or None after one warning naming ``what`` if it raises."""
        if self.failed is not None and self.probe is None:
            return None
        try:
            return func(*args, **kwargs)
        except Exception as exc:
            self.warn(what, exc)
            return None

    def close(self) -> None:
        """Close the probe (its end record is written) or remove a first-forward hook still
        waiting; idempotent, never raises."""
        disarm, self._disarm = self._disarm, None
        if disarm is not None:
            disarm()
        probe, self.probe = self.probe, None
        if probe is not None:
            try:
                probe.close()
            except Exception:  # closing must not fail the end of training
                pass
