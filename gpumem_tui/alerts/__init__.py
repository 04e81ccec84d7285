"""Alert rules from the config, their evaluation on each poll, and what a firing alert does (headless)."""
