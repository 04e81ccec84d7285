"""Per-process and per-job analysis of what was measured and published (headless, no torch)."""
