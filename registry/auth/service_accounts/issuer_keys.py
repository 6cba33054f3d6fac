"""The cluster issuer's public keys: from LORAPLANE_K8S_JWKS_FILE (read again when it changes),
LORAPLANE_K8S_JWKS_URL, or the jwks_uri of the issuer's OIDC discovery document. Fetched with a
bounded size and time and cached; a token naming a key id not held fetches them again, at most
once per REFETCH_UNKNOWN_KID_S, so that the issuer's key rotation is followed and a stream of
made-up key ids cannot make the registry hammer the issuer."""

from __future__ import annotations

import base64
import json
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from joserfc.jwk import ECKey, KeySet, RSAKey

from registry.errors import Unavailable
from registry.metrics import K8S_KEY_FETCHES
from registry.settings import RegistrySettings, get_settings

log = logging.getLogger(__name__)
MAX_JWKS_BYTES = 256 * 1024  # a cluster's key set is a few KiB
MAX_KEYS = 64
TIMEOUT_S = 5.0
CACHE_S = 300.0
REFETCH_UNKNOWN_KID_S = 10.0
MIN_RSA_BITS = 2048


class IssuerKeysUnavailable(Unavailable):
    code = "k8s_issuer_keys_unavailable"


@dataclass
class _Held:
    keys: KeySet | None = None
    fetched_at: float = float("-inf")
    refetched_for_kid_at: float = float("-inf")
    file_stamp: tuple[int, int, int] | None = None
    failure: IssuerKeysUnavailable | None = None  # the last fetch's, while no keys are held
    failed_at: float = float("-inf")
    lock: threading.Lock = field(default_factory=threading.Lock)


_held: dict[tuple, _Held] = {}  # by where the keys come from: settings may differ per test process


def keys_for(kid: str) -> KeySet:
    """The issuer's keys, fetched again when `kid` is not among them (rate-limited). Raises
    IssuerKeysUnavailable when no keys were ever had; a failed refetch keeps the keys held."""
    settings = get_settings()
    source = (settings.k8s_issuer, settings.k8s_jwks_file, settings.k8s_jwks_url)
    held = _held.setdefault(source, _Held())
    with held.lock:
        if settings.k8s_jwks_file is not None:
            return _from_file(held, settings.k8s_jwks_file)
        now = time.monotonic()
        if held.keys is None and held.failure is not None and now - held.failed_at < REFETCH_UNKNOWN_KID_S:
            # An issuer that is away is asked again only after a pause, however many tokens come.
            raise IssuerKeysUnavailable(held.failure.message, hint=held.failure.hint)
        if held.keys is None or now - held.fetched_at >= CACHE_S:
            _refresh(held, settings, now)
        elif not _holds(held.keys, kid) and now - held.refetched_for_kid_at >= REFETCH_UNKNOWN_KID_S:
            held.refetched_for_kid_at = now
            _refresh(held, settings, now)
        if held.keys is None:
            raise IssuerKeysUnavailable("the cluster issuer's keys could not be fetched yet",
                                        hint="Check LORAPLANE_K8S_ISSUER / LORAPLANE_K8S_JWKS_URL and the "
                                             "registry's log.")
        return held.keys


def _holds(keys: KeySet, kid: str) -> bool:
    return any(key.kid == kid for key in keys.keys)


def _refresh(held: _Held, settings: RegistrySettings, now: float) -> None:
    try:
        url = settings.k8s_jwks_url or _jwks_uri(settings.k8s_issuer or "")
        held.keys = key_set(_fetch_json(url, "key set"), url)
        held.fetched_at = now
        K8S_KEY_FETCHES.labels("fetched").inc()
    except IssuerKeysUnavailable as error:
        K8S_KEY_FETCHES.labels("failed").inc()
        if held.keys is None:
            held.failure, held.failed_at = error, now
            raise
        held.fetched_at = now - CACHE_S + REFETCH_UNKNOWN_KID_S  # try again soon, keep what is held
        log.warning("keeping the cluster issuer's keys fetched before: %s", error.message)


def _from_file(held: _Held, path: Path) -> KeySet:
    try:
        stat = os.stat(path)
        stamp = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
        if held.keys is not None and stamp == held.file_stamp:
            return held.keys
        with path.open("rb") as file:
            body = file.read(MAX_JWKS_BYTES + 1)
    except OSError as error:
        if held.keys is not None:
            log.warning("keeping the cluster issuer's keys read before: %s", error)
            return held.keys
        raise IssuerKeysUnavailable(f"LORAPLANE_K8S_JWKS_FILE {str(path)!r} cannot be read: "
                                    f"{error.strerror}", hint="Mount the issuer's JWKS there.") from None
    if len(body) > MAX_JWKS_BYTES:
        raise IssuerKeysUnavailable(f"LORAPLANE_K8S_JWKS_FILE is larger than {MAX_JWKS_BYTES // 1024} KiB",
                                    hint="Give the issuer's JWKS (kubectl get --raw /openid/v1/jwks).")
    try:
        held.keys = key_set(_parsed(body, str(path), "key set"), str(path))
        K8S_KEY_FETCHES.labels("read").inc()
    except IssuerKeysUnavailable as error:
        K8S_KEY_FETCHES.labels("failed").inc()
        if held.keys is None:
            raise
        log.warning("keeping the cluster issuer's keys read before: %s", error.message)
    held.file_stamp = stamp
    return held.keys


def _jwks_uri(issuer: str) -> str:
    issuer = issuer.rstrip("/")
    document = _fetch_json(f"{issuer}/.well-known/openid-configuration", "discovery document")
    said = document.get("issuer")
    if not isinstance(said, str) or said.rstrip("/") != issuer:
        raise IssuerKeysUnavailable(f"the cluster's discovery document names the issuer "
                                    f"{str(said)[:200]!r}, not {issuer!r}",
                                    hint="Set LORAPLANE_K8S_ISSUER to the issuer the cluster names.")
    uri = document.get("jwks_uri")
    schemes = ("https://",) if issuer.startswith("https://") else ("https://", "http://")
    if not isinstance(uri, str) or not uri.startswith(schemes) or len(uri) > 2000:
        raise IssuerKeysUnavailable("the cluster's discovery document has no jwks_uri over "
                                    f"{' or '.join(s[:-3] for s in schemes)}",
                                    hint="Set LORAPLANE_K8S_JWKS_URL or LORAPLANE_K8S_JWKS_FILE.")
    return uri


def key_set(document: dict[str, Any], where: str) -> KeySet:
    """The usable signing keys of a JWKS document: RSA of 2048 bits or more and EC P-256, each
    with a key id. Others (encryption keys, unknown types) are left out, not fatal."""
    found = document.get("keys")
    if not isinstance(found, list) or len(found) > MAX_KEYS:
        raise IssuerKeysUnavailable(f"the issuer's key set ({where}) has no \"keys\" list of at most "
                                    f"{MAX_KEYS} keys", hint="Give the issuer's JWKS.")
    usable: list[RSAKey | ECKey] = []
    for entry in found:
        if not isinstance(entry, dict) or not isinstance(entry.get("kid"), str) or entry.get("use", "sig") != "sig":
            continue
        try:
            if entry.get("kty") == "RSA":
                if _bits(entry.get("n")) < MIN_RSA_BITS:
                    continue
                key: RSAKey | ECKey = RSAKey.import_key(entry)
            elif entry.get("kty") == "EC" and entry.get("crv") == "P-256":
                key = ECKey.import_key(entry)
            else:
                continue
        except Exception:  # noqa: BLE001 - one malformed key leaves the others usable
            log.warning("left out a malformed key %r of the issuer's key set (%s)", entry.get("kid"), where)
            continue
        usable.append(key)
    return KeySet(usable)  # type: ignore[arg-type]


def _bits(modulus: object) -> int:
    """An RSA key's size, from its modulus (base64url), before the key is imported."""
    if not isinstance(modulus, str) or len(modulus) > 2048:
        return 0
    try:
        return int.from_bytes(base64.urlsafe_b64decode(modulus + "=" * (-len(modulus) % 4))).bit_length()
    except ValueError:
        return 0


def _fetch_json(url: str, what: str) -> dict[str, Any]:
    try:
        with httpx.Client(timeout=TIMEOUT_S, follow_redirects=False) as client, \
                client.stream("GET", url, headers={"Accept": "application/json"}) as response:
            if response.status_code != 200:
                raise IssuerKeysUnavailable(f"the cluster issuer answered {response.status_code} for its "
                                            f"{what} ({url})", hint="Check LORAPLANE_K8S_ISSUER / _JWKS_URL.")
            body = b""
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > MAX_JWKS_BYTES:
                    raise IssuerKeysUnavailable(f"the cluster issuer's {what} is larger than "
                                                f"{MAX_JWKS_BYTES // 1024} KiB", hint="Check the issuer.")
    except httpx.HTTPError as error:
        raise IssuerKeysUnavailable(f"the cluster issuer cannot be reached for its {what} ({url}): "
                                    f"{type(error).__name__}",
                                    hint="Check LORAPLANE_K8S_ISSUER / _JWKS_URL and the network, or mount "
                                         "the keys as LORAPLANE_K8S_JWKS_FILE.") from None
    return _parsed(body, url, what)


def _parsed(body: bytes, where: str, what: str) -> dict[str, Any]:
    try:
        document = json.loads(body)
    except ValueError:
        document = None
    if not isinstance(document, dict):
        raise IssuerKeysUnavailable(f"the cluster issuer's {what} ({where}) is not a JSON object",
                                    hint="Check the issuer.")
    return document
