"""A pod's projected service-account token, presented as a bearer token, made into the principal
of one node of one pool: signed by the cluster issuer's key (RS256 or ES256), issued by
LORAPLANE_K8S_ISSUER for LORAPLANE_K8S_AUDIENCE, within its times, short-lived, bound to a pod,
and of a service account LORAPLANE_K8S_SERVICE_ACCOUNTS maps to a pool. The node id is the pod's
name from the verified claims, never what the node says. Each refusal says which check failed.

Verified offline, as the cluster's own keys allow: a deleted pod's token holds until it expires
(LORAPLANE_K8S_MAX_TOKEN_LIFETIME_S at most)."""

from __future__ import annotations

import logging
import re
import time
from typing import Any

from joserfc import jws, jwt
from joserfc.errors import ClaimError, ExpiredTokenError, JoseError

from registry.auth.principal import Principal, Role
from registry.auth.service_accounts import issuer_keys
from registry.auth.service_accounts.claims import Pod, TokenRefused, node_id_of, pod_of, refused
from registry.errors import LoraplaneError
from registry.metrics import K8S_TOKENS
from registry.settings import get_settings

log = logging.getLogger(__name__)
MAX_TOKEN_CHARS = 8 * 1024  # a projected token is 1-2 KiB
ALGORITHMS = ["RS256", "ES256"]
LEEWAY_S = 60  # what the cluster's own API server allows between clocks
# Three base64url parts, the first a JSON object ("eyJ" is '{"'): never a loraplane token,
# which is "lpt_" and base64url without dots.
JWT_SHAPE = re.compile(r"^eyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$")
LOG_EVERY_S = 60.0
_logged_at: dict[str, float] = {}  # by refusal code: a fixed few, however many tokens arrive


def presented(plain: str) -> bool:
    """Whether the bearer is a JWT this registry should check, cheaply: only when
    LORAPLANE_K8S_ISSUER is set (otherwise it is refused as any unknown token is)."""
    return plain.startswith("eyJ") and plain.count(".") == 2 and get_settings().k8s_issuer is not None


def principal(plain: str, *, now: float | None = None) -> Principal:
    try:
        pod, pool, expires_at = _checked(plain, time.time() if now is None else now)
        node_id = node_id_of(pod)
    except LoraplaneError as refusal:
        K8S_TOKENS.labels(refusal.code).inc()
        _log_once(refusal)
        raise
    K8S_TOKENS.labels("accepted").inc()
    return Principal(token_id=0, subject=f"system:serviceaccount:{pod.namespace}:{pod.service_account}",
                     role=Role.NODE, tenant=None, pool=pool, instance_id=node_id, pod_uid=pod.uid,
                     expires_at=expires_at)


def still_holds(held: Principal, *, now: float | None = None) -> bool:
    """Whether a principal made from a pod's token is still within its token's time."""
    return held.expires_at is None or (time.time() if now is None else now) < held.expires_at


def _checked(plain: str, now: float) -> tuple[Pod, str, float]:
    settings = get_settings()
    if len(plain) > MAX_TOKEN_CHARS or not JWT_SHAPE.fullmatch(plain):
        raise refused(f"it is not a compact JWT of at most {MAX_TOKEN_CHARS // 1024} KiB", "malformed")
    claims = _verified(plain)
    _check_claims(claims, settings.k8s_issuer or "", settings.k8s_audience, int(now))
    lifetime = claims["exp"] - claims["iat"]
    if lifetime > settings.k8s_max_token_lifetime_s:
        raise refused(f"it is valid for {lifetime} s, longer than LORAPLANE_K8S_MAX_TOKEN_LIFETIME_S "
                       f"({settings.k8s_max_token_lifetime_s} s): not a short-lived token", "too_long_lived",
                       hint="Project the token with expirationSeconds of at most that (and not 3607, "
                            "which the cluster extends to a year).")
    pod = pod_of(claims)
    pool = settings.k8s_service_accounts.get(pod.account)
    if pool is None:
        raise refused(f"service account {pod.account} is not mapped to a pool", "unmapped_service_account",
                       hint="Map it in LORAPLANE_K8S_SERVICE_ACCOUNTS, or run the pod under the "
                            "pool's service account.")
    return pod, pool, float(claims["exp"] + LEEWAY_S)


def _verified(plain: str) -> dict[str, Any]:
    try:
        header = jws.extract_compact(plain.encode()).headers()
    except (JoseError, ValueError):
        raise refused("its header cannot be read", "malformed") from None
    algorithm, kid = header.get("alg"), header.get("kid")
    if algorithm not in ALGORITHMS:
        raise refused(f"it is signed with alg {str(algorithm)[:20]!r}; only "
                       f"{' and '.join(ALGORITHMS)} are accepted", "bad_algorithm")
    if not isinstance(kid, str) or not 0 < len(kid) <= 256:
        raise refused("its header names no key id (kid)", "malformed")
    keys = issuer_keys.keys_for(kid)
    if not any(key.kid == kid for key in keys.keys):
        raise refused(f"it is signed by key {kid[:80]!r}, which the cluster issuer does not publish",
                       "unknown_key")
    try:
        token = jwt.decode(plain, keys, algorithms=ALGORITHMS)
    except (JoseError, ValueError):
        raise refused("its signature does not verify with the cluster issuer's key "
                       f"{kid[:80]!r}", "bad_signature") from None
    if not isinstance(token.claims, dict):
        raise refused("its claims are not a JSON object", "malformed")
    return token.claims


def _check_claims(claims: dict[str, Any], issuer: str, audience: str, now: int) -> None:
    registry = jwt.JWTClaimsRegistry(
        now=now, leeway=LEEWAY_S, iss={"essential": True, "value": issuer},
        aud={"essential": True, "value": audience}, exp={"essential": True}, iat={"essential": True})
    try:
        registry.validate(claims)
    except ExpiredTokenError:
        raise refused(f"it expired at {_when(claims.get('exp'))}", "expired",
                       hint="The kubelet renews the projected token on disk: the agent must read "
                            "it again (LORAPLANE_AGENT_TOKEN_FILE); check the clocks too.") from None
    except ClaimError as error:
        raise _claim_refused(error.claim, claims, issuer, audience) from None
    if not all(isinstance(claims.get(name), int) for name in ("exp", "iat")):
        raise refused("its exp or iat is not a whole number", "malformed")


def _claim_refused(claim: str, claims: dict[str, Any], issuer: str, audience: str) -> TokenRefused:
    if claim == "iss":
        return refused(f"it was issued by {str(claims.get('iss'))[:200]!r}, not by the cluster "
                        f"issuer {issuer!r}", "wrong_issuer",
                        hint="Check LORAPLANE_K8S_ISSUER against the cluster's service-account issuer.")
    if claim == "aud":
        said = claims.get("aud")
        shown = ", ".join(map(str, said)) if isinstance(said, list) else str(said)
        return refused(f"it is for audience {shown[:200]!r}, not {audience!r}", "wrong_audience",
                        hint=f"Project the token with audience {audience!r} (LORAPLANE_K8S_AUDIENCE).")
    if claim in ("iat", "nbf"):
        return refused(f"it is not valid yet ({claim} is in the future)", "not_yet_valid",
                        hint="Check the clocks of the cluster and the registry.")
    return refused(f"its {claim!r} claim is missing or invalid", "malformed")


def _log_once(refusal: LoraplaneError) -> None:
    """Why a pod's token was refused, without the token: once a minute per reason, so that a
    stream of bad tokens cannot flood the log."""
    now = time.monotonic()
    if now - _logged_at.get(refusal.code, float("-inf")) >= LOG_EVERY_S:
        _logged_at[refusal.code] = now
        log.warning("%s (%s)", refusal.message, refusal.code)


def _when(timestamp: Any) -> str:
    from datetime import UTC, datetime

    try:
        return datetime.fromtimestamp(int(timestamp), UTC).isoformat()
    except (TypeError, ValueError, OverflowError):
        return "an unreadable time"
