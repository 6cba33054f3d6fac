"""Read a tenant's public signing key the way model-signing's key verifier will use it.

model-signing verifies key-signed bundles with elliptic-curve keys on P-256, P-384 or P-521
only, so anything else is refused when the key is added rather than at every upload. A private
key sent by mistake is refused before it is parsed, and never echoed or stored.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed448, ed25519, rsa, x448, x25519

from registry.errors import Unprocessable

MAX_PEM_CHARS = 8192  # a P-521 public key is about 270 characters of PEM
SUPPORTED_CURVES = ("secp256r1", "secp384r1", "secp521r1")
KEY_KINDS = ((rsa.RSAPublicKey, "RSA"), (dsa.DSAPublicKey, "DSA"),
             (ed25519.Ed25519PublicKey, "Ed25519"), (ed448.Ed448PublicKey, "Ed448"),
             (x25519.X25519PublicKey, "X25519"), (x448.X448PublicKey, "X448"))
SUPPORTED_HINT = ("Send an EC public key on P-256, P-384 or P-521 as PEM "
                  "('-----BEGIN PUBLIC KEY-----'), e.g. openssl ec -in key.pem -pubout.")


@dataclass(frozen=True)
class PublicKey:
    pem: str  # re-serialized by cryptography: one canonical spelling per key
    fingerprint: str  # sha256 of the DER SubjectPublicKeyInfo


def parse(text: str) -> PublicKey:
    if "PRIVATE KEY-----" in text:
        raise Unprocessable("this is a private key; a signing key is added by its public key only",
                            code="private_key_refused",
                            hint="Keep the private key with the team that signs. Send its public "
                                 "half: openssl ec -in key.pem -pubout -out key.pub.")
    if "BEGIN CERTIFICATE" in text:
        raise Unprocessable("certificates are not accepted as signing keys",
                            code="unsupported_key_type", hint=SUPPORTED_HINT)
    try:
        key = serialization.load_pem_public_key(text.encode())
    except (ValueError, UnsupportedAlgorithm):
        raise Unprocessable("public_key_pem is not a PEM public key", code="invalid_public_key",
                            hint=SUPPORTED_HINT) from None
    if not isinstance(key, ec.EllipticCurvePublicKey):
        kind = next((label for cls, label in KEY_KINDS if isinstance(key, cls)), "this kind of")
        raise Unprocessable(f"{kind} keys are not supported; model-signing verifies EC keys on "
                            "P-256, P-384 or P-521", code="unsupported_key_type", hint=SUPPORTED_HINT)
    if key.curve.name not in SUPPORTED_CURVES:
        raise Unprocessable(f"EC keys on {key.curve.name} are not supported; model-signing verifies "
                            "EC keys on P-256, P-384 or P-521", code="unsupported_key_type",
                            hint=SUPPORTED_HINT)
    der = key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    pem = key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return PublicKey(pem=pem.decode(), fingerprint=hashlib.sha256(der).hexdigest())


def model_signing_hint(pem: str) -> str:
    """The key hint model-signing writes into a bundle: the sha256 of the key's PEM, as
    cryptography writes it (which is how `parse` stores it)."""
    return hashlib.sha256(pem.encode()).hexdigest()
