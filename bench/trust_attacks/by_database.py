"""What someone who can write to the database, but holds none of the registry host's keys
(LORAPLANE_SECRET_KEY, the attestation key folder), attempts with SQL alone. Each attack puts
back what it changed, so that the next one starts from the same world."""

from __future__ import annotations

import hashlib
import secrets
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

import httpx
from sqlalchemy import delete, select, text, update
from sqlalchemy.orm import Session

from bench.trust_attacks.attack import Attack, Outcome
from bench.trust_attacks.by_fleet import judge_canary, windows_of
from bench.trust_attacks.by_people import _pending
from bench.trust_attacks.world import CODE, POOL, World, _promote, prompts_reach_impostor, upload
from registry.tables import (
    Adapter, AdapterVersion, ApiToken, AuditEvent, Identity, NodeAddress, Pool, PoolAlias, Promotion, Tenant,
    TrafficWindow,
)
from registry.traffic_windows.schemas import WINDOW_BUCKETS
from devkit.units_of_work import unit_of_work


def moves_a_node_to_its_server(world: World) -> Outcome:
    with unit_of_work(world.engine) as session:
        row = session.scalars(select(NodeAddress).join(Pool).where(Pool.name == POOL)).one()
        original, row.vllm_url = row.vllm_url, world.impostor.url
    try:
        reached = prompts_reach_impostor(world)
    finally:
        with unit_of_work(world.engine) as session:
            session.execute(update(NodeAddress).where(NodeAddress.vllm_url == world.impostor.url)
                            .values(vllm_url=original))
    return Outcome(reached, "node-1's address rewritten to the impostor: " +
                   ("prompts reached it" if reached else "its seal broke, and no prompt reached it"))


def mints_a_token(world: World) -> Outcome:
    plain = "lpt_" + secrets.token_urlsafe(32)
    with unit_of_work(world.engine) as session:
        identity = Identity(name="forged", tenant_id=None)
        session.add(identity)
        session.flush()
        row = ApiToken(token_hash=hashlib.sha256(plain.encode()).hexdigest(), subject="forged",
                       identity_id=identity.id, role="admin", tenant_id=None)
        session.add(row)
        session.flush()
        ids = row.id, identity.id
    try:
        status = httpx.get(world.registry_url + "/v1/whoami", headers={"Authorization": f"Bearer {plain}"}).status_code
    finally:
        with unit_of_work(world.engine) as session:
            session.delete(session.get(ApiToken, ids[0]))
            session.flush()
            session.delete(session.get(Identity, ids[1]))
    return Outcome(status == 200, f"a global admin token row with the token's sha256: whoami answered {status}")


AUDIT_TRIGGERS = ("audit_events_append_only", "audit_events_no_truncate")


@contextmanager
def _as_owner(engine) -> Iterator[Session]:
    """What the tables' owner can do in one transaction: switch the audit table's append-only
    triggers off, change anything, and switch them back on."""
    with unit_of_work(engine) as session:
        session.execute(text("ALTER TABLE audit_events DISABLE TRIGGER USER"))
        yield session
        session.flush()
        for trigger in AUDIT_TRIGGERS:
            session.execute(text(f"ALTER TABLE audit_events ENABLE ALWAYS TRIGGER {trigger}"))


def _version_row(session: Session, tenant: str, adapter: str, number: int) -> AdapterVersion:
    return session.scalar(select(AdapterVersion).join(Adapter).join(Tenant).where(
        Tenant.name == tenant, Adapter.name == adapter, AdapterVersion.number == number))


def _swap_then_approve(world: World, *, rewrite_events: bool) -> Outcome:
    promotion_id = _pending(world, "uploader")
    with _as_owner(world.engine) as session:
        pending = _version_row(session, "acme", "trust-chat", 3)
        other = _version_row(session, "globex", "trust-code", 2)
        kept = (pending.digest, pending.files)
        pending.digest, pending.files = other.digest, other.files
        events = []
        if rewrite_events:
            events = list(session.scalars(select(AuditEvent).where(
                AuditEvent.subject == world.versions["chat@3"]["served_name"],
                AuditEvent.action.in_(("adapter_version.upload", "evaluation.passed")))))
            for event in events:
                event.after = {**event.after, "digest": other.digest}
        before_events = {e.id: {**e.after, "digest": kept[0]} for e in events}
    try:
        response = world.client("reviewer").post(f"/v1/promotions/{promotion_id}/approve",
                                                 json={"comment": "looks fine"})
    finally:
        with _as_owner(world.engine) as session:
            pending = _version_row(session, "acme", "trust-chat", 3)
            pending.digest, pending.files = kept
            for event_id, after in before_events.items():
                session.get(AuditEvent, event_id).after = after
    signed = response.status_code == 200
    if signed:
        world.client("global_admin").post(f"/v1/pools/{POOL}/aliases/acme/trust-chat/production/rollback",
                                          json={"comment": "undo"})
    else:
        world.client("global_admin").post(f"/v1/promotions/{promotion_id}/reject", json={"comment": "refused"})
    return Outcome(signed, f"a real reviewer's approval of swapped bytes answered {response.status_code}")


def swaps_bytes_before_approval(world: World) -> Outcome:
    return _swap_then_approve(world, rewrite_events=False)


def swaps_bytes_and_rewrites_their_records(world: World) -> Outcome:
    return _swap_then_approve(world, rewrite_events=True)


def forges_windows_from_two_routers(world: World) -> Outcome:
    answered = [0] * (len(WINDOW_BUCKETS) + 1)
    answered[3] = 5000
    with unit_of_work(world.engine) as session:
        pool_id = session.scalar(select(Pool.id).where(Pool.name == POOL))
        session.execute(delete(TrafficWindow).where(TrafficWindow.pool_id == pool_id))  # a clean slate
        now = datetime.now(UTC)
        for router in ("router-1", "router-9"):
            report = str(uuid.uuid4())
            for key, alias in (("chat@2", "canary"), ("chat@1", "production")):
                session.add(TrafficWindow(
                    pool_id=pool_id, router_id=router, report_id=report, served_name=world.versions[key]["served_name"],
                    alias=alias, at=now, requests=5000, errors={}, completion_tokens=80000, busy_s=400.0,
                    ttft_buckets=answered, latency_buckets=answered))
    weight, state = judge_canary(world)
    unsealed = world.client("reviewer").get(f"/v1/promotions/{world.canary_id}/canary").json().get("unsealed_windows")
    moved = state != "active" or weight != 10
    if not moved and unsealed != 4:
        raise AssertionError(f"the canary did not move, yet not because its 4 forged windows went "
                             f"uncounted ({unsealed} unsealed): the attack was not judged")
    return Outcome(moved, f"windows inserted as two routers: canary {state} at {weight}%, "
                          f"{unsealed} windows without a valid seal not counted")


def _served_after_editing_an_alias(world: World, reader: str, *where, **values) -> dict | None:
    """Change the pool's alias row matching `where` to `values` with SQL and bump the pool's
    generation, as the registry's own change would; return the active set `reader` is then
    served (None if the registry never read the change), and put the row back."""
    client = world.client(reader)
    generation = client.get(f"/v1/pools/{POOL}/active-set").json()["generation"]
    with unit_of_work(world.engine) as session:
        row = session.scalar(select(PoolAlias).join(Pool).where(Pool.name == POOL, *where))
        kept, alias_id = {name: getattr(row, name) for name in values}, row.id
        for name, value in values.items():
            setattr(row, name, value)
        session.execute(update(Pool).where(Pool.name == POOL).values(generation=Pool.generation + 1))
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # the registry's poll of the database: about a second
            body = client.get(f"/v1/pools/{POOL}/active-set").json()
            if body["generation"] > generation:
                return body
            time.sleep(0.2)
        return None
    finally:
        with unit_of_work(world.engine) as session:
            session.execute(update(PoolAlias).where(PoolAlias.id == alias_id).values(**kept))
            session.execute(update(Pool).where(Pool.name == POOL).values(generation=Pool.generation + 1))


def _point_alias(world: World, key: str, tenant: str, adapter: str, number: int, alias: str) -> Outcome:
    """Point `alias` of the adapter at version `number`: does a node get that version with an
    attestation to trust?"""
    with Session(world.engine) as session:
        version = _version_row(session, tenant, adapter, number)
        adapter_id, version_id = version.adapter_id, version.id
    body = _served_after_editing_an_alias(world, "node", PoolAlias.adapter_id == adapter_id, PoolAlias.alias == alias,
                                          version_id=version_id)
    served = world.versions[key]["served_name"]
    entry = next((e for e in (body or {}).get("entries", []) if e["served_name"] == served), None)
    trusted = entry is not None and bool(entry.get("attestation"))
    return Outcome(trusted, f"{served} served to nodes "
                   + ("with the attestation of its earlier approval, which nodes accept" if trusted
                      else "with no attestation to trust"
                      if entry is not None else "not at all"))


def points_production_at_a_rolled_back_version(world: World) -> Outcome:
    return _point_alias(world, "code@2", "globex", "trust-code", 2, "production")


def points_production_at_a_version_nobody_approved(world: World) -> Outcome:
    return _point_alias(world, "chat@4", "acme", "trust-chat", 4, "production")


def moves_a_canarys_weight(world: World) -> Outcome:
    """Set the canary's weight to 90%: do the routers get it?"""
    body = _served_after_editing_an_alias(world, "router", PoolAlias.alias == "canary", weight=90)
    weight = next((a["weight"] for e in (body or {}).get("entries", []) for a in e["aliases"]
                   if a["alias"] == "canary"), None)
    return Outcome(weight == 90, f"the routers' active set gives the canary {weight}%")


def restores_an_old_signed_active_set(world: World) -> Outcome:
    """Put back the pool's signed active set from a backup taken while code@2 was production: a
    set the registry really signed, with its generation. Does a node get code@2 again?"""
    node = world.client("node")
    generation = node.get(f"/v1/pools/{POOL}/active-set").json()["generation"]
    with unit_of_work(world.engine) as session:
        pool = session.scalar(select(Pool).where(Pool.name == POOL))
        kept, pool.signed_active_set = pool.signed_active_set, world.old_signed_set
        pool.generation = pool.generation + 1
    try:
        deadline, response = time.monotonic() + 10, None
        while time.monotonic() < deadline:  # the registry's poll of the database: about a second
            response = node.get(f"/v1/pools/{POOL}/active-set")
            if response.status_code != 200 or response.json()["generation"] > generation:
                break
            time.sleep(0.2)
    finally:
        with unit_of_work(world.engine) as session:
            pool = session.scalar(select(Pool).where(Pool.name == POOL))
            pool.signed_active_set, pool.generation = kept, pool.generation + 1
    served = world.versions["code@2"]["served_name"]
    names = [e["served_name"] for e in response.json().get("entries", [])] if response.status_code == 200 else []
    return Outcome(served in names, f"the old signed set put back: the registry answered nodes "
                   f"{response.status_code}" + (f", serving {served}" if served in names else
                                                f" ({response.json()['error']['code']})" if response.status_code != 200
                                                else f", without {served}"))


def _one_routers_traffic_then(world: World, loosen, undo) -> tuple[int | None, str]:
    """One real router's windows, passing the canary (corroboration needs two), then `loosen`
    run as a database writer: is the canary judged on less than its policy asks?"""
    with unit_of_work(world.engine) as session:
        pool_id = session.scalar(select(Pool.id).where(Pool.name == POOL))
        session.execute(delete(TrafficWindow).where(TrafficWindow.pool_id == pool_id))  # a clean slate
    world.client("router").put(f"/v1/pools/{POOL}/routers/router-1/traffic", json={
        "requests_per_s": {}, "report_id": str(uuid.uuid4()),
        "windows": windows_of(world.versions["chat@2"]["served_name"], world.versions["chat@1"]["served_name"])})
    with unit_of_work(world.engine) as session:
        kept = loosen(session)
    try:
        return judge_canary(world)
    finally:
        with unit_of_work(world.engine) as session:
            undo(session, kept)
            session.execute(delete(TrafficWindow).where(TrafficWindow.pool_id == pool_id))


def lowers_the_routers_a_canary_needs(world: World) -> Outcome:
    def loosen(session: Session) -> int:
        pool = session.scalar(select(Pool).where(Pool.name == POOL))
        kept, pool.canary_min_routers = pool.canary_min_routers, 1
        return kept

    def undo(session: Session, kept: int) -> None:
        session.execute(update(Pool).where(Pool.name == POOL).values(canary_min_routers=kept))

    weight, state = _one_routers_traffic_then(world, loosen, undo)
    moved = state != "active" or weight != 10
    return Outcome(moved, f"canary_min_routers set to 1 under one router's passing traffic: canary {state} at {weight}%")


def forges_a_reviewers_confirmation(world: World) -> Outcome:
    def loosen(session: Session) -> dict:
        promotion = session.get(Promotion, world.canary_id)
        kept = dict(promotion.analysis_state)
        promotion.analysis_state = {**kept, "confirmed_by": {"step": kept["step"], "by": "a reviewer",
                                                             "verdict": "pass"}}
        return kept

    def undo(session: Session, kept: dict) -> None:
        session.get(Promotion, world.canary_id).analysis_state = kept

    weight, state = _one_routers_traffic_then(world, loosen, undo)
    moved = state != "active" or weight != 10
    return Outcome(moved, f"a reviewer's confirmation written into the canary's state: canary {state} at {weight}%")


def rolls_back_to_a_version_nobody_approved(world: World) -> Outcome:
    """Rewrite the promotion a rollback restores so that it names a version uploaded and never
    evaluated nor approved: does a real reviewer's rollback get it signed and served?"""
    _promote(world, "globex_uploader", "globex_reviewer", "code@2")  # code@1 before it, to restore
    stray = upload(world.client("globex_uploader"), CODE, seed=77)
    with unit_of_work(world.engine) as session:
        current = session.scalar(select(Promotion).join(Pool).join(Adapter).where(
            Pool.name == POOL, Adapter.name == CODE.split("/")[1], Promotion.alias == "production",
            Promotion.state == "active"))
        previous = session.get(Promotion, current.previous_id)
        kept, previous_id = previous.version_id, previous.id
        previous.version_id = _version_row(session, "globex", "trust-code", stray["number"]).id
    rollback = f"/v1/pools/{POOL}/aliases/{CODE}/production/rollback"
    try:
        response = world.client("globex_reviewer").post(rollback, json={"comment": "code@2 misbehaves"})
    finally:
        with unit_of_work(world.engine) as session:
            session.get(Promotion, previous_id).version_id = kept
    served = [e["served_name"] for e in world.client("node").get(f"/v1/pools/{POOL}/active-set").json()["entries"]]
    signed = response.status_code == 200
    # The world as it was: code@1 in production.
    if signed:
        _promote(world, "globex_uploader", "globex_reviewer", "code@1")
    else:
        world.client("globex_reviewer").post(rollback, json={"comment": "back to code@1"}).raise_for_status()
    return Outcome(signed, f"a reviewer's rollback to the rewritten promotion answered {response.status_code}"
                   + (f"; {stray['served_name']} served" if stray["served_name"] in served else ""))


ATTACKS = [
    Attack("database_writer", "moves_a_node_to_its_server", moves_a_node_to_its_server),
    Attack("database_writer", "mints_a_token", mints_a_token),
    Attack("database_writer", "swaps_bytes_before_an_approval", swaps_bytes_before_approval),
    Attack("database_writer", "swaps_bytes_and_rewrites_their_records", swaps_bytes_and_rewrites_their_records),
    Attack("database_writer", "points_production_at_a_version_nobody_approved",
           points_production_at_a_version_nobody_approved),
    Attack("database_writer", "points_production_at_a_rolled_back_version",
           points_production_at_a_rolled_back_version),
    Attack("database_writer", "forges_traffic_windows_as_two_routers", forges_windows_from_two_routers),
    Attack("database_writer", "moves_a_canarys_weight", moves_a_canarys_weight),
    Attack("database_writer", "restores_an_old_signed_active_set", restores_an_old_signed_active_set),
    Attack("database_writer", "lowers_the_routers_a_canary_needs", lowers_the_routers_a_canary_needs),
    Attack("database_writer", "forges_a_reviewers_confirmation", forges_a_reviewers_confirmation),
    Attack("database_writer", "rolls_back_to_a_version_nobody_approved", rolls_back_to_a_version_nobody_approved),
]
