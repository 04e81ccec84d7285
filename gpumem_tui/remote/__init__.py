"""Beyond one box: the Prometheus exporter, the fleet view's Prometheus client, and serve (the dashboard in a browser)."""
