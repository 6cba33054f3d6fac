"""Evaluation workers: Celery tasks that check every adapter version on a real vLLM before it
may be promoted. Each worker drives one eval engine and consumes that engine's base model queue."""
