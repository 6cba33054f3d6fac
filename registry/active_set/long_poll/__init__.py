"""The long-poll transport: the active-set endpoint, its fast path, and the state the
application's lifespan owns for it (state.py)."""
