"""How deliveries are signed, and how a receiver checks them.

    X-Loraplane-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<raw body>")>

A receiver recomputes the HMAC over the raw body, compares in constant time, and refuses
timestamps far from its clock, which stops replays of old deliveries.
"""

from __future__ import annotations

import hashlib
import hmac
import time

HEADER = "X-Loraplane-Signature"


def sign(secret: str, body: bytes, timestamp: int | None = None) -> str:
    timestamp = int(time.time()) if timestamp is None else timestamp
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={mac}"


def verify(secret: str, body: bytes, header: str, *, tolerance_s: int = 300) -> bool:
    try:
        fields = dict(part.split("=", 1) for part in header.split(","))
        timestamp = int(fields["t"])
    except (ValueError, KeyError):
        return False
    if abs(time.time() - timestamp) > tolerance_s:
        return False
    return hmac.compare_digest(sign(secret, body, timestamp), header)
