"""A pool serves its signed active set, not its rows: alias rows, weights and retirements edited
with SQL change nothing nodes or routers are told; an older signed set put back is refused; a pool
without a valid signed set serves nothing new and takes no change until an operator seals it."""

from __future__ import annotations

import json
import time
import uuid

import httpx
import pytest
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from devkit.pipeline_steps import request_promotion
from registry.active_set.writing import sealing
from registry.tables import AuditEvent, Pool, PoolAlias, Promotion
from signed_digests import provenance
from tests.support.asserts import assert_refused
from tests.support.promotions import active_set, promote, served
from devkit.units_of_work import unit_of_work


@pytest.fixture
def pool(admin: httpx.Client, promo_pools) -> str:
    """A pool of its own: these tests break its signed set on purpose."""
    name = f"signed-{uuid.uuid4().hex[:12]}"
    created = admin.post("/v1/pools", json={"name": name, "base_model": "promo-base", "dtype": "float32",
                                            "max_loras": 2, "max_cpu_loras": 8, "max_lora_rank": 16})
    assert created.status_code == 201, created.text
    return name


def edit(engine, pool: str, **values) -> None:
    """As a database writer would: change the pool row, bump its generation."""
    with unit_of_work(engine) as session:
        session.execute(update(Pool).where(Pool.name == pool).values(generation=Pool.generation + 1, **values))


def newer_than(client: httpx.Client, pool: str, generation: int) -> httpx.Response:
    """The first answer after the registry noticed a generation beyond `generation` (it polls
    the database about once a second), or a refusal."""
    deadline = time.monotonic() + 15
    while True:
        response = client.get(f"/v1/pools/{pool}/active-set")
        if response.status_code != 200 or response.json()["generation"] > generation or time.monotonic() > deadline:
            return response
        time.sleep(0.1)


def test_rows_edited_with_sql_change_nothing_served_and_the_next_change_puts_them_back(
        pool, make_ready, uploader, second_reviewer, admin, engine):
    v1, v2, v3 = make_ready("signed-bot"), make_ready("signed-bot"), make_ready("signed-bot")
    promote(uploader, second_reviewer, pool, v1)
    promote(uploader, second_reviewer, pool, v2, "canary", 10)
    before = active_set(admin, pool)
    with unit_of_work(engine) as session:
        pool_id = session.scalar(select(Pool.id).where(Pool.name == pool))
        session.execute(update(PoolAlias).where(PoolAlias.pool_id == pool_id, PoolAlias.alias == "canary")
                        .values(weight=90))
        session.execute(update(PoolAlias).where(PoolAlias.pool_id == pool_id, PoolAlias.alias == "production")
                        .values(version_id=session.scalar(select(Promotion.version_id).where(
                            Promotion.pool_id == pool_id, Promotion.alias == "canary"))))
    edit(engine, pool)

    after = newer_than(admin, pool, before["generation"])

    assert after.status_code == 200, after.text
    assert after.json()["generation"] == before["generation"] + 1
    assert served(after.json()) == served(before) == {"acme/signed-bot@1": [("production", 90)],
                                                       "acme/signed-bot@2": [("canary", 10)]}
    # A change starts from the signed set: promoting v3 to production moves production from
    # v1 (signed), not from v2 (the edited row), and puts the canary's weight back in the rows.
    promote(uploader, second_reviewer, pool, v3)
    assert served(active_set(admin, pool)) == {"acme/signed-bot@3": [("production", 90)],
                                               "acme/signed-bot@2": [("canary", 10)]}
    with Session(engine) as session:
        rows = {(a.alias, a.weight) for a in session.scalars(
            select(PoolAlias).join(Pool).where(Pool.name == pool))}
    assert rows == {("production", None), ("canary", 10)}


def test_the_signed_set_verifies_with_the_published_trust_bundle_and_names_what_is_served(
        pool, make_ready, uploader, second_reviewer, admin, registry):
    v1 = make_ready("signed-proof")
    promote(uploader, second_reviewer, pool, v1)
    body = active_set(admin, pool)
    bundle = provenance.TrustBundle.parse(httpx.get(registry.url + provenance.TRUST_BUNDLE_PATH).json())

    document = bundle.verify_active_set(body["signed"])

    assert (document["pool"], document["generation"]) == (pool, body["generation"])
    assert [(a["served_name"], a["alias"], a["digest"]) for a in document["aliases"]] == \
        [("acme/signed-proof@1", "production", v1["digest"])]
    forged = {**body["signed"], "payload": provenance.base64.b64encode(provenance.canonical(
        {**document, "aliases": [{**document["aliases"][0], "weight": 5}]})).decode()}
    with pytest.raises(provenance.Unverified, match="changed after it was signed"):
        bundle.verify_active_set(forged)
    with pytest.raises(provenance.Unverified, match="not 'application/vnd.in-toto"):
        bundle.verify(body["signed"])  # a signed set is never mistaken for an attestation


def test_an_older_signed_set_put_back_is_refused(pool, make_ready, uploader, second_reviewer, admin, engine):
    v1, v2 = make_ready("signed-replay"), make_ready("signed-replay")
    promote(uploader, second_reviewer, pool, v1)
    with Session(engine) as session:
        backup = session.scalar(select(Pool.signed_active_set).where(Pool.name == pool))
    promote(uploader, second_reviewer, pool, v2)
    current = active_set(admin, pool)  # the registry has served this generation

    edit(engine, pool, signed_active_set=backup)
    refused = newer_than(admin, pool, current["generation"])

    assert_refused(refused, 503, "active_set_unverified", "older than generation")
    with Session(engine) as session:
        session.execute(update(Pool).where(Pool.name == pool).values(
            signed_active_set=current["signed"], generation=Pool.generation + 1))
        session.commit()
    assert served(newer_than(admin, pool, current["generation"] + 1).json()) == \
        {"acme/signed-replay@2": [("production", 100)]}


def test_a_pool_without_a_signed_set_serves_and_changes_nothing_until_sealed(
        pool, make_ready, uploader, second_reviewer, admin, engine):
    v1, v2 = make_ready("signed-seal"), make_ready("signed-seal")
    promote(uploader, second_reviewer, pool, v1)
    pending = request_promotion(uploader, pool, v2, "production", None).json()["id"]
    generation = active_set(admin, pool)["generation"]
    edit(engine, pool, signed_active_set=None)

    refused = newer_than(admin, pool, generation)
    approval = second_reviewer.post(f"/v1/promotions/{pending}/approve", json={"comment": "ok"})

    assert_refused(refused, 503, "active_set_unverified", "has no signed active set")
    assert "loraplane db seal-active-sets" in refused.json()["error"]["hint"]
    assert_refused(approval, 503, "active_set_unverified", "has no signed active set")
    assert_refused(request_promotion(uploader, pool, v2, "canary", 10), 503, "active_set_unverified",
                   "has no signed active set")  # its gates compare with the signed set
    assert second_reviewer.get(f"/v1/promotions/{pending}").json()["state"] == "awaiting_approval"

    with unit_of_work(engine) as session:
        assert sealing.seal(session, actor="operator (test)", pool_name=pool) == [pool]
    sealed = newer_than(admin, pool, generation + 1)
    assert sealed.status_code == 200, sealed.text
    assert served(sealed.json()) == {"acme/signed-seal@1": [("production", 100)]}
    with Session(engine) as session:
        event = session.scalars(select(AuditEvent).where(AuditEvent.action == "pool.active_set.sealed",
                                                         AuditEvent.subject == f"pool/{pool}")).one()
    assert event.actor == "operator (test)"
    assert event.after["aliases"] == [{"served_name": "acme/signed-seal@1", "alias": "production", "weight": None}]
    approved = second_reviewer.post(f"/v1/promotions/{pending}/approve", json={"comment": "ok"})
    assert approved.status_code == 200, approved.text
    assert json.dumps(served(active_set(admin, pool))) == json.dumps({"acme/signed-seal@2": [("production", 100)]})


@pytest.mark.parametrize("written", [None, {"signatures": [{"keyid": "made-up"}], "payload": "e30="}, ["not", "a", "set"]])
def test_a_signed_set_written_by_hand_never_stops_the_key_upkeep_a_registry_runs_at_start(pool, engine, written):
    from registry.attestations.upkeep import resign_active

    with unit_of_work(engine) as session:
        session.execute(update(Pool).where(Pool.name == pool).values(signed_active_set=written))
    with unit_of_work(engine) as session:
        resign_active(session)  # at every registry start: it must not raise, whatever is there
    with Session(engine) as session:
        assert session.scalar(select(Pool.signed_active_set).where(Pool.name == pool)) == written


def test_a_row_read_before_a_newer_set_was_served_is_not_taken_for_a_replay(pool, engine):
    """A request reads its pool row, another change commits and a long-poll serves the newer set,
    then the request's gates read the signed set from the row it holds: that is an older set, and
    no replay. (A change and a reader lock the row first, so they compare with what was served.)"""
    from registry.active_set import signed_set
    from registry.active_set.reading import snapshot
    from registry.active_set.writing.change import new_generation
    from registry.settings import get_settings
    from registry.storage import get_store

    with Session(engine) as request:
        held = request.scalar(select(Pool).where(Pool.name == pool))
        with unit_of_work(engine) as change:
            new_generation(change, held.id)
        with Session(engine) as reader, reader.begin():
            served = snapshot.read(reader, pool, get_store(), get_settings())

        assert signed_set.load(held).generation == served.generation - 1
        assert signed_set.version_at(held, 0, "production") is None
