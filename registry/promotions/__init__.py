"""Promotion requests: a version into a pool under an alias, through gates and four-eyes approval."""
