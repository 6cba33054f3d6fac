"""The identity provider's published configuration and keys (OpenID Connect discovery), fetched
with bounded time and size, and cached: a sign-in costs no discovery round trip once warm, and a
key the provider rotated in is fetched again when an ID token names it."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from typing import Any

import httpx
from joserfc.jwk import KeySet

from registry.errors import Unavailable
from registry.settings import get_settings

MAX_DOCUMENT_BYTES = 512 * 1024  # a discovery document or key set is a few KiB
TIMEOUT_S = 10.0
CACHE_S = 3600.0
REFETCH_KEYS_AFTER_S = 30.0  # an unknown key id fetches the keys again, at most this often


class ProviderUnavailable(Unavailable):
    code = "sso_provider_unavailable"


@dataclass(frozen=True)
class Provider:
    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str


@dataclass
class _Cached:
    provider: Provider
    keys: KeySet
    fetched_at: float
    keys_fetched_at: float


_cache: dict[str, _Cached] = {}
_lock = threading.Lock()


def provider() -> Provider:
    return _cached().provider


def keys(*, refresh_for: str | None = None) -> KeySet:
    """The provider's signing keys; fetched again when `refresh_for` (a key id) is not among them."""
    cached = _cached()
    known = {key.kid for key in cached.keys.keys}
    if refresh_for is not None and refresh_for not in known and \
            time.monotonic() - cached.keys_fetched_at > REFETCH_KEYS_AFTER_S:
        with _lock:
            cached.keys = _key_set(cached.provider.jwks_uri)
            cached.keys_fetched_at = time.monotonic()
    return cached.keys


def _cached() -> _Cached:
    issuer = _issuer()
    entry = _cache.get(issuer)
    if entry is not None and time.monotonic() - entry.fetched_at < CACHE_S:
        return entry
    with _lock:
        entry = _cache.get(issuer)
        if entry is None or time.monotonic() - entry.fetched_at >= CACHE_S:
            found = _discover(issuer)
            now = time.monotonic()
            entry = _cache[issuer] = _Cached(found, _key_set(found.jwks_uri), now, now)
    return entry


def _issuer() -> str:
    issuer = get_settings().sso_issuer
    if issuer is None:
        raise Unavailable("single sign-on is not configured on this registry", code="sso_not_configured",
                          hint="Sign in with an API token, or set LORAPLANE_SSO_ISSUER and "
                               "LORAPLANE_SSO_CLIENT_ID (docs/security.md).")
    return issuer.rstrip("/")


def _discover(issuer: str) -> Provider:
    document = _fetch_json(f"{issuer}/.well-known/openid-configuration", "discovery document")
    said = document.get("issuer")
    if not isinstance(said, str) or said.rstrip("/") != issuer:
        raise ProviderUnavailable(
            f"the identity provider's discovery document names the issuer {str(said)[:200]!r}, not "
            f"{issuer!r}", hint="Set LORAPLANE_SSO_ISSUER to exactly the issuer the provider names.")
    # Its endpoints over https: over http, its keys and the client secret could be swapped or read
    # on the way (an issuer on this machine, for tests and development, may use http).
    schemes = ("https://",) if said.startswith("https://") else ("https://", "http://")
    fields = {}
    for name in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
        value = document.get(name)
        if not isinstance(value, str) or not value.startswith(schemes):
            raise ProviderUnavailable(f"the identity provider's discovery document has no {name} "
                                      f"over {' or '.join(s[:-3] for s in schemes)}", hint="Check the provider.")
        fields[name] = value
    # The issuer exactly as the provider names it (a trailing slash and all): ID tokens carry it so.
    return Provider(issuer=said, **fields)


def _key_set(jwks_uri: str) -> KeySet:
    document = _fetch_json(jwks_uri, "signing keys")
    try:
        return KeySet.import_key_set(document)  # type: ignore[arg-type]
    except Exception as error:  # any malformed key set: the provider's to fix
        raise ProviderUnavailable(f"the identity provider's signing keys cannot be read: {error}",
                                  hint="Check the provider's jwks_uri.") from None


def _fetch_json(url: str, what: str) -> dict[str, Any]:
    try:
        with httpx.Client(timeout=TIMEOUT_S, follow_redirects=False) as client, \
                client.stream("GET", url, headers={"Accept": "application/json"}) as response:
            if response.status_code != 200:
                raise ProviderUnavailable(
                    f"the identity provider answered {response.status_code} for its {what} ({url})",
                    hint="Check LORAPLANE_SSO_ISSUER and that the provider is up.")
            body = b""
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > MAX_DOCUMENT_BYTES:
                    raise ProviderUnavailable(f"the identity provider's {what} is larger than "
                                              f"{MAX_DOCUMENT_BYTES // 1024} KiB", hint="Check the provider.")
    except httpx.HTTPError as error:
        raise ProviderUnavailable(f"the identity provider cannot be reached for its {what} ({url}): "
                                  f"{type(error).__name__}",
                                  hint="Check LORAPLANE_SSO_ISSUER and the network, then try again.") from None
    try:
        document = json.loads(body)
    except ValueError:
        document = None
    if not isinstance(document, dict):
        raise ProviderUnavailable(f"the identity provider's {what} is not a JSON object", hint="Check the provider.")
    return document
