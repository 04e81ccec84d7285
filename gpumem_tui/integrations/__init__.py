"""One-line probes for training frameworks (import the one you use; each imports its
framework, this package imports none):

- :mod:`gpumem_tui.integrations.transformers`: ``GpumemCallback`` for ``Trainer`` (and TRL);
- :mod:`gpumem_tui.integrations.lightning`: ``GpumemCallback`` for Lightning's ``Trainer``;
- :mod:`gpumem_tui.integrations.accelerate`: ``attach(accelerator, model, optimizer)``.
"""
