"""A new engine, once a quorum of the pool's nodes reports it (or an operator declares it), marks
every active version of its pool once, asks for their evaluations as a new upload's are asked
for, and the marks clear as those evaluations pass."""

from __future__ import annotations

import json

import pytest
import redis as redis_client
from sqlalchemy.orm import Session

from registry.requalification.service import suspended_version_ids
from registry.task_queue import evaluation_queue
from tests.registry.requalification.support import (
    RQ_BASE, RQ_SUITE, audit_count, dashboard, declare, deliveries, evaluation_rows, make_pool, marks, pool_row,
    report, version_id,
)
from devkit.pipeline_steps import finish_evaluation

POOL = "rq-keep"
OLD, NEW = "0.32.0", "0.33.1"


@pytest.fixture(scope="module")
def broker(redis):
    """The Redis the registry sends evaluation tasks to (no worker consumes this base's queue)."""
    client = redis_client.Redis.from_url(redis.url)
    yield client
    client.close()


@pytest.fixture(scope="module")
def marked(admin, requal_base, serve, fleets, engine, broker):
    """Three versions serving (two of acme, one of globex); node-a first reports the engine the
    pool is qualified on, then a newer vLLM."""
    hook = admin.post("/v1/webhooks", json={"url": "http://127.0.0.1:9/requalification", "events": ["*"]})
    assert hook.status_code == 201, hook.text
    make_pool(admin, POOL, RQ_BASE, RQ_SUITE)
    versions = [serve(POOL, "acme/rq-chat"), serve(POOL, "acme/rq-sum"),
                serve(POOL, "globex/rq-code", uploader="globex_uploader")]
    ids = {v["served_name"]: version_id(engine, v) for v in versions}
    node = fleets(POOL)
    declare(admin, POOL, OLD)  # the first engine: one node's word alone would leave it pending
    report(node.client("node-a"), POOL, "node-a", OLD)
    first = admin.get(f"/v1/pools/{POOL}/requalifications").json()
    evaluations_before = evaluation_rows(engine, set(ids.values()))
    report(node.client("node-a"), POOL, "node-a", NEW)  # one node's word: pending
    pending = admin.get(f"/v1/pools/{POOL}/requalifications").json()
    report(node.client("node-b"), POOL, "node-b", NEW)  # a quorum of the two live nodes
    yield {"versions": versions, "pending": pending, "ids": ids, "node": node, "first": first,
           "evaluations_before": evaluations_before, "broker": broker}
    # Every later event of the run would be queued for this receiver too.
    admin.delete(f"/v1/webhooks/{hook.json()['id']}")


def test_the_first_engine_becomes_the_qualified_one_and_marks_nothing(marked, engine):
    first = marked["first"]
    assert first["qualified_engine"]["vllm_version"] == OLD and first["marks"] == []
    assert first["qualified_engine"]["flags"] == {"enable_lora": True}  # a global admin sees flags
    assert audit_count(engine, "pool.qualified_engine", f"pool/{POOL}") >= 1


def test_one_nodes_report_of_a_new_engine_is_pending_until_a_quorum_reports_it(marked):
    [pending] = marked["pending"]["pending_engines"]
    assert pending["vllm_version"] == NEW and pending["nodes"] == ["node-a"] and pending["nodes_needed"] == 2
    assert marked["pending"]["marks"] == []


def test_a_new_vllm_version_marks_every_active_version_once_and_requests_its_evaluations(
        marked, engine, admin, fleets):
    ids = marked["ids"]
    open_marks = marks(engine, POOL, open_only=True)
    assert sorted(m.version_id for m in open_marks) == sorted(ids.values())
    assert {m.cause for m in open_marks} == {"engine"}
    assert {m.before["vllm_version"] for m in open_marks} == {OLD}
    assert {m.after["vllm_version"] for m in open_marks} == {NEW}

    # One new evaluation of the required suite per version, requested by the change, and sent to
    # the base's evaluation queue once the marks committed.
    before = {e.id for e in marked["evaluations_before"]}
    new = [e for e in evaluation_rows(engine, set(ids.values())) if e.id not in before]
    assert sorted(e.version_id for e in new) == sorted(ids.values())
    assert all(e.state == "queued" and e.requested_by == (
        "system (re-qualification: a new engine reported by 2 of the pool's live nodes (node-a, "
        "node-b); node node-b reported its engine)") for e in new)
    assert sorted(e.id for e in new) == sorted(i for m in open_marks for i in m.evaluation_ids)
    queued = [json.loads(m) for m in marked["broker"].lrange(evaluation_queue(RQ_BASE), 0, -1)]
    sent = {int(q["headers"]["argsrepr"].strip("[]")) for q in queued
            if q["headers"].get("task") == "loraplane.evaluate"}
    assert {e.id for e in new} <= sent
    version = admin.get("/v1/adapters/acme/rq-chat/versions/1").json()
    assert version["state"] == "evaluating"

    assert audit_count(engine, "requalification.mark", f"pool/{POOL}/") == 3
    events = deliveries(engine, "requalification.required", POOL)
    assert sorted(tuple(d.payload["data"]["versions"]) for d in events) == [
        ("acme/rq-chat@1", "acme/rq-sum@1"), ("globex/rq-code@1",)]  # one event per tenant
    assert events[0].payload["data"]["change"]["to"]["vllm_version"] == NEW
    assert events[0].payload["data"]["policy"] == "keep_serving"

    # The same engine again, from this node and another: nothing more.
    node = marked["node"]
    report(node.client("node-a"), POOL, "node-a", NEW)
    report(node.client("node-b"), POOL, "node-b", NEW)
    assert [m.id for m in marks(engine, POOL)] == [m.id for m in open_marks]
    assert len(evaluation_rows(engine, set(ids.values()))) == len(before) + len(new)
    assert audit_count(engine, "requalification.mark", f"pool/{POOL}/") == 3
    assert len(deliveries(engine, "requalification.required", POOL)) == 2


def test_keep_serving_suspends_nothing(marked, engine):
    with Session(engine) as session:
        assert suspended_version_ids(session, pool_row(engine, POOL).id) == set()


def test_the_listing_shows_each_tenant_its_own_marks_and_the_reason(marked, client_for, admin):
    everyone = admin.get(f"/v1/pools/{POOL}/requalifications").json()
    assert everyone["policy"] == "keep_serving"
    assert [m["served_name"] for m in everyone["marks"]] == ["acme/rq-chat@1", "acme/rq-sum@1",
                                                             "globex/rq-code@1"]
    first = everyone["marks"][0]
    assert first["reason"].startswith(f"the engine changed: vLLM {OLD}, bfloat16 (")
    assert f"→ vLLM {NEW}, bfloat16" in first["reason"]
    assert first["suites"] == [{"suite": RQ_SUITE, "evaluation_id": first["suites"][0]["evaluation_id"],
                                "state": "queued", "counts": False}]
    assert first["change"]["to"]["flags"] == {"enable_lora": True} and not first["suspended"]

    acme = client_for("acme_reviewer").get(f"/v1/pools/{POOL}/requalifications")
    assert acme.status_code == 200
    assert [m["served_name"] for m in acme.json()["marks"]] == ["acme/rq-chat@1", "acme/rq-sum@1"]
    assert "flags" not in acme.json()["marks"][0]["change"]["to"]  # the operators' business
    assert acme.json()["qualified_engine"]["flags"] is None
    globex = client_for("globex_admin").get(f"/v1/pools/{POOL}/requalifications").json()
    assert [m["served_name"] for m in globex["marks"]] == ["globex/rq-code@1"]

    node = marked["node"].client("node-a").get(f"/v1/pools/{POOL}/requalifications")
    assert node.status_code == 403  # a node learns nothing of other tenants' versions
    assert client_for("acme_app").get(f"/v1/pools/{POOL}/requalifications").status_code == 403
    missing = admin.get("/v1/pools/no-such-pool/requalifications")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "pool_not_found"
    assert admin.get("/readyz").status_code == 200


def test_the_pool_and_version_pages_show_the_marks_with_reason_and_policy(marked, registry, tokens):
    browser = dashboard(registry.url, tokens["acme_reviewer"])
    try:
        pool_page = browser.get(f"/ui/pools/{POOL}")
        assert pool_page.status_code == 200
        section = pool_page.text.split('id="requalification-h"')[1].split("</section>")[0]
        assert "Re-qualification: 2 versions to evaluate again" in section
        assert "Policy <strong>keep_serving</strong>: a marked version keeps serving" in section
        assert f"Qualified engine: vLLM {OLD}, bfloat16" in section
        assert section.count(f"the engine changed: vLLM {OLD}, bfloat16") == 2
        assert "acme/rq-chat@1" in section and "acme/rq-sum@1" in section
        assert "globex" not in pool_page.text  # another tenant's version stays hidden
        assert f"{RQ_SUITE}: <span class=\"fail\">queued</span>" in section
        assert "keeps serving</td>" in section
        live = browser.get(f"/ui/pools/{POOL}/live")  # the part that refreshes itself
        assert live.status_code == 200 and "Re-qualification: 2 versions" in live.text

        version_page = browser.get("/ui/adapters/acme/rq-chat/versions/1")
        assert version_page.status_code == 200
        marked_section = version_page.text.split('id="version-requalification-h"')[1].split("</section>")[0]
        assert f'In pool <a href="/ui/pools/{POOL}">{POOL}</a>' in marked_section
        assert f"vLLM {NEW}, bfloat16" in marked_section
        assert "Policy keep_serving" in marked_section and "keeps serving until it passes again" in marked_section
    finally:
        browser.close()


def test_marks_clear_as_evaluations_pass_and_the_qualified_engine_moves(marked, engine, admin):
    ids, node = marked["ids"], marked["node"]
    open_marks = {m.version_id: m for m in marks(engine, POOL, open_only=True)}
    # The evaluations that passed before the change do not count: nothing clears on a report.
    report(node.client("node-a"), POOL, "node-a", NEW)
    assert len(marks(engine, POOL, open_only=True)) == 3

    for served_name in ("acme/rq-chat@1", "acme/rq-sum@1"):
        finish_evaluation(engine, open_marks[ids[served_name]].evaluation_ids[0])
    report(node.client("node-a"), POOL, "node-a", NEW)
    still = marks(engine, POOL, open_only=True)
    assert [m.version_id for m in still] == [ids["globex/rq-code@1"]]
    cleared = [m for m in marks(engine, POOL) if m.cleared_at is not None]
    assert {m.outcome for m in cleared} == {"requalified"}
    assert sorted(m.cleared_with[0] for m in cleared) == sorted(
        open_marks[ids[n]].evaluation_ids[0] for n in ("acme/rq-chat@1", "acme/rq-sum@1"))
    assert admin.get(f"/v1/pools/{POOL}/requalifications").json()["qualified_engine"]["vllm_version"] == OLD

    # A node still on the old engine (a rolling upgrade) changes nothing meanwhile.
    report(node.client("node-b"), POOL, "node-b", OLD)
    finish_evaluation(engine, open_marks[ids["globex/rq-code@1"]].evaluation_ids[0])
    report(node.client("node-a"), POOL, "node-a", NEW)
    listing = admin.get(f"/v1/pools/{POOL}/requalifications").json()
    assert listing["marks"] == []
    assert listing["qualified_engine"]["vllm_version"] == NEW
    # node-b still runs the old engine, which these versions were qualified on: it stays qualified,
    # so the fleet does not send the pool back and forth between its two engines.
    assert [e["vllm_version"] for e in listing["also_qualified"]] == [OLD]
    report(node.client("node-b"), POOL, "node-b", OLD)
    assert marks(engine, POOL, open_only=True) == []
    assert audit_count(engine, "requalification.clear", f"pool/{POOL}/") == 3
    assert [d.payload["data"]["versions"] for d in deliveries(engine, "requalification.cleared", POOL)] \
        == [["acme/rq-chat@1"], ["acme/rq-sum@1"], ["globex/rq-code@1"]]  # each as its result is recorded
