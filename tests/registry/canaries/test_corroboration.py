"""One router token cannot decide a canary: each router's windows are judged on their own, and
the analysis steps, promotes or rolls back only when enough routers (the pool's
canary_min_routers, two by default) each reached the verdict, or a reviewer confirmed it. Forged
windows from a single router, however many requests they claim, leave the canary at its weight."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from devkit.pipeline_steps import request_promotion
from registry.tables import AuditEvent, Pool, Promotion
from tests.registry.canaries.test_canary_flow import WINDOW_S, events, judge, window
from tests.support.asserts import assert_refused
from tests.support.nodes import NodeFleet
from devkit.units_of_work import unit_of_work

POOL = "canary-sources"
ADAPTER = "acme/corroborated"


@pytest.fixture(scope="module")
def routers(admin, promo_pools, make_ready, client_for, second_reviewer):
    created = admin.post("/v1/pools", json={"name": POOL, "base_model": "promo-base", "max_loras": 2,
                                            "max_cpu_loras": 64, "max_lora_rank": 16})
    assert created.status_code == 201 and created.json()["canary_min_routers"] == 2, created.text
    version = make_ready("corroborated")
    first = request_promotion(client_for("acme_uploader"), POOL, version)
    assert second_reviewer.post(f"/v1/promotions/{first.json()['id']}/approve",
                                json={"comment": "production"}).status_code == 200
    fleet = NodeFleet(admin, POOL, role="router")
    yield fleet
    fleet.close()


def report(routers: NodeFleet, router_id: str, *windows: dict) -> None:
    response = routers.client(router_id).put(f"/v1/pools/{POOL}/routers/{router_id}/traffic", json={
        "requests_per_s": {}, "report_id": str(uuid.uuid4()), "windows": list(windows)})
    assert response.status_code == 204, response.text


def canary(make_ready, client_for, second_reviewer) -> tuple[str, str, int]:
    version = make_ready("corroborated")
    body = {"adapter": ADAPTER, "version": version["number"], "alias": "canary",
            "analysis": {"window_s": WINDOW_S, "min_requests": 20, "steps": [{"weight": 10}, {"weight": 50}]}}
    created = client_for("acme_uploader").post(f"/v1/pools/{POOL}/promotions", json=body)
    assert created.status_code == 201, created.text
    assert second_reviewer.post(f"/v1/promotions/{created.json()['id']}/approve",
                                json={"comment": "canary"}).status_code == 200
    production = next(a["served_name"] for a in client_for("global_admin").get(f"/v1/pools/{POOL}/aliases").json()
                      if a["adapter"] == "corroborated" and a["alias"] == "production")
    return version["served_name"], production, created.json()["id"]


def weight_of(admin, served: str) -> int | None:
    return next((a["weight"] for a in admin.get(f"/v1/pools/{POOL}/aliases").json()
                 if a["served_name"] == served and a["alias"] == "canary"), None)


def test_forged_windows_from_one_router_neither_step_nor_promote(routers, make_ready, client_for,
                                                               second_reviewer, admin, engine):
    served, production, promotion_id = canary(make_ready, client_for, second_reviewer)
    report(routers, "router-1", window(served, "canary", 5000), window(production, "production", 50000))

    assert judge(engine, promotion_id, after_s=WINDOW_S + 1) == "awaiting_corroboration"
    assert judge(engine, promotion_id, after_s=10 * WINDOW_S) == "awaiting_corroboration"

    assert weight_of(admin, served) == 10
    status = client_for("acme_reviewer").get(f"/v1/promotions/{promotion_id}/canary").json()
    assert status["verdict"] == "pass" and status["sources"] == {"router-1": "pass"}
    assert status["sources_needed"] == 2 and status["state"] == "awaiting_corroboration"
    assert len(events(engine, "canary.awaiting_corroboration", promotion_id)) == 1  # once, not per check
    assert events(engine, "canary.step", promotion_id) == []

    # A second router reaching the same verdict on its own traffic: the analysis acts.
    report(routers, "router-2", window(served, "canary", 25), window(production, "production", 200))
    judge(engine, promotion_id, after_s=WINDOW_S + 1)  # (or the other lane's housekeeper, first)
    assert weight_of(admin, served) == 50
    (stepped,) = events(engine, "canary.step", promotion_id)
    assert stepped.after["evidence"]["decided_by"] == ["router router-1", "router router-2"]


def test_forged_errors_from_one_router_do_not_roll_a_canary_back(routers, make_ready, client_for,
                                                                 second_reviewer, admin, engine):
    served, production, promotion_id = canary(make_ready, client_for, second_reviewer)
    report(routers, "router-1", window(served, "canary", 100, errors=90), window(production, "production", 100))

    assert judge(engine, promotion_id, after_s=1) == "awaiting_corroboration"

    assert weight_of(admin, served) == 10 and events(engine, "canary.rolled_back", promotion_id) == []
    status = client_for("acme_reviewer").get(f"/v1/promotions/{promotion_id}/canary").json()
    assert status["verdict"] == "fail" and status["sources"] == {"router-1": "fail"}

    # The requester may not be the second source; another reviewer may, and the verdict stands.
    refused = client_for("acme_uploader").post(f"/v1/promotions/{promotion_id}/canary/resume")
    assert_refused(refused, 403, "forbidden", "role 'uploader' may not do this")
    assert second_reviewer.post(f"/v1/promotions/{promotion_id}/canary/resume").json()["state"] == "analysing"
    judge(engine, promotion_id, after_s=1)  # (or the other lane's housekeeper, first)
    (rolled_back,) = events(engine, "canary.rolled_back", promotion_id)
    assert rolled_back.after["evidence"]["decided_by"][0] == "router router-1"
    assert rolled_back.after["evidence"]["decided_by"][1].startswith("reviewer acme_reviewer_2")


@pytest.mark.parametrize(("who", "body", "status", "code", "message"), [
    ("acme_admin", {"canary_min_routers": 1}, 403, "forbidden", "role 'admin' may not do this"),
    ("serving_router", {"canary_min_routers": 1}, 403, "forbidden", "role 'router' may not do this"),
    ("global_admin", {"canary_min_routers": 0}, 422, "invalid_request", "canary_min_routers"),
    ("global_admin", {"canary_min_routers": 17}, 422, "invalid_request", "canary_min_routers"),
])
def test_only_a_global_admin_sets_how_many_routers_decide(routers, client_for, engine, who, body, status,
                                                         code, message):
    with Session(engine) as session:
        before = session.scalar(select(Pool.canary_min_routers).where(Pool.name == POOL))
        audited = session.scalar(select(func.count()).select_from(AuditEvent))
    assert_refused(client_for(who).patch(f"/v1/pools/{POOL}", json=body), status, code, message)
    with Session(engine) as session:
        assert session.scalar(select(Pool.canary_min_routers).where(Pool.name == POOL)) == before == 2
        assert session.scalar(select(func.count()).select_from(AuditEvent)) == audited


def test_one_router_cannot_tip_two_others_that_disagree(routers, make_ready, client_for, second_reviewer,
                                                       admin, engine):
    """router-2 passes the canary and router-3 fails it, on their own traffic: no verdict. A
    leaked router-1 reporting a flood of clean windows makes the sum pass, but a pass needs its
    routers and no router failing it; one vote is one router, whatever its volume."""
    served, production, promotion_id = canary(make_ready, client_for, second_reviewer)
    report(routers, "router-2", window(served, "canary", 25), window(production, "production", 200))
    report(routers, "router-3", window(served, "canary", 25, errors=25), window(production, "production", 25))
    report(routers, "router-1", window(served, "canary", 50000), window(production, "production", 50000))

    judge(engine, promotion_id, after_s=WINDOW_S + 1)

    status = client_for("acme_reviewer").get(f"/v1/promotions/{promotion_id}/canary").json()
    assert status["verdict"] == "pass" and status["state"] == "awaiting_corroboration"
    assert status["sources"] == {"router-1": "pass", "router-2": "pass", "router-3": "fail"}
    assert weight_of(admin, served) == 10 and events(engine, "canary.step", promotion_id) == []


def test_a_database_writer_cannot_lower_how_many_routers_decide(routers, make_ready, client_for,
                                                                second_reviewer, admin, engine):
    served, production, promotion_id = canary(make_ready, client_for, second_reviewer)
    with unit_of_work(engine) as session:
        session.execute(update(Pool).where(Pool.name == POOL).values(canary_min_routers=1))
    try:
        report(routers, "router-1", window(served, "canary", 5000), window(production, "production", 50000))
        outcome = judge(engine, promotion_id, after_s=WINDOW_S + 1)
    finally:
        with unit_of_work(engine) as session:
            session.execute(update(Pool).where(Pool.name == POOL).values(canary_min_routers=2))

    assert outcome == "awaiting_corroboration" and weight_of(admin, served) == 10
    status = client_for("acme_reviewer").get(f"/v1/promotions/{promotion_id}/canary").json()
    assert status["sources_needed"] == 2  # as the pool's signed active set says


def test_a_canary_whose_policy_was_rewritten_is_not_judged_and_takes_no_pause(routers, make_ready, client_for,
                                                                              second_reviewer, admin, engine):
    served, production, promotion_id = canary(make_ready, client_for, second_reviewer)
    with unit_of_work(engine) as session:
        row = session.get(Promotion, promotion_id)
        row.analysis = {**row.analysis, "min_requests": 1, "steps": [{"weight": 10}]}  # straight to production
        state_before = dict(row.analysis_state)
    report(routers, "router-1", window(served, "canary", 25), window(production, "production", 200))
    report(routers, "router-2", window(served, "canary", 25), window(production, "production", 200))

    assert judge(engine, promotion_id, after_s=WINDOW_S + 1) == "unsealed"
    paused = second_reviewer.post(f"/v1/promotions/{promotion_id}/canary/pause")

    assert_refused(paused, 409, "canary_unsealed", "was changed outside the registry")
    status = client_for("acme_reviewer").get(f"/v1/promotions/{promotion_id}/canary").json()
    assert status["analysis_sealed"] is False and weight_of(admin, served) == 10
    with Session(engine) as session:
        assert session.get(Promotion, promotion_id).analysis_state == state_before
    assert events(engine, "canary.promoted", promotion_id) == [] and events(engine, "canary.paused", promotion_id) == []
    rolled_back = second_reviewer.post(f"/v1/pools/{POOL}/aliases/{ADAPTER}/canary/rollback",
                                       json={"comment": "its policy was rewritten"})
    assert rolled_back.status_code == 200, rolled_back.text
    assert weight_of(admin, served) is None
