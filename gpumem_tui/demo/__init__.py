"""The built-in training job the dashboard starts without a GPU, and the ``demo`` subcommand."""
