"""The node agent: makes one vLLM serve exactly its pool's active set, with verified bytes."""
