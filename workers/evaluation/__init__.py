"""Evaluating claimed versions on an eval engine: fetch, load, generate, score, record."""
