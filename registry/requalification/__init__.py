"""Re-qualification: when a pool's engine (vLLM version, dtype, flags) or its base model's config
changes, every active version must pass the pool's required suites again, and the pool's policy
says whether it keeps serving meanwhile."""
