"""PKCE's S256 challenge (RFC 7636), and the confirmation code a CLI's sign-on shows in the
terminal and in the browser alike, so that a person signs on only for the command they ran."""

from __future__ import annotations

import base64
import hashlib


def s256(verifier: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()


def confirmation_code(challenge: str) -> str:
    """Eight letters and digits, derived from the CLI's challenge: XXXX-XXXX."""
    letters = base64.b32encode(hashlib.sha256(b"loraplane-login:" + challenge.encode()).digest()).decode()
    return f"{letters[:4]}-{letters[4:8]}"
