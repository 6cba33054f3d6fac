"""Driving a sign-on the way a browser does, against the real OpenID provider process the suite
starts (oidc-provider-mock): its authorization form is posted with the person's subject."""

from __future__ import annotations

import json
import re
from html import unescape
from urllib.parse import quote

import httpx

MAPPINGS = [
    {"claim": "groups", "value": "platform-admins", "role": "admin", "tenant": None},
    {"claim": "groups", "value": "acme-reviewers", "role": "reviewer", "tenant": "acme"},
    {"claim": "groups", "value": "acme-uploaders", "role": "uploader", "tenant": "acme"},
    {"claim": "groups", "value": "ghost-reviewers", "role": "reviewer", "tenant": "ghost"},
    {"claim": "groups", "value": "closed-reviewers", "role": "reviewer", "tenant": "closed"},
]
CLIENT_ID, CLIENT_SECRET = "loraplane-tests", "the-client-secret"


def sso_env(provider_url: str) -> dict[str, str]:
    return {"LORAPLANE_SSO_ISSUER": provider_url, "LORAPLANE_SSO_CLIENT_ID": CLIENT_ID,
            "LORAPLANE_SSO_CLIENT_SECRET": CLIENT_SECRET, "LORAPLANE_SSO_PROVIDER_NAME": "Test IdP",
            "LORAPLANE_SSO_ROLE_MAPPINGS": json.dumps(MAPPINGS)}


def person(provider_url: str, subject: str, **claims) -> None:
    """Tell the provider who `subject` is (email, groups, ...)."""
    response = httpx.put(f"{provider_url}/users/{quote(subject, safe='')}", json=claims)
    assert response.status_code == 204, response.text


def authorize(authorization_url: str, subject: str) -> str:
    """The provider's answer (a redirect) once `subject` signs in on its form."""
    answer = httpx.post(authorization_url, data={"sub": subject})
    assert answer.status_code == 302, answer.text[:500]
    return answer.headers["location"]


def sign_on(browser: httpx.Client, subject: str, start: str = "/ui/sso/start") -> httpx.Response:
    """The whole round trip in `browser` (which keeps its cookies): start, the provider's form,
    and the registry's callback, whose response is returned."""
    started = browser.get(start)
    assert started.status_code == 303, started.text[:500]
    return browser.get(authorize(started.headers["location"], subject))


def sign_in_error(page: httpx.Response) -> str:
    found = re.search(r'id="sign-in-error">([^<]*)<', page.text)
    return unescape(found.group(1)) if found else ""


def login_token(registry_url: str, subject: str) -> str:
    """What `loraplane login` gets for `subject`: the CLI's sign-on, with its loopback address
    read from the redirect instead of served."""
    import secrets

    from registry.sso.pkce import s256

    verifier = secrets.token_urlsafe(64)
    challenge = s256(verifier)
    with httpx.Client(base_url=registry_url) as browser:
        started = confirm_cli(browser, browser.get("/ui/sso/start", params={"cli_port": 40000,
                                                                             "cli_challenge": challenge}))
        handed = browser.get(authorize(started.headers["location"], subject))
    assert handed.status_code == 303, sign_in_error(handed) or handed.text[:300]
    code = httpx.URL(handed.headers["location"]).params["code"]
    login = httpx.post(f"{registry_url}/v1/sso/token", json={"exchange_code": code, "code_verifier": verifier})
    assert login.status_code == 200, login.text
    return login.json()["token"]


def confirm_cli(browser: httpx.Client, page: httpx.Response) -> httpx.Response:
    """Continue on the page that shows a CLI sign-on's confirmation code: the redirect to the
    provider."""
    assert page.status_code == 200, page.text[:300]
    form = dict(re.findall(r'name="(csrf_token|cli_port|cli_challenge)" value="([^"]*)"', page.text))
    continued = browser.post(str(page.url.copy_with(query=None)), data=form)
    assert continued.status_code == 303, continued.text[:300]
    return continued


def shown_code(page: httpx.Response) -> str:
    found = re.search(r'id="confirmation-code">([^<]+)<', page.text)
    return found.group(1) if found else ""
