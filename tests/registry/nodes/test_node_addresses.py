"""A node's vLLM address comes from the admin who issued its token, never from the node's own
report, and a database writer without the registry host's secret cannot change it unseen: routers
send tenants' prompts to the address the rollout names."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from registry.tables import ApiToken, AuditEvent, NodeAddress, Pool

from tests.support.asserts import assert_refused
from tests.support.nodes import NodeFleet, bound_address, issue_token
from devkit.units_of_work import unit_of_work

POOL = "addressed"
LIMITS = {"max_loras": 2, "max_cpu_loras": 8, "max_lora_rank": 16}
ATTACKER = "http://127.0.0.1:8799"


@pytest.fixture(scope="module")
def fleet(admin, promo_pools):
    assert admin.post("/v1/pools", json={"name": POOL, "base_model": "promo-base", **LIMITS}).status_code == 201
    nodes = NodeFleet(admin, POOL)
    yield nodes
    nodes.close()


def report(client, node_id: str, **extra) -> None:
    body = {"generation": 0, "loaded": [], "failures": [], "limits": LIMITS, **extra}
    response = client.put(f"/v1/pools/{POOL}/nodes/{node_id}/status", json=body)
    assert response.status_code == 200, response.text


def rollout(admin) -> dict[str, dict]:
    return {n["node_id"]: n for n in admin.get(f"/v1/pools/{POOL}/rollout").json()["nodes"]}


def stored(engine) -> dict[str, tuple[str, str]]:
    with Session(engine) as session:
        pool_id = session.scalar(select(Pool.id).where(Pool.name == POOL))
        return {row.node_id: (row.vllm_url, row.seal) for row in
                session.scalars(select(NodeAddress).where(NodeAddress.pool_id == pool_id))}


def count(engine, table) -> int:
    with Session(engine) as session:
        return session.scalar(select(func.count()).select_from(table))


def test_a_report_naming_another_address_does_not_move_the_node(fleet, admin, engine):
    node = fleet.client("node-a")
    report(node, "node-a", vllm_url=ATTACKER)

    seen = rollout(admin)["node-a"]
    assert seen["vllm_url"] == bound_address("node-a") and seen["address"] == "bound"
    assert stored(engine)["node-a"][0] == bound_address("node-a")


def test_a_database_writer_who_changes_an_address_breaks_its_seal(fleet, admin, engine, client_for):
    report(fleet.client("node-b"), "node-b")
    assert rollout(admin)["node-b"]["address"] == "bound"
    router = client_for("global_admin")
    with unit_of_work(engine) as session:
        session.execute(update(NodeAddress).where(NodeAddress.node_id == "node-b")
                        .values(vllm_url=ATTACKER))

    seen = rollout(admin)["node-b"]
    assert seen["address"] == "seal_broken" and seen["vllm_url"] is None
    assert router.get(f"/v1/pools/{POOL}/rollout").status_code == 200


def test_a_database_writer_cannot_move_a_sealed_address_to_another_node(fleet, admin, engine):
    """Copying node-c's binding, seal included, onto node-d points node-d nowhere."""
    report(fleet.client("node-c"), "node-c")
    report(fleet.client("node-d"), "node-d")
    url, seal = stored(engine)["node-c"]
    with unit_of_work(engine) as session:
        session.execute(update(NodeAddress).where(NodeAddress.node_id == "node-d")
                        .values(vllm_url=url, seal=seal))

    seen = rollout(admin)
    assert seen["node-c"]["address"] == "bound"
    assert seen["node-d"]["address"] == "seal_broken" and seen["node-d"]["vllm_url"] is None


def test_a_global_admin_moves_a_node_with_an_audited_binding(fleet, admin, engine):
    report(fleet.client("node-e"), "node-e")
    moved = admin.put(f"/v1/pools/{POOL}/nodes/node-e/address", json={"vllm_url": "https://node-e.internal:8443/"})
    assert moved.status_code == 200, moved.text
    assert moved.json()["vllm_url"] == "https://node-e.internal:8443"

    assert rollout(admin)["node-e"]["vllm_url"] == "https://node-e.internal:8443"
    with Session(engine) as session:
        event = session.scalars(select(AuditEvent).where(
            AuditEvent.action == "node.bind_address", AuditEvent.subject == f"pool/{POOL}/node/node-e")
            .order_by(AuditEvent.id.desc())).first()
    assert event.before == {"vllm_url": bound_address("node-e")}
    assert event.after == {"vllm_url": "https://node-e.internal:8443"}


@pytest.mark.parametrize("who", ["serving_node", "serving_router", "acme_admin", "acme_uploader"])
def test_only_a_global_admin_binds_an_address(fleet, admin, engine, client_for, who):
    report(fleet.client("node-f"), "node-f")
    before, events = stored(engine), count(engine, AuditEvent)

    response = client_for(who).put(f"/v1/pools/{POOL}/nodes/node-f/address", json={"vllm_url": ATTACKER})

    assert response.status_code == 403, response.text
    assert stored(engine) == before and count(engine, AuditEvent) == events


@pytest.mark.parametrize(("body", "message"), [
    ({"vllm_url": "file:///etc/passwd"}, "URL scheme should be 'http' or 'https'"),
    ({"vllm_url": "http://user:secret@10.0.0.1:8000"}, "without credentials, query or fragment"),
    ({"vllm_url": "http://10.0.0.1:8000/?next=x"}, "without credentials, query or fragment"),
    ({"vllm_url": "http://" + "a" * 600 + ".example"}, "at most 500"),
    ({"vllm_url": "http://10.0.0.1:8000", "extra": 1}, "extra"),
])
def test_bad_addresses_are_refused_and_nothing_changes(fleet, admin, engine, body, message):
    report(fleet.client("node-g"), "node-g")
    before, events = stored(engine), count(engine, AuditEvent)

    response = admin.put(f"/v1/pools/{POOL}/nodes/node-g/address", json=body)

    assert response.status_code == 422, response.text
    assert message in response.text
    assert stored(engine) == before and count(engine, AuditEvent) == events


def test_a_first_node_token_needs_an_address(fleet, admin, engine):
    before = count(engine, ApiToken)
    response = admin.post("/v1/tokens", json={"subject": "nowhere", "role": "node", "pool": POOL,
                                              "instance_id": "node-nowhere"})

    assert_refused(response, 422, "node_address_required",
                   "node 'node-nowhere' of pool 'addressed' has no vLLM address bound")
    assert "--vllm-url" in response.json()["error"]["hint"]
    assert count(engine, ApiToken) == before and "node-nowhere" not in stored(engine)


def test_a_second_token_keeps_the_bound_address(fleet, admin, engine):
    report(fleet.client("node-h"), "node-h")
    second = issue_token(admin, "node-h again", role="node", pool=POOL, instance_id="node-h")

    assert second.startswith("lpt_") and stored(engine)["node-h"][0] == bound_address("node-h")


@pytest.mark.parametrize("scope", [{"role": "router", "pool": POOL, "instance_id": "router-9"},
                                   {"role": "uploader", "tenant": "acme"}])
def test_an_address_on_another_kind_of_token_is_refused(fleet, admin, engine, scope):
    tokens, events = count(engine, ApiToken), count(engine, AuditEvent)
    response = admin.post("/v1/tokens", json={"subject": "misplaced", "vllm_url": "http://10.0.0.1:8000", **scope})

    assert_refused(response, 422, "invalid_token_scope", "only node tokens are bound to a vLLM address")
    assert count(engine, ApiToken) == tokens and count(engine, AuditEvent) == events


def test_an_earlier_sealed_binding_put_back_by_a_database_writer_is_not_believed(fleet, admin, engine):
    """node-r moved from one address to another; the writer restores the old row, seal and all
    (an address since given to someone else): only the newest sealed binding counts."""
    report(fleet.client("node-r"), "node-r")
    old_url, old_seal = stored(engine)["node-r"]
    moved = admin.put(f"/v1/pools/{POOL}/nodes/node-r/address", json={"vllm_url": "https://node-r.internal:8443"})
    assert moved.status_code == 200 and rollout(admin)["node-r"]["address"] == "bound"
    with unit_of_work(engine) as session:
        session.execute(update(NodeAddress).where(NodeAddress.node_id == "node-r")
                        .values(vllm_url=old_url, seal=old_seal))

    seen = rollout(admin)["node-r"]

    assert seen["address"] == "seal_broken" and seen["vllm_url"] is None
