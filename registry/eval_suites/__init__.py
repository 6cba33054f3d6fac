"""Evaluation suites: a dataset of prompts and references, metrics with thresholds, and generation
settings, for one base model."""
