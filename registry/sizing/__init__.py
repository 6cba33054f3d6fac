"""Pool sizing: what a pool's LoRA slots cost in GPU memory, what an oversized max_lora_rank
wastes, and multi-LoRA against one full replica per adapter. Every figure says whether it was
measured (from the registered config and pool) or assumed (from the caller's or our defaults)."""
