"""Webhooks on promotion events: HMAC-signed, delivered at least once, with retries."""

from registry.webhooks.service import emit

__all__ = ["emit"]
