"""The checks of the LORAPLANE_K8S_* settings (registry/settings.py), made as the process starts:
a mapping or an issuer that could never admit a node is refused then, naming the setting, not
found out by a node's 401 later."""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import urlsplit

from registry.names import NAME_PATTERN

# A namespace is a DNS-1123 label, a service account's name a DNS-1123 subdomain.
SERVICE_ACCOUNT = re.compile(r"^([a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)/"
                             r"([a-z0-9](?:[a-z0-9.-]{0,251}[a-z0-9])?)$")
MAX_SERVICE_ACCOUNTS = 1000
LOOPBACK = ("localhost", "127.0.0.1", "::1")


def service_accounts_setting(value: str) -> dict[str, str]:
    """LORAPLANE_K8S_SERVICE_ACCOUNTS as a JSON object. A name given twice is refused: JSON
    would keep the last silently, and one service account maps to exactly one pool."""
    if not value.strip():
        return {}
    if len(value) > 256 * 1024:
        raise ValueError("LORAPLANE_K8S_SERVICE_ACCOUNTS is larger than 256 KiB")

    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        for key, item in pairs:
            if key in seen:
                raise ValueError(f"LORAPLANE_K8S_SERVICE_ACCOUNTS names {key!r} twice: one service "
                                 "account maps to exactly one pool")
            seen[key] = item
        return seen

    try:
        mapping = json.loads(value, object_pairs_hook=unique)
    except json.JSONDecodeError as error:
        raise ValueError(f"LORAPLANE_K8S_SERVICE_ACCOUNTS is not JSON: {error}") from None
    if not isinstance(mapping, dict):
        raise ValueError('LORAPLANE_K8S_SERVICE_ACCOUNTS must be a JSON object such as '
                         '{"llm/loraplane-pool-a": "pool-a"}')
    return mapping


def check_k8s(settings: Any) -> None:
    """The LORAPLANE_K8S_* settings of a RegistrySettings, together."""
    accounts: dict[str, str] = settings.k8s_service_accounts
    if settings.k8s_issuer is None:
        given = [name for name, value in (
            ("LORAPLANE_K8S_JWKS_FILE", settings.k8s_jwks_file), ("LORAPLANE_K8S_JWKS_URL", settings.k8s_jwks_url),
            ("LORAPLANE_K8S_SERVICE_ACCOUNTS", accounts)) if value]
        if given:
            raise ValueError(f"{', '.join(given)} configure Kubernetes node identity, but "
                             "LORAPLANE_K8S_ISSUER is unset: set it to the cluster's service-account "
                             "issuer, or unset them")
        return
    _check_url("LORAPLANE_K8S_ISSUER", settings.k8s_issuer)
    if settings.k8s_jwks_file is not None and settings.k8s_jwks_url is not None:
        raise ValueError("LORAPLANE_K8S_JWKS_FILE and LORAPLANE_K8S_JWKS_URL are both set: give one")
    if settings.k8s_jwks_url is not None:
        _check_url("LORAPLANE_K8S_JWKS_URL", settings.k8s_jwks_url)
    if not accounts:
        raise ValueError('LORAPLANE_K8S_ISSUER is set but LORAPLANE_K8S_SERVICE_ACCOUNTS maps no '
                         'service account to a pool: give e.g. {"llm/loraplane-pool-a": "pool-a"}')
    if len(accounts) > MAX_SERVICE_ACCOUNTS:
        raise ValueError(f"LORAPLANE_K8S_SERVICE_ACCOUNTS maps more than {MAX_SERVICE_ACCOUNTS} "
                         "service accounts")
    for account, pool in accounts.items():
        if not SERVICE_ACCOUNT.fullmatch(account):
            raise ValueError(f"LORAPLANE_K8S_SERVICE_ACCOUNTS: {account[:300]!r} is not "
                             "\"namespace/serviceaccount\" (lowercase DNS names)")
        if not isinstance(pool, str) or not NAME_PATTERN.fullmatch(pool):
            raise ValueError(f"LORAPLANE_K8S_SERVICE_ACCOUNTS: {account!r} maps to {str(pool)[:100]!r}, "
                             "which is not a pool name")


def _check_url(setting: str, url: str) -> None:
    try:
        parts = urlsplit(url)
    except ValueError as error:
        raise ValueError(f"{setting} {url!r} is not a URL: {error}") from None
    loopback = parts.hostname in LOOPBACK
    if parts.scheme != "https" and not (parts.scheme == "http" and loopback):
        raise ValueError(f"{setting} must be an https URL (http only on a loopback address): "
                         f"over http the keys that admit nodes could be swapped on the way; got {url!r}")
    if parts.query or parts.fragment or not parts.hostname or parts.username or parts.password:
        raise ValueError(f"{setting} must be a plain URL, with no credentials, query or fragment")
