"""The Prometheus exporter: ``gpumem-tui exporter`` (see :mod:`gpumem_tui.exporter.cli`).

- :mod:`.metrics`: turns Snapshots into Prometheus metric families (headless, no server).
- :mod:`.cli`: argument parsing, the poll thread and the HTTP server.
"""
