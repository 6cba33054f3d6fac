"""Names the suite's session fixtures and its support modules share (tests/conftest.py re-exports
them, so a test may import them from either)."""

BUCKET = "loraplane-test"
KIT_BASE = "tiny-task-llama"  # the task kit's base, as every pool of kit adapters names it
