"""Collect the stored blobs nothing references any more, after a grace period."""
