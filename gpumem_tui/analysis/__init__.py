"""Per-process and per-job analysis (headless, no torch): estimate vs measured, ranks of one job, step peaks, drift and time-to-OOM; the values the UI, `compare` and the exporter all read."""
