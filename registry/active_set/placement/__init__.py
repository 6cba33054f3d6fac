"""Where the active set's versions live on the pool's nodes, as nodes and routers read it, and the
routers' traffic reports that move it (the placement itself is computed by each change:
writing/placing.py)."""
