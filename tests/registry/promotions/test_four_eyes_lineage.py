"""Four-eyes compares identities and who issued whose token, never names: a tenant admin who
mints a reviewer token cannot approve their own upload with it, a person with two tokens is one
person, and a stranger who happens to share a name is not."""

from __future__ import annotations

import itertools

import httpx
import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from registry.tables import ApiToken

from devkit.pipeline_steps import request_promotion
from tests.support.asserts import assert_refused
from tests.support.nodes import issue_token
from tests.support.promotions import active_set, served

names = itertools.count()


def token_count(engine) -> int:
    with Session(engine) as session:
        return session.scalar(select(func.count()).select_from(ApiToken))


def identity(client: httpx.Client) -> int:
    return client.get("/v1/whoami").json()["identity_id"]


def approve(client: httpx.Client, promotion_id: int) -> httpx.Response:
    return client.post(f"/v1/promotions/{promotion_id}/approve", json={"comment": "looks fine"})


@pytest.fixture
def lead(admin, client_with) -> httpx.Client:
    """A tenant admin issued by the global admin, as a real tenant's lead would be."""
    return client_with(issue_token(admin, f"acme-lead-{next(names)}", role="admin", tenant="acme"))


def refused_alone(response, admin, pool, promotion, message):
    assert_refused(response, 403, "four_eyes", message)
    assert admin.get(f"/v1/promotions/{promotion['id']}").json()["state"] == "awaiting_approval"
    assert promotion["served_name"] not in served(active_set(admin, pool))
    assert admin.get("/readyz").status_code == 200


def test_a_reviewer_token_the_uploader_minted_cannot_approve(promo_pools, make_ready, admin, lead,
                                                            client_with):
    pool = promo_pools["open"]
    version = make_ready(f"minted-{next(names)}", uploader=lead)
    promotion = request_promotion(lead, pool, version).json()
    # The lead mints a reviewer with an innocent name, and tries to approve with it.
    sock_puppet = client_with(issue_token(lead, "bob", role="reviewer", tenant="acme"))
    lead_id, bob_id = identity(lead), identity(sock_puppet)
    assert lead_id != bob_id
    generation = active_set(admin, pool)["generation"]

    refused_alone(approve(sock_puppet, promotion["id"]), admin, pool, {**promotion, **version},
                  f"bob (identity {bob_id}) holds a token issued through "
                  f"{lead.get('/v1/whoami').json()['subject']} (identity {lead_id}), who uploaded "
                  "this version, and may not approve it")
    assert active_set(admin, pool)["generation"] == generation


def test_an_admin_cannot_approve_what_a_token_they_minted_uploaded(promo_pools, make_ready, admin,
                                                                  lead, client_with):
    pool = promo_pools["open"]
    puppet = client_with(issue_token(lead, "alice", role="uploader", tenant="acme"))
    version = make_ready(f"puppet-{next(names)}", uploader=puppet)
    promotion = request_promotion(puppet, pool, version).json()
    lead_name = lead.get("/v1/whoami").json()["subject"]

    refused_alone(approve(lead, promotion["id"]), admin, pool, {**promotion, **version},
                  f"{lead_name} (identity {identity(lead)}) issued a token of alice "
                  f"(identity {identity(puppet)}), who uploaded this version, and may not approve it")


def test_a_second_token_of_the_same_person_is_the_same_person(promo_pools, make_ready, admin,
                                                              client_with):
    # A person of this test's own: giving the session's uploader a token from the global admin
    # would put the admin in its lineage and refuse the admin's approvals in later tests.
    pool = promo_pools["open"]
    subject = f"two-devices-{next(names)}"
    uploader = client_with(issue_token(admin, subject, role="uploader", tenant="acme"))
    me = identity(uploader)
    second = client_with(issue_token(admin, f"{subject} laptop", role="reviewer", tenant="acme",
                                     identity_id=me))
    assert identity(second) == me
    version = make_ready(f"twice-{next(names)}", uploader=uploader)
    promotion = request_promotion(uploader, pool, version).json()

    refused_alone(approve(second, promotion["id"]), admin, pool, {**promotion, **version},
                  f"{subject} (identity {me}) uploaded this version and may not approve it")


def test_a_look_alike_name_is_neither_refused_nor_trusted_for_its_name(promo_pools, make_ready,
                                                                       admin, client_for, client_with):
    """Another person who shares the uploader's name (here with a Cyrillic 'а') is a different
    identity, outside the uploader's lineage, so their approval counts; the name decides nothing."""
    pool = promo_pools["open"]
    twin = client_with(issue_token(admin, "\u0430cme_uploader", role="reviewer", tenant="acme"))
    version = make_ready(f"twin-{next(names)}")
    promotion = request_promotion(client_for("acme_uploader"), pool, version).json()

    approved = approve(twin, promotion["id"])

    assert approved.status_code == 200, approved.text
    four_eyes = next(g for g in approved.json()["gates"] if g["name"] == "four_eyes")
    assert four_eyes["passed"]
    events = admin.get("/v1/audit", params={"action": "promotion.approved",
                                            "subject": f"pool/{pool}/{version['served_name']}"}).json()["items"]
    assert len(events) == 1 and f"identity {identity(twin)}" in events[0]["actor"]


def test_two_puppets_of_one_admin_cannot_approve_each_other(promo_pools, make_ready, admin, lead,
                                                           client_with):
    """The lead mints an uploader and a reviewer; neither is the lead, nor issued the other, but
    the lead holds both their secrets."""
    pool = promo_pools["open"]
    alice = client_with(issue_token(lead, "alice", role="uploader", tenant="acme"))
    bob = client_with(issue_token(lead, "bob", role="reviewer", tenant="acme"))
    version = make_ready(f"puppets-{next(names)}", uploader=alice)
    promotion = request_promotion(alice, pool, version).json()
    lead_name = lead.get("/v1/whoami").json()["subject"]

    refused_alone(approve(bob, promotion["id"]), admin, pool, {**promotion, **version},
                  f"bob (identity {identity(bob)}) and alice (identity {identity(alice)}), who "
                  f"uploaded this version, hold tokens issued through the same {lead_name} "
                  f"(identity {identity(lead)}), who could act as both; bob (identity "
                  f"{identity(bob)}) may not approve it")


def test_only_a_global_admin_may_give_another_identity_a_token(admin, client_for, lead, engine):
    """Else a tenant admin could act, and be audited, as a peer."""
    peer = identity(client_for("acme_admin"))
    before = token_count(engine)
    response = lead.post("/v1/tokens", json={"subject": "borrowed", "role": "reviewer",
                                             "tenant": "acme", "identity_id": peer})
    assert_refused(response, 403, "forbidden", "only a global admin may issue a token to another identity")
    own = lead.post("/v1/tokens", json={"subject": "second-device", "role": "admin", "tenant": "acme",
                                        "identity_id": identity(lead)})
    assert own.status_code == 201 and own.json()["identity_id"] == identity(lead)
    globex = identity(client_for("globex_uploader"))
    wrong_tenant = admin.post("/v1/tokens", json={"subject": "borrowed", "role": "reviewer",
                                                  "tenant": "acme", "identity_id": globex})
    assert_refused(wrong_tenant, 404, "identity_not_found",
                   f"identity {globex} does not exist in this token's tenant")
    assert token_count(engine) == before + 1  # only the second device
