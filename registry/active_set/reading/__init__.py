"""The read model: a pool's active set as nodes, routers and the dashboard read it, built from its signed set."""
