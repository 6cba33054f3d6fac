"""ID tokens the real provider process issued, checked as a sign-on checks them: one for another
issuer name, another client, an old sign-in's nonce, or past its expiry is refused saying which."""

from __future__ import annotations

import os
from collections.abc import Iterator
from urllib.parse import urlencode

import httpx
import pytest
from joserfc import jwt
from joserfc.jwk import RSAKey

from registry.settings import get_settings
from registry.sso import id_tokens, provider
from registry.sso.id_tokens import Expected, SignInRefused
from tests.support.sso import CLIENT_ID, authorize, person, sso_env

NONCE = "the-nonce-of-this-sign-in"


@pytest.fixture
def configured(oidc_provider) -> Iterator[str]:
    """This process configured as the sign-on registry is."""
    saved = dict(os.environ)
    os.environ.update(sso_env(oidc_provider.url))
    get_settings.cache_clear()
    person(oidc_provider.url, "ida", email="ida@example.com", groups=["acme-reviewers"])
    yield oidc_provider.url
    os.environ.clear()
    os.environ.update(saved)
    get_settings.cache_clear()


def issued(base_url: str, *, client_id: str = CLIENT_ID, nonce: str = NONCE) -> str:
    """An ID token, through the provider's own authorization form and token endpoint."""
    redirect = "http://127.0.0.1:9/callback"
    form = f"{base_url}/oauth2/authorize?" + urlencode({
        "response_type": "code", "client_id": client_id, "redirect_uri": redirect,
        "scope": "openid email", "nonce": nonce, "state": "any"})
    code = httpx.URL(authorize(form, "ida")).params["code"]
    answer = httpx.post(f"{base_url}/oauth2/token", data={
        "grant_type": "authorization_code", "code": code, "redirect_uri": redirect,
        "client_id": client_id, "client_secret": "whatever"})
    assert answer.status_code == 200, answer.text
    return answer.json()["id_token"]


def expected(issuer: str) -> Expected:
    return Expected(issuer=issuer, client_id=CLIENT_ID, nonce=NONCE, leeway_s=60)


def test_a_token_for_this_sign_in_holds(configured):
    claims = id_tokens.check(issued(configured), expected(configured))
    assert claims["sub"] == "ida" and claims["groups"] == ["acme-reviewers"]


def test_another_issuer_name_is_refused_even_signed_by_the_providers_key(configured):
    # The provider names itself after the host it is reached at: the same key, another issuer.
    elsewhere = configured.replace("127.0.0.1", "localhost")
    with pytest.raises(SignInRefused) as refused:
        id_tokens.check(issued(elsewhere), expected(configured))
    assert refused.value.code == "id_token_wrong_issuer"
    assert refused.value.message == (f"the ID token was issued by {elsewhere!r}, not by the configured "
                                     f"issuer {configured!r}")


def test_a_token_for_another_client_is_refused(configured):
    with pytest.raises(SignInRefused) as refused:
        id_tokens.check(issued(configured, client_id="another-app"), expected(configured))
    assert refused.value.code == "id_token_wrong_audience"
    assert refused.value.message == ("the ID token is for 'another-app', not for this registry's client "
                                     f"{CLIENT_ID!r}")


def test_another_sign_ins_nonce_is_refused(configured):
    with pytest.raises(SignInRefused) as refused:
        id_tokens.check(issued(configured, nonce="an-earlier-sign-in"), expected(configured))
    assert refused.value.code == "id_token_wrong_nonce"
    assert refused.value.message.startswith("the ID token's nonce is not this sign-in's")


def test_an_expired_token_is_refused_with_when_it_expired(configured):
    token = issued(configured)
    expiry = jwt.decode(token, _keys(configured)).claims["exp"]
    with pytest.raises(SignInRefused) as refused:
        id_tokens.check(token, expected(configured), now=expiry + 61)  # past the 60 s of clock skew
    assert refused.value.code == "id_token_expired"
    assert refused.value.message.startswith("the ID token expired at ")
    assert id_tokens.check(token, expected(configured), now=expiry + 59)["sub"] == "ida"


def test_a_token_signed_by_another_key_is_refused(configured):
    forged = jwt.encode({"alg": "RS256", "kid": "forged"}, {
        "iss": configured, "aud": CLIENT_ID, "sub": "ida", "nonce": NONCE, "iat": 1, "exp": 2**31},
        RSAKey.generate_key(2048))
    with pytest.raises(SignInRefused) as refused:
        id_tokens.check(forged, expected(configured))
    assert refused.value.code == "id_token_bad_signature"


def _keys(issuer: str):
    return provider.keys()
