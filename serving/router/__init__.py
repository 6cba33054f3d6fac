"""The OpenAI-compatible router: resolves `tenant/name[:alias|@N]` through the pool's active set
and sends each request to a node that already holds exactly that version."""
