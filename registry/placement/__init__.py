"""Placement: the rules for which nodes of a pool hold which adapters, their stored form, and
routers' traffic reports. The active set places with them on every change and shows the result
(registry/active_set/writing/placing.py, placement_reading.py)."""
