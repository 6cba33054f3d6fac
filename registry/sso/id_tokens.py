"""An ID token is believed only once the provider's key signed it, for this registry, for this
sign-in, and while it is valid; each refusal says which of these failed."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from joserfc import jws, jwt
from joserfc.errors import ClaimError, ExpiredTokenError, JoseError

from registry.errors import Unauthorized
from registry.sso import provider

MAX_ID_TOKEN_CHARS = 16 * 1024
ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "ES256", "ES384", "EdDSA"]
START_AGAIN = "Start the sign-in again."


class SignInRefused(Unauthorized):
    code = "sign_in_refused"


@dataclass(frozen=True)
class Expected:
    issuer: str
    client_id: str
    nonce: str
    leeway_s: int


def check(id_token: str, expected: Expected, *, now: int | None = None) -> dict[str, Any]:
    """The ID token's claims, once it holds; SignInRefused saying why otherwise."""
    if not isinstance(id_token, str) or not id_token or len(id_token) > MAX_ID_TOKEN_CHARS:
        raise SignInRefused("the identity provider's answer carries no usable ID token", hint=START_AGAIN)
    token = _verified(id_token)
    claims = token.claims
    registry = jwt.JWTClaimsRegistry(
        now=now if now is not None else int(time.time()), leeway=expected.leeway_s,
        iss={"essential": True, "value": expected.issuer},
        aud={"essential": True, "value": expected.client_id},
        sub={"essential": True}, exp={"essential": True}, iat={"essential": True},
        nonce={"essential": True, "value": expected.nonce})
    try:
        registry.validate(claims)
    except ExpiredTokenError:
        raise SignInRefused(f"the ID token expired at {_when(claims.get('exp'))}",
                            code="id_token_expired", hint=f"{START_AGAIN} If it happens again, "
                            "check this machine's clock against the provider's.") from None
    except ClaimError as error:
        raise _refusal(error.claim, claims, expected) from None
    audiences = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
    if len(audiences) > 1 and claims.get("azp") != expected.client_id:
        raise SignInRefused("the ID token is for several audiences and not authorized for this "
                            "registry's client (azp)", code="id_token_wrong_audience", hint=START_AGAIN)
    if not isinstance(claims["sub"], str) or not 0 < len(claims["sub"]) <= 255:
        raise SignInRefused("the ID token's subject is not a string of 1 to 255 characters",
                            code="id_token_invalid", hint="Ask the provider's admins.")
    return claims


def _verified(id_token: str) -> jwt.Token:
    try:
        header = jws.extract_compact(id_token.encode()).headers()  # to pick the key; nothing else read
        key_set = provider.keys(refresh_for=header.get("kid") if isinstance(header.get("kid"), str) else None)
        return jwt.decode(id_token, key_set, algorithms=ALGORITHMS)
    except JoseError as error:
        raise SignInRefused(f"the ID token is not signed by the identity provider's keys "
                            f"({error.error})", code="id_token_bad_signature", hint=START_AGAIN) from None
    except ValueError:
        raise SignInRefused("the ID token cannot be read", code="id_token_invalid", hint=START_AGAIN) from None


def _refusal(claim: str, claims: dict[str, Any], expected: Expected) -> SignInRefused:
    if claim == "iss":
        return SignInRefused(
            f"the ID token was issued by {str(claims.get('iss'))[:200]!r}, not by the configured "
            f"issuer {expected.issuer!r}", code="id_token_wrong_issuer",
            hint="Check LORAPLANE_SSO_ISSUER against the issuer the provider names.")
    if claim == "aud":
        audience = claims.get("aud")
        shown = ", ".join(map(str, audience)) if isinstance(audience, list) else str(audience)
        return SignInRefused(
            f"the ID token is for {shown[:200]!r}, not for this registry's client "
            f"{expected.client_id!r}", code="id_token_wrong_audience",
            hint="Check LORAPLANE_SSO_CLIENT_ID against the client the provider signs in for.")
    if claim == "nonce":
        return SignInRefused("the ID token's nonce is not this sign-in's: it was made for another "
                             "sign-in, or replayed", code="id_token_wrong_nonce", hint=START_AGAIN)
    if claim in ("iat", "nbf"):
        return SignInRefused(f"the ID token is not valid yet ({claim} is in the future)",
                             code="id_token_not_yet_valid",
                             hint="Check this machine's clock against the provider's.")
    return SignInRefused(f"the ID token's {claim!r} claim is missing or invalid", code="id_token_invalid",
                         hint="Ask the provider's admins.")


def _when(timestamp: Any) -> str:
    from datetime import UTC, datetime

    try:
        return datetime.fromtimestamp(int(timestamp), UTC).isoformat()
    except (TypeError, ValueError, OverflowError):
        return "an unreadable time"
