"""Signed statements about adapter versions, shared by the registry (which signs), the node agent
and the CLI (which verify).

An attestation is an in-toto Statement v1 inside a DSSE envelope, signed with Ed25519:
- its subjects are the version's manifest digest (named by the served name) and each file's
  sha256 (named served_name/file);
- its predicate says who approved it for which pool, on what evidence.

A trust bundle lists the public keys that may sign, each with the time it stops being trusted. A
bundle is itself a DSSE envelope, signed by every key it lists, so a holder of an older bundle can
take a newer one only when a key it already trusts signed it (rotation with overlap)."""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

TRUST_BUNDLE_PATH = "/.well-known/loraplane/trust-bundle.json"  # on every registry, anonymous
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://loraplane.dev/attestation/approval/v1"
IN_TOTO_PAYLOAD = "application/vnd.in-toto+json"
BUNDLE_PAYLOAD = "application/vnd.loraplane.trust-bundle+json"
ACTIVE_SET_PAYLOAD = "application/vnd.loraplane.active-set+json"
ACTIVE_SET_TYPE = "https://loraplane.dev/active-set/v1"
ALGORITHM = "ed25519"
MAX_ENVELOPE_BYTES = 512 * 1024  # checked before any base64 or JSON work
# A pool's signed active set grows by about 270 bytes a version: some 60,000 versions.
MAX_ACTIVE_SET_BYTES = 16 * 1024 * 1024
MAX_SIGNATURES = 16


class Unverified(Exception):
    """The statement is not proven: unsigned, signed by a key not trusted, or about other bytes."""


# What a hostile document can make plain Python raise: each becomes Unverified, never a crash.
MALFORMED = (TypeError, ValueError, KeyError, IndexError, AttributeError, RecursionError,
             OverflowError, UnicodeError)


def _never_crashes(function):
    @functools.wraps(function)
    def checked(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except MALFORMED as error:
            raise Unverified(f"the document is malformed ({type(error).__name__})") from None
    return checked


def canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE's pre-authentication encoding: what is really signed."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def key_id(public_key: bytes) -> str:
    """A key's id: the sha256 of its 32 raw bytes, in hex."""
    return hashlib.sha256(public_key).hexdigest()


def envelope(payload_type: str, document: dict[str, Any],
             signers: list[tuple[str, Any]]) -> dict[str, Any]:
    """Sign `document` with each (key id, sign(bytes) -> bytes) in `signers`."""
    payload = canonical(document)
    message = pae(payload_type, payload)
    return {"payloadType": payload_type, "payload": base64.b64encode(payload).decode(),
            "signatures": [{"keyid": kid, "sig": base64.b64encode(sign(message)).decode()}
                           for kid, sign in signers]}


def statement(served_name: str, digest: str, files: list[dict[str, Any]],
              predicate: dict[str, Any]) -> dict[str, Any]:
    subjects = [{"name": served_name, "digest": {"sha256": digest}}]
    subjects += [{"name": f"{served_name}/{f['name']}", "digest": {"sha256": f["sha256"]}}
                 for f in sorted(files, key=lambda f: f["name"])]
    return {"_type": STATEMENT_TYPE, "subject": subjects, "predicateType": PREDICATE_TYPE,
            "predicate": predicate}


@dataclass(frozen=True)
class TrustedKey:
    key_id: str
    public_key: Ed25519PublicKey
    not_after: datetime | None  # None: until a rotation retires it

    def valid_at(self, when: datetime) -> bool:
        return self.not_after is None or when < self.not_after


@dataclass(frozen=True)
class TrustBundle:
    version: int
    keys: dict[str, TrustedKey]
    raw: dict[str, Any]  # the signed envelope, to keep on disk as it came

    @classmethod
    @_never_crashes
    def parse(cls, signed: Any, *, trusted_by: TrustBundle | None = None,
              now: datetime | None = None) -> TrustBundle:
        """A bundle from its envelope. Every key it lists must have signed it (proof that whoever
        published it holds those keys); with `trusted_by`, a key trusted there must have signed
        it too, and its version must not be older."""
        document = _payload(signed, BUNDLE_PAYLOAD)
        try:
            version = int(document["version"])
            keys = {}
            for item in document["keys"][:64]:
                raw = _b64(item["public_key"], "public_key")
                if item.get("algorithm") != ALGORITHM or len(raw) != 32:
                    raise Unverified("the trust bundle lists a key that is not a 32-byte ed25519 key")
                kid = key_id(raw)
                keys[kid] = TrustedKey(kid, Ed25519PublicKey.from_public_bytes(raw),
                                       _time(item.get("not_after")))
        except (KeyError, TypeError, ValueError) as error:
            raise Unverified(f"the trust bundle is malformed ({type(error).__name__}: {error})") from None
        if set(keys) - _signed_by(signed, document, BUNDLE_PAYLOAD, keys):
            raise Unverified("the trust bundle is not signed by every key it lists")
        if trusted_by is not None:
            trusted_by._check_successor(signed, document, version, keys, now or datetime.now(UTC))
        return cls(version, keys, signed)

    def _check_successor(self, signed: dict[str, Any], document: dict[str, Any], version: int,
                         keys: dict[str, TrustedKey], when: datetime) -> None:
        """A bundle this one may be replaced by: signed by a key trusted here with no end of trust
        (a key already rotated out cannot vouch for anything), never older, and never giving back
        trust that was ending. The same version may only drop keys."""
        current = {k: v for k, v in self.keys.items() if v.not_after is None and v.valid_at(when)}
        if not _signed_by(signed, document, BUNDLE_PAYLOAD, current):
            raise Unverified("the new trust bundle is not signed by any key the node already trusts")
        if version < self.version:
            raise Unverified(f"the trust bundle is version {version}, older than the trusted "
                             f"version {self.version}")
        for kid, key in keys.items():
            held = self.keys.get(kid)
            if held is not None and held.not_after is not None and key.not_after != held.not_after:
                raise Unverified(f"the new trust bundle moves the end of trust of key {kid[:16]}…")
            if version == self.version and (held is None or key.not_after != held.not_after):
                raise Unverified(f"the trust bundle changes its keys without a new version ({version})")

    @_never_crashes
    def verify(self, signed: Any, *, now: datetime | None = None) -> dict[str, Any]:
        """The statement inside an attestation, once a key valid now has signed it."""
        document = self._signed_document(signed, IN_TOTO_PAYLOAD, now or datetime.now(UTC))
        if document.get("_type") != STATEMENT_TYPE or document.get("predicateType") != PREDICATE_TYPE:
            raise Unverified("the attestation is not a loraplane approval statement")
        return document

    @_never_crashes
    def verify_active_set(self, signed: Any, *, now: datetime | None = None) -> dict[str, Any]:
        """A pool's signed active set (what it serves, under which aliases and weights), once a
        key valid now has signed it."""
        document = self._signed_document(signed, ACTIVE_SET_PAYLOAD, now or datetime.now(UTC),
                                         max_bytes=MAX_ACTIVE_SET_BYTES)
        if document.get("_type") != ACTIVE_SET_TYPE:
            raise Unverified("the document is not a loraplane active set")
        return document

    def _signed_document(self, signed: Any, payload_type: str, when: datetime, *,
                         max_bytes: int = MAX_ENVELOPE_BYTES) -> dict[str, Any]:
        document = _payload(signed, payload_type, max_bytes)
        valid = {k: v for k, v in self.keys.items() if v.valid_at(when)}
        claimed = [s.get("keyid") for s in signed["signatures"] if isinstance(s, dict)]
        if not _signed_by(signed, document, payload_type, valid):
            expired = [k for k in claimed if k in self.keys and k not in valid]
            if expired:
                ended = self.keys[expired[0]].not_after  # not valid now: its trust has an end
                raise Unverified(f"signed by key {str(expired[0])[:16]}…, whose trust ended at "
                                 f"{ended.isoformat() if ended is not None else 'its rotation'}")
            held = [k for k in claimed if k in valid]
            if held:
                raise Unverified(f"the signature of key {str(held[0])[:16]}… does not verify: the "
                                 "statement was changed after it was signed")
            shown = ", ".join(str(k)[:16] + "…" for k in claimed[:3]) or "no key"
            raise Unverified(f"signed by {shown}, which the trust bundle does not hold")
        return document


@_never_crashes
def unverified_statement(signed: Any) -> dict[str, Any]:
    """The statement inside an attestation, without checking who signed it: for display, and for
    re-signing a statement the registry already holds."""
    return _payload(signed, IN_TOTO_PAYLOAD)


@_never_crashes
def check_subject(document: dict[str, Any], served_name: str, digest: str,
                  files: list[dict[str, Any]]) -> None:
    """The statement is about exactly these bytes under this name."""
    subjects = {s.get("name"): (s.get("digest") or {}).get("sha256")
                for s in document.get("subject", []) if isinstance(s, dict)}
    if subjects.get(served_name) is None:
        named = next(iter(subjects), "nothing")
        raise Unverified(f"the attestation is about {named}, not {served_name}")
    if subjects[served_name] != digest:
        raise Unverified(f"the attestation approves digest {str(subjects[served_name])[:12]}…, "
                         f"not {digest[:12]}…")
    expected = {f"{served_name}/{f['name']}": f["sha256"] for f in files}
    listed = {name: sha for name, sha in subjects.items() if name != served_name}
    if listed != expected:
        differing = sorted(set(listed.items()) ^ set(expected.items()))
        raise Unverified(f"the attestation's files differ from the version's ({differing[0][0]})")


def _payload(signed: Any, payload_type: str, max_bytes: int = MAX_ENVELOPE_BYTES) -> dict[str, Any]:
    if not isinstance(signed, dict) or len(canonical(signed)) > max_bytes:
        raise Unverified(f"the envelope is missing, or larger than {max_bytes // 1024} KiB")
    if signed.get("payloadType") != payload_type:
        raise Unverified(f"the envelope holds {str(signed.get('payloadType'))[:60]!r}, "
                         f"not {payload_type!r}")
    signatures = signed.get("signatures")
    if not isinstance(signatures, list) or not 1 <= len(signatures) <= MAX_SIGNATURES:
        raise Unverified("the envelope carries no signature")
    try:
        document = json.loads(_b64(signed.get("payload"), "payload"))
    except ValueError:
        raise Unverified("the envelope's payload is not JSON") from None
    if not isinstance(document, dict):
        raise Unverified("the envelope's payload is not a JSON object")
    return document


def _signed_by(signed: dict[str, Any], document: dict[str, Any], payload_type: str,
               keys: dict[str, TrustedKey]) -> set[str]:
    """The ids of the keys in `keys` whose signature on the envelope verifies."""
    message = pae(payload_type, _b64(signed["payload"], "payload"))
    good = set()
    for item in signed["signatures"]:
        key = keys.get(item["keyid"]) if isinstance(item, dict) and "keyid" in item else None
        if key is None:
            continue
        try:
            key.public_key.verify(_b64(item.get("sig"), "sig"), message)
        except (InvalidSignature, Unverified):
            continue
        good.add(key.key_id)
    return good


def _b64(value: Any, what: str) -> bytes:
    if not isinstance(value, str):
        raise Unverified(f"the envelope's {what} is not base64 text")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise Unverified(f"the envelope's {what} is not valid base64") from None


def _time(value: Any) -> datetime | None:
    if value is None:
        return None
    parsed = datetime.fromisoformat(value)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
