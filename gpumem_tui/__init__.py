"""gpumem-tui: a terminal dashboard for GPU memory, measured and predicted."""

__version__ = "0.1.0"
