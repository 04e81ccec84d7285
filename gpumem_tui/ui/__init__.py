"""The Textual dashboard. Nothing here is imported by the headless core or by ``estimate``.

Rooms: ``launch`` (CLI options -> ``run_dashboard``), ``app`` (GpuMemApp and its handlers),
``poller`` (worker thread -> Snapshot messages), ``history`` (bounded tiered history,
headless), ``device_panel`` / ``process_table`` / ``memory_chart`` (widgets), ``cells``
(literal cell text), ``screens`` (help, detail, signal confirmation), ``themes`` (theme
files), ``app_common`` (theme registration and the palette's Screenshot, shared with the
fleet screen), ``side_pane`` (mounts and wires the estimator and comparison widgets),
``steady_footer`` (the footer, rebuilding its keys only when they change).
"""
