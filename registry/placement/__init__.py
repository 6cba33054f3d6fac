"""Placement: which nodes of a pool hold which adapters."""
