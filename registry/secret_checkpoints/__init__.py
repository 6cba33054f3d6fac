"""Where each rotated-out LORAPLANE_SECRET_KEY stops being believed (service.py)."""
