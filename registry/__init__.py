"""The loraplane registry: REST API, review dashboard backend and metrics."""
