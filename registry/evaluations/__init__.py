"""Evaluations: one adapter version against one eval suite, run by a worker on a real vLLM."""
