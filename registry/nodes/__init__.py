"""Serving nodes' reports, and each pool's rollout: who has applied which generation."""
