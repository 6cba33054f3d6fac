"""Evaluation workers: Celery tasks that check every adapter version on a real vLLM.

Empty for now; the registry's upload path does not depend on it.
"""
