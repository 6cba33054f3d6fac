"""Canary analysis: a canary promotion carries a policy, and the housekeeper judges the canary
against production on the routers' live metrics, stepping its weight up, promoting it, or rolling
it back on its own."""
