"""Per-process and per-job analysis values the UI, ``compare`` and the exporter all read."""
