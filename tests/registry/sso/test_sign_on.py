"""Signing on through a real OpenID provider process: the round trip a browser makes, the identity
it ends in (issuer and subject, never a name), and every answer that must be refused, each saying
why, with nothing stored but the used state."""

from __future__ import annotations

import itertools
import uuid

import httpx
import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from registry.tables import ApiToken, AuditEvent, DashboardSession, Identity, SsoIdentity
from tests.support.sso import authorize, confirm_cli, person, shown_code, sign_in_error, sign_on

counter = itertools.count()


def subject() -> str:
    return f"person-{uuid.uuid4().hex[:12]}"


def stored(engine) -> dict[str, int]:
    with Session(engine) as session:
        return {table.__name__: session.scalar(select(func.count()).select_from(table))
                for table in (ApiToken, Identity, SsoIdentity, DashboardSession)} | {
            "sign-on events": session.scalar(select(func.count()).select_from(AuditEvent).where(
                AuditEvent.action.in_(["sso.signed_on", "identity.created"])))}


@pytest.fixture
def browser(sso_registry):
    with httpx.Client(base_url=sso_registry.url, timeout=30) as client:
        yield client


def test_a_mapped_person_signs_on_to_the_dashboard_as_their_identity(browser, oidc_provider, engine):
    who = subject()
    person(oidc_provider.url, who, email="ada@example.com", groups=["staff", "acme-reviewers"])

    landed = sign_on(browser, who)

    assert landed.status_code == 200 and 'url=/ui/approvals' in landed.text
    queue = browser.get("/ui/approvals")
    assert queue.status_code == 200 and "ada@example.com" in queue.text
    with Session(engine) as session:
        sso = session.scalar(select(SsoIdentity).where(SsoIdentity.subject == who))
        assert sso.issuer == oidc_provider.url
        token = session.scalars(select(ApiToken).where(ApiToken.identity_id == sso.identity_id)).one()
        assert (token.role, token.origin, token.revoked_at) == ("reviewer", "sso-session", None)
        event = session.scalars(select(AuditEvent).where(AuditEvent.action == "sso.signed_on",
                                                         AuditEvent.subject == f"identity/{sso.identity_id}")).one()
    assert event.after["issuer"] == oidc_provider.url and event.after["subject"] == who
    assert event.after["tenant"] == "acme" and event.after["mapping"] == 2

    signed_out = browser.post("/ui/sign-out", data={"csrf_token": _csrf(queue.text)})
    assert signed_out.status_code == 303
    with Session(engine) as session:  # the session's own token ends with it
        assert session.get(ApiToken, token.id).revoked_at is not None


def test_the_same_subject_is_one_identity_and_the_same_name_of_another_subject_is_another(
        sso_registry, oidc_provider, engine):
    first, second = subject(), subject()
    for who in (first, second):
        person(oidc_provider.url, who, email="same.name@example.com", groups=["acme-uploaders"])
    identities = []
    for who in (first, first, second):
        with httpx.Client(base_url=sso_registry.url) as browser:
            assert sign_on(browser, who).status_code == 200
        with Session(engine) as session:
            identities.append(session.scalar(select(SsoIdentity.identity_id).where(SsoIdentity.subject == who)))
    assert identities[0] == identities[1] != identities[2]


@pytest.mark.parametrize("groups, status, message", [
    (["staff", "interns"], 403, "your identity provider's claims (groups: staff, interns) map to no "
                                "loraplane role Ask an admin to map one of your groups to a role "
                                "(LORAPLANE_SSO_ROLE_MAPPINGS)."),
    ([], 403, "your identity provider's claims (groups: none) map to no loraplane role"),
    (["ghost-reviewers"], 403, "your claims map to tenant 'ghost' (LORAPLANE_SSO_ROLE_MAPPINGS rule 4), "
                               "which does not exist"),
])
def test_claims_that_map_to_no_role_or_tenant_are_refused_and_nothing_is_stored(
        browser, oidc_provider, engine, groups, status, message):
    who = subject()
    person(oidc_provider.url, who, email="eve@example.com", groups=groups)
    before = stored(engine)

    refused = sign_on(browser, who)

    assert refused.status_code == status
    assert sign_in_error(refused).startswith(message)
    assert stored(engine) == before
    assert "loraplane_session" not in browser.cookies


def test_a_person_of_a_disabled_tenant_is_refused_and_nothing_is_stored(browser, oidc_provider, engine, admin):
    if admin.get("/v1/tenants/closed").status_code == 404:
        assert admin.post("/v1/tenants", json={"name": "closed"}).status_code == 201
    assert admin.patch("/v1/tenants/closed", json={"disabled": True}).status_code == 200
    who = subject()
    person(oidc_provider.url, who, email="cy@example.com", groups=["closed-reviewers"])
    before = stored(engine)

    refused = sign_on(browser, who)

    assert refused.status_code == 403
    assert sign_in_error(refused) == "tenant 'closed' is disabled Ask a global admin to enable it."
    assert stored(engine) == before


def test_a_replayed_answer_is_refused_as_replayed(browser, oidc_provider, engine):
    who = subject()
    person(oidc_provider.url, who, email="ada@example.com", groups=["acme-reviewers"])
    started = browser.get("/ui/sso/start")
    answer = authorize(started.headers["location"], who)
    assert browser.get(answer).status_code == 200
    before = stored(engine)

    with httpx.Client(base_url=browser.base_url, cookies={"loraplane_sso": started.cookies["loraplane_sso"]}) as thief:
        replayed = thief.get(answer)

    assert replayed.status_code == 401
    assert sign_in_error(replayed) == ("this sign-in's state was already used: the provider's answer was "
                                       "replayed Start the sign-in again.")
    assert stored(engine) == before


def test_an_answer_in_a_browser_that_did_not_start_the_sign_in_is_refused(sso_registry, oidc_provider, engine):
    """Login CSRF: someone's own answer, carried to a victim's browser, signs the victim in as
    no one."""
    who = subject()
    person(oidc_provider.url, who, email="mallory@example.com", groups=["acme-reviewers"])
    with httpx.Client(base_url=sso_registry.url) as attacker:
        answer = authorize(attacker.get("/ui/sso/start").headers["location"], who)
    before = stored(engine)

    with httpx.Client(base_url=sso_registry.url) as victim:
        refused = victim.get(answer)

    assert refused.status_code == 401
    assert sign_in_error(refused).startswith("this browser did not start the sign-in this answer is for")
    assert stored(engine) == before


def test_a_code_used_once_is_refused_by_the_provider_and_said_so(browser, oidc_provider, engine):
    who = subject()
    person(oidc_provider.url, who, email="ada@example.com", groups=["acme-reviewers"])
    first = authorize(browser.get("/ui/sso/start").headers["location"], who)
    assert browser.get(first).status_code == 200
    used_code = httpx.URL(first).params["code"]
    second = httpx.URL(authorize(browser.get("/ui/sso/start").headers["location"], who))
    before = stored(engine)

    refused = browser.get(second.copy_set_param("code", used_code))

    assert refused.status_code == 401
    assert sign_in_error(refused).startswith("the identity provider refused the authorization code (invalid_grant")
    assert stored(engine) == before


def test_a_provider_that_does_not_sign_the_person_in_is_said_so(browser, oidc_provider, engine):
    started = browser.get("/ui/sso/start")
    denied = httpx.post(started.headers["location"], data={"action": "deny"})
    before = stored(engine)

    refused = browser.get(denied.headers["location"])

    assert refused.status_code == 401
    assert sign_in_error(refused).startswith("the identity provider did not sign you in (access_denied")
    assert stored(engine) == before


def test_the_sign_in_page_offers_the_provider(browser):
    page = browser.get("/ui/sign-in")
    assert page.status_code == 200 and "Sign in with Test IdP" in page.text


def test_a_registry_without_a_provider_says_so(registry):
    assert httpx.get(registry.url + "/v1/sso").json() == {"enabled": False, "provider": None, "start_path": None}
    refused = httpx.get(registry.url + "/ui/sso/start")
    assert refused.status_code == 503 and "single sign-on is not configured on this registry" in refused.text


def _csrf(page: str) -> str:
    import re

    return re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)


def test_sign_ins_that_can_no_longer_be_used_are_forgotten_and_others_kept(engine):
    from datetime import UTC, datetime, timedelta

    from devkit.units_of_work import unit_of_work
    from registry.sso import sign_ins
    from registry.tables import SsoSignIn

    now = datetime.now(UTC)
    with unit_of_work(engine) as session:
        for name, expires_at in (("long-gone", now - timedelta(hours=2)), ("just-expired", now - timedelta(minutes=5)),
                                 ("open", now + timedelta(minutes=5))):
            session.add(SsoSignIn(state_hash=f"{name}-{uuid.uuid4().hex}".ljust(64, "0")[:64],
                                  purpose="dashboard", expires_at=expires_at))
    with unit_of_work(engine) as session:
        sign_ins.forget_expired(session)
    with Session(engine) as session:
        left = {row.state_hash.split("-")[0] for row in session.scalars(select(SsoSignIn))}
    assert "long" not in left and {"just", "open"} <= left


def test_a_login_grant_written_in_the_database_grants_nothing(sso_registry, engine):
    """A database writer's own row, with a code and verifier of their choosing, for a global admin."""
    from datetime import UTC, datetime, timedelta
    import hashlib

    from devkit.units_of_work import unit_of_work
    from registry.sso.pkce import s256
    from registry.tables import SsoSignIn

    code, verifier = "c" * 43, "v" * 64
    with unit_of_work(engine) as session:
        session.add(SsoSignIn(state_hash=uuid.uuid4().hex * 2, purpose="cli", cli_port=40000,
                              cli_challenge=s256(verifier), used_at=datetime.now(UTC),
                              expires_at=datetime.now(UTC) + timedelta(minutes=2),
                              exchange_hash=hashlib.sha256(code.encode()).hexdigest(), identity_id=1,
                              role="admin", tenant_id=None, display_name="root", grant_seal="0" * 64))
    before = stored(engine)

    refused = httpx.post(sso_registry.url + "/v1/sso/token", json={"exchange_code": code, "code_verifier": verifier})

    assert refused.status_code == 401
    assert refused.json()["error"]["message"] == "this login code is unknown, used, expired, or not this CLI's"
    assert stored(engine) == before


def test_a_cli_sign_on_shows_its_confirmation_code_and_continues_only_by_the_form(browser, oidc_provider):
    from registry.sso.pkce import confirmation_code, s256

    challenge = s256("a-verifier-" + "x" * 50)
    page = browser.get("/ui/sso/start", params={"cli_port": 40123, "cli_challenge": challenge})

    assert page.status_code == 200 and "loraplane_sso" not in browser.cookies  # nothing started yet
    assert shown_code(page) == confirmation_code(challenge)
    assert f"form-action 'self' {oidc_provider.url}" in page.headers["content-security-policy"]
    forged = browser.post("/ui/sso/start", data={"cli_port": 40123, "cli_challenge": challenge,
                                                 "csrf_token": "0" * 64})
    assert forged.status_code == 403 and "CSRF token" in forged.text
    assert "loraplane_sso" not in browser.cookies
    assert confirm_cli(browser, page).headers["location"].startswith(f"{oidc_provider.url}/oauth2/authorize?")


def test_where_people_must_sign_on_an_unlinked_person_token_is_refused_until_linked(
        sso_registry, oidc_provider, admin, client_with, engine, tokens, monkeypatch):
    from devkit.units_of_work import unit_of_work
    from registry.auth import tokens as auth_tokens
    from registry.errors import Unauthorized
    from registry.settings import get_settings
    from tests.support.nodes import issue_token
    from tests.support.sso import login_token

    old = issue_token(admin, f"pat-{next(counter)}", role="reviewer", tenant="acme")
    who = subject()
    person(oidc_provider.url, who, email="pat@example.com", groups=["acme-reviewers"])
    signed_on = login_token(sso_registry.url, who)
    monkeypatch.setenv("LORAPLANE_SSO_REQUIRED_FOR_PEOPLE", "true")
    get_settings.cache_clear()
    try:
        with unit_of_work(engine) as session:
            with pytest.raises(Unauthorized) as refused:
                auth_tokens.authenticate(session, old)
            assert refused.value.code == "sign_on_required"
            assert refused.value.message == ("people sign on here, and this token's identity is not linked "
                                             "to a sign-on")
            assert auth_tokens.authenticate(session, signed_on).role == "reviewer"
            assert auth_tokens.authenticate(session, tokens["global_admin"]).role == "admin"  # unaffected
        linked = client_with(signed_on).post("/v1/identities/link", json={"token": old})
        assert linked.status_code == 200, linked.text
        with unit_of_work(engine) as session:
            assert auth_tokens.authenticate(session, old).role == "reviewer"
    finally:
        monkeypatch.delenv("LORAPLANE_SSO_REQUIRED_FOR_PEOPLE")
        get_settings.cache_clear()
