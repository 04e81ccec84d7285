"""The fleet view: many hosts read through Prometheus (issue 12).

- :mod:`.query`: headless core; PromQL over HTTP (urllib), host rows, back-off.
- :mod:`.cli`: ``gpumem-tui fleet --prometheus URL [--once --json]``.
- :mod:`.screen`: the Textual screen; it only draws what :mod:`.query` returns.
"""
