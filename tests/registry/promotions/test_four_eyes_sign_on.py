"""Four-eyes with single sign-on: a person is their provider's issuer and subject. Someone who
uploaded with an old token and linked it to their sign-on cannot approve that upload signed on;
someone else with the same name and email, another subject, can."""

from __future__ import annotations

import itertools
import uuid

import httpx
from sqlalchemy import select
from sqlalchemy.orm import Session

from devkit.pipeline_steps import request_promotion
from registry.tables import Identity
from tests.support.asserts import assert_refused
from tests.support.nodes import issue_token
from tests.support.promotions import active_set, served
from tests.support.sso import login_token, person

names = itertools.count()


def whoami(client: httpx.Client) -> dict:
    return client.get("/v1/whoami").json()


def test_an_old_token_linked_to_a_sign_on_is_one_person_and_a_namesake_is_not(
        promo_pools, make_ready, admin, client_for, client_with, sso_registry, oidc_provider):
    pool = promo_pools["open"]
    old_plain = issue_token(admin, f"lin-{next(names)}", role="uploader", tenant="acme")
    old = client_with(old_plain)
    version = make_ready(f"linked-{next(names)}", uploader=old)
    promotion = request_promotion(client_for("acme_admin"), pool, version).json()

    lin, namesake = f"lin-{uuid.uuid4().hex[:8]}", f"lin-{uuid.uuid4().hex[:8]}"
    for subject in (lin, namesake):
        person(oidc_provider.url, subject, email="lin@example.com", groups=["acme-reviewers"])
    signed_on = client_with(login_token(sso_registry.url, lin))
    linked = signed_on.post("/v1/identities/link", json={"token": old_plain})
    assert linked.status_code == 200, linked.text
    assert sorted(linked.json()["identities"]) == sorted([whoami(signed_on)["identity_id"], whoami(old)["identity_id"]])

    refused = signed_on.post(f"/v1/promotions/{promotion['id']}/approve", json={"comment": "mine"})

    me, them = whoami(signed_on), whoami(old)
    assert_refused(refused, 403, "four_eyes",
                   f"lin@example.com (identity {me['identity_id']}) is linked as one person with "
                   f"{them['subject']} (identity {them['identity_id']}), who uploaded this version, "
                   "and may not approve it")
    assert promotion["served_name"] not in served(active_set(admin, pool))

    other = client_with(login_token(sso_registry.url, namesake))
    assert other.post(f"/v1/promotions/{promotion['id']}/approve", json={"comment": "fine"}).status_code == 200


def test_linking_needs_a_valid_token_of_the_other_identity_and_changes_nothing_otherwise(
        sso_registry, oidc_provider, client_with, engine):
    subject = f"kim-{uuid.uuid4().hex[:8]}"
    person(oidc_provider.url, subject, email="kim@example.com", groups=["acme-reviewers"])
    signed_on = client_with(login_token(sso_registry.url, subject))
    with Session(engine) as session:
        before = session.execute(select(Identity.id, Identity.same_as_id).order_by(Identity.id)).all()

    refused = signed_on.post("/v1/identities/link", json={"token": "lpt_" + "x" * 43})

    assert_refused(refused, 401, "unauthorized", "invalid or revoked token")
    with Session(engine) as session:
        assert session.execute(select(Identity.id, Identity.same_as_id).order_by(Identity.id)).all() == before
