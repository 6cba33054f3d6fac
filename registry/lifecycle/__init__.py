"""Retiring and deleting adapters and their versions once nothing needs them."""
