"""A canary under analysis, driven by traffic reports sent as a router sends them and judged by
the housekeeper's own function at chosen moments: it steps up, stops at a manual gate, becomes
production with the policy's approval, or is rolled back at once on failing evidence; and the
dashboard, in Chromium, shows it and lets a reviewer pause and resume it."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from playwright.sync_api import expect
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from devkit.pipeline_steps import request_promotion
from registry.canaries import service as canaries
from registry.settings import get_settings
from registry.tables import AuditEvent, Promotion, TrafficWindow, WebhookDelivery
from registry.traffic_windows.schemas import WINDOW_BUCKETS
from tests.support.asserts import assert_refused
from tests.support.browser import unlabelled_controls
from tests.support.nodes import issue_token
from devkit.units_of_work import unit_of_work

ADAPTER, WINDOW_S = "acme/canaried", 60
SLOTS = len(WINDOW_BUCKETS) + 1


def window(served: str, alias: str, requests: int, *, errors: int = 0, bucket: int = 4,
           tokens: int = 16) -> dict:
    answered = requests - errors
    counts = [0] * SLOTS
    counts[bucket] = answered
    return {"served_name": served, "alias": alias, "requests": requests,
            "errors": {"server_error": errors} if errors else {}, "completion_tokens": tokens * answered,
            "busy_s": 0.08 * answered, "ttft_buckets": counts, "latency_buckets": counts}


@pytest.fixture(scope="module")
def router_client(admin, client_with, promo_pools):
    # This module's pool trusts one router to decide (an operator's explicit choice): its flows
    # are driven by router-c alone. test_corroboration.py keeps the default of two.
    assert admin.patch(f"/v1/pools/{promo_pools['open']}", json={"canary_min_routers": 1}).status_code == 200
    token = issue_token(admin, "router-c", role="router", pool=promo_pools["open"], instance_id="router-c")
    return client_with(token)


def report(router_client, pool: str, *windows: dict, report_id: str | None = None):
    body = {"requests_per_s": {}, "report_id": report_id or str(uuid.uuid4()), "windows": list(windows)}
    return router_client.put(f"/v1/pools/{pool}/routers/router-c/traffic", json=body)


@pytest.fixture(scope="module")
def first(make_ready, client_for, promo_pools, second_reviewer) -> dict:
    version = make_ready("canaried")
    created = request_promotion(client_for("acme_uploader"), promo_pools["open"], version)
    assert second_reviewer.post(f"/v1/promotions/{created.json()['id']}/approve",
                                json={"comment": "production"}).status_code == 200
    return version


def aliases_of(admin, pool: str) -> list[dict]:
    """The pool's aliases, read from the database. Not the active set: these tests change it
    outside the registry (the housekeeper's check, called here), and a registry process serves
    the new set once the database's notification of it arrives, which may be a moment later."""
    response = admin.get(f"/v1/pools/{pool}/aliases")
    assert response.status_code == 200, response.text
    return [a for a in response.json() if a["adapter"] == "canaried"]


def production_of(admin, pool: str) -> str:
    return next(a["served_name"] for a in aliases_of(admin, pool) if a["alias"] == "production")


def start_canary(make_ready, client_for, second_reviewer, pool: str, requester: str = "acme_uploader",
                 **policy) -> tuple[dict, int]:
    version = make_ready("canaried")
    body = {"adapter": ADAPTER, "version": version["number"], "alias": "canary",
            "analysis": {"window_s": WINDOW_S, "min_requests": 20, **policy}}
    created = client_for(requester).post(f"/v1/pools/{pool}/promotions", json=body)
    assert created.status_code == 201, created.text
    assert created.json()["weight"] == policy["steps"][0]["weight"]
    approved = second_reviewer.post(f"/v1/promotions/{created.json()['id']}/approve",
                                    json={"comment": "canary with analysis"})
    assert approved.status_code == 200 and approved.json()["canary_state"] == "analysing", approved.text
    return version, created.json()["id"]


def judge(engine, promotion_id: int, after_s: float) -> str | None:
    """The housekeeper's check, as if `after_s` had passed since the step began. Another check
    that saved the canary meanwhile (the housekeeper of the suite's other lane, on this database)
    makes it stand down; it judges again, as the housekeeper's next check would."""
    for _ in range(20):
        with unit_of_work(engine) as session:
            state = session.get(Promotion, promotion_id).analysis_state
            began = datetime.fromisoformat(state["step_started_at"])
            outcome = canaries.check(session, promotion_id, now=began.astimezone(UTC) + timedelta(seconds=after_s))
        if outcome != "changed meanwhile":
            return outcome
    pytest.fail(f"canary {promotion_id} changed under every one of 20 checks")


def canary_weight(admin, pool: str, served: str) -> int | None:
    return next((a["weight"] for a in aliases_of(admin, pool)
                 if a["served_name"] == served and a["alias"] == "canary"), None)


def events(engine, action: str, promotion_id: int) -> list[AuditEvent]:
    with Session(engine) as session:
        rows = session.scalars(select(AuditEvent).where(AuditEvent.action == action).order_by(AuditEvent.id))
        return [e for e in rows if (e.after or {}).get("id") == promotion_id]


def test_a_good_canary_steps_up_waits_at_its_gate_then_becomes_production(
        first, make_ready, client_for, second_reviewer, promo_pools, router_client, admin, engine):
    pool = promo_pools["open"]
    version, promotion_id = start_canary(make_ready, client_for, second_reviewer, pool,
                                         steps=[{"weight": 10}, {"weight": 50, "manual_gate": True}])
    served, production = version["served_name"], production_of(admin, pool)
    assert canary_weight(admin, pool, served) == 10

    assert report(router_client, pool, window(served, "canary", 25), window(production, "production", 200)).status_code == 204
    judge(engine, promotion_id, after_s=WINDOW_S / 2)
    assert canary_weight(admin, pool, served) == 10  # the window is not over
    judge(engine, promotion_id, after_s=WINDOW_S + 1)
    assert canary_weight(admin, pool, served) == 50
    (stepped,) = events(engine, "canary.step", promotion_id)
    assert stepped.actor == "canary-analysis" and stepped.after["evidence"]["status"]["verdict"] == "pass"

    report(router_client, pool, window(served, "canary", 30), window(production, "production", 30))
    judge(engine, promotion_id, after_s=WINDOW_S + 1)
    status = client_for("acme_reviewer").get(f"/v1/promotions/{promotion_id}/canary").json()
    assert status["state"] == "awaiting_gate" and status["canary"]["requests"] == 30
    judge(engine, promotion_id, after_s=10 * WINDOW_S)
    assert canary_weight(admin, pool, served) == 50  # a gate waits for a person

    refused = client_for("acme_uploader").post(f"/v1/promotions/{promotion_id}/canary/resume")
    assert_refused(refused, 403, "forbidden", "role 'uploader' may not do this")
    assert second_reviewer.post(f"/v1/promotions/{promotion_id}/canary/resume").json()["state"] == "analysing"
    judge(engine, promotion_id, after_s=WINDOW_S + 1)

    assert production_of(admin, pool) == served and canary_weight(admin, pool, served) is None
    (promoted,) = [e for e in events_all(engine, "canary.promoted") if e.after["served_name"] == served]
    assert promoted.actor == "canary-analysis"
    assert {c["metric"] for c in promoted.after["evidence"]["status"]["checks"]} >= {"error_rate", "latency_p95_ratio"}
    listed = admin.get("/v1/promotions", params={"pool": pool, "state": "active", "limit": 200}).json()["items"]
    now_production = next(p for p in listed if p["served_name"] == served and p["alias"] == "production")
    assert now_production["decided_by"].startswith("canary-analysis (policy approved by acme_reviewer_2")


def events_all(engine, action: str) -> list[AuditEvent]:
    with Session(engine) as session:
        return list(session.scalars(select(AuditEvent).where(AuditEvent.action == action).order_by(AuditEvent.id)))


def test_a_failing_canary_is_rolled_back_within_its_window_and_says_why(
        first, make_ready, client_for, second_reviewer, promo_pools, router_client, admin, engine):
    pool = promo_pools["open"]
    hook = client_for("acme_admin").post("/v1/webhooks", json={
        "url": "https://8.8.8.8/canary-hook", "tenant": "acme", "events": ["canary.rolled_back"]})
    assert hook.status_code == 201, hook.text
    version, promotion_id = start_canary(make_ready, client_for, second_reviewer, pool,
                                         steps=[{"weight": 20}, {"weight": 50}])
    served, production = version["served_name"], production_of(admin, pool)
    report(router_client, pool, window(served, "canary", 10, errors=10), window(production, "production", 40))
    judge(engine, promotion_id, after_s=2)
    assert canary_weight(admin, pool, served) == 20  # ten requests decide nothing

    report(router_client, pool, window(served, "canary", 15, errors=5), window(production, "production", 60))
    judge(engine, promotion_id, after_s=3)

    assert canary_weight(admin, pool, served) is None and production_of(admin, pool) == production
    with Session(engine) as session:
        assert session.get(Promotion, promotion_id).state == "rolled_back"
    rolled = [e for e in events_all(engine, "canary.rolled_back") if e.after["id"] == promotion_id]
    assert len(rolled) == 1 and rolled[0].actor == "canary-analysis"
    failed = [c for c in rolled[0].after["evidence"]["status"]["checks"] if c["passed"] is False]
    assert [c["metric"] for c in failed] == ["error_rate"] and failed[0]["canary"] == pytest.approx(0.6)
    with Session(engine) as session:
        sent = session.scalars(select(WebhookDelivery).where(
            WebhookDelivery.webhook_id == hook.json()["id"])).all()
    assert [(d.event, d.payload["data"]["id"]) for d in sent] == [("canary.rolled_back", promotion_id)]
    assert "error_rate" in str(sent[0].payload["data"]["evidence"])
    shown = client_for("acme_reviewer").get(f"/v1/promotions/{promotion_id}").json()
    assert (shown["state"], shown["canary_state"]) == ("rolled_back", "rolled_back")


def test_a_report_sent_twice_counts_once_and_a_bad_one_is_refused_whole(
        first, router_client, promo_pools, engine, admin):
    pool, served = promo_pools["open"], production_of(admin, promo_pools["open"])
    report_id = str(uuid.uuid4())
    before = stored_windows(engine)
    assert report(router_client, pool, window(served, "production", 5), report_id=report_id).status_code == 204
    assert report(router_client, pool, window(served, "production", 5), report_id=report_id).status_code == 204
    assert stored_windows(engine) == before + 1

    bad = window(served, "production", 5)
    for broken, message in ((dict(bad, ttft_buckets=[1, 2]), "ttft_buckets"),
                            (dict(bad, errors={"oops": 1}), "unknown error class 'oops'"),
                            (dict(bad, errors={"server_error": 9}), "more errors than requests"),
                            (dict(bad, served_name="not a name"), "served_name"),
                            # requests without timings would leave the p95 checks unjudged
                            (dict(bad, ttft_buckets=[0] * SLOTS, latency_buckets=[0] * SLOTS),
                             "the histograms must count each of the 5 answered requests")):
        response = report(router_client, pool, window(served, "production", 1), broken)
        assert_refused(response, 422, "invalid_request", message)
    missing_id = router_client.put(f"/v1/pools/{pool}/routers/router-c/traffic",
                                   json={"requests_per_s": {}, "windows": [bad]})
    assert_refused(missing_id, 422, "invalid_request", "windows need a report_id")
    assert stored_windows(engine) == before + 1


def stored_windows(engine) -> int:
    with Session(engine) as session:
        return session.scalar(select(func.count()).select_from(TrafficWindow))


@pytest.mark.parametrize(("body", "message"), [
    ({"alias": "production", "analysis": {"steps": [{"weight": 5}]}}, "only the 'canary' alias carries an analysis policy"),
    ({"alias": "canary", "weight": 30, "analysis": {"steps": [{"weight": 5}]}}, "the weight (30) must be the first step's (5)"),
    ({"alias": "canary", "analysis": {"steps": [{"weight": 50}, {"weight": 10}]}}, "step weights must rise"),
])
def test_a_bad_analysis_request_is_refused_and_nothing_is_stored(body, message, first, client_for, promo_pools, engine):
    with Session(engine) as session:
        before = session.scalar(select(func.count()).select_from(Promotion))
    response = client_for("acme_uploader").post(f"/v1/pools/{promo_pools['open']}/promotions",
                                                json={"adapter": ADAPTER, "version": first["number"], **body})
    assert_refused(response, 422, "invalid_request", message)
    with Session(engine) as session:
        assert session.scalar(select(func.count()).select_from(Promotion)) == before


def test_a_paused_canary_is_not_judged_and_resumes_with_a_fresh_window(
        first, make_ready, client_for, second_reviewer, promo_pools, router_client, admin, engine):
    pool = promo_pools["open"]
    version, promotion_id = start_canary(make_ready, client_for, second_reviewer, pool, steps=[{"weight": 5}])
    assert_refused(client_for("globex_admin").post(f"/v1/promotions/{promotion_id}/canary/pause"),
                   404, "canary_not_found", f"promotion {promotion_id} has no canary analysis")
    paused = second_reviewer.post(f"/v1/promotions/{promotion_id}/canary/pause")
    assert paused.status_code == 200 and paused.json()["state"] == "paused"
    report(router_client, pool, window(version["served_name"], "canary", 50, errors=50))
    judge(engine, promotion_id, after_s=5)
    assert canary_weight(admin, pool, version["served_name"]) == 5  # not judged while paused
    again = second_reviewer.post(f"/v1/promotions/{promotion_id}/canary/pause")
    assert_refused(again, 409, "already_paused", "already paused")

    resumed = second_reviewer.post(f"/v1/promotions/{promotion_id}/canary/resume").json()
    assert resumed["state"] == "analysing"
    judge(engine, promotion_id, after_s=1)
    # The failures came before the resume: its fresh window has seen none of them.
    assert canary_weight(admin, pool, version["served_name"]) == 5
    second_reviewer.post(f"/v1/pools/{pool}/aliases/{ADAPTER}/canary/rollback", json={"comment": "done"})


@pytest.fixture
def grace_of_a_minute(monkeypatch):
    """This process's checks wait out a grace of a minute, as a deployment's might."""
    monkeypatch.setenv("LORAPLANE_CANARY_GRACE_S", "60")
    get_settings.cache_clear()
    yield
    monkeypatch.undo()
    get_settings.cache_clear()


def test_traffic_reported_within_the_grace_after_a_step_is_not_counted_for_it(
        first, make_ready, client_for, second_reviewer, promo_pools, router_client, admin, engine,
        grace_of_a_minute):
    pool = promo_pools["open"]
    version, promotion_id = start_canary(make_ready, client_for, second_reviewer, pool, steps=[{"weight": 5}])
    production = production_of(admin, pool)
    # Reported at once: routed, for all the registry knows, before the routers took the new weight.
    assert report(router_client, pool, window(version["served_name"], "canary", 50, errors=50),
                  window(production, "production", 200)).status_code == 204
    assert judge(engine, promotion_id, after_s=WINDOW_S + 1) == "waiting_for_traffic"
    status = client_for("acme_reviewer").get(f"/v1/promotions/{promotion_id}/canary").json()
    assert status["canary"]["requests"] == 0 and status["production"]["requests"] == 0
    assert canary_weight(admin, pool, version["served_name"]) == 5
    second_reviewer.post(f"/v1/pools/{pool}/aliases/{ADAPTER}/canary/rollback", json={"comment": "done"})


def test_the_reviewer_who_requested_a_canary_does_not_open_its_gate(
        first, make_ready, client_for, second_reviewer, promo_pools, router_client, admin, engine):
    """A manual gate is an approval of the next step: the requester cannot wave it through."""
    pool = promo_pools["open"]
    version, promotion_id = start_canary(make_ready, client_for, second_reviewer, pool, requester="acme_reviewer",
                                         steps=[{"weight": 10, "manual_gate": True}, {"weight": 50}])
    served, production = version["served_name"], production_of(admin, pool)
    report(router_client, pool, window(served, "canary", 30), window(production, "production", 30))
    judge(engine, promotion_id, after_s=WINDOW_S + 1)
    resumes = len(events(engine, "canary.resumed", promotion_id))

    refused = client_for("acme_reviewer").post(f"/v1/promotions/{promotion_id}/canary/resume")
    assert_refused(refused, 403, "four_eyes", f"the gate of canary {promotion_id} cannot be opened by "
                                              "acme_reviewer: ")
    assert "requested this promotion and may not approve it" in refused.json()["error"]["message"]
    status = client_for("acme_reviewer").get(f"/v1/promotions/{promotion_id}/canary").json()
    assert status["state"] == "awaiting_gate" and len(events(engine, "canary.resumed", promotion_id)) == resumes

    assert second_reviewer.post(f"/v1/promotions/{promotion_id}/canary/resume").json()["state"] == "analysing"
    second_reviewer.post(f"/v1/pools/{pool}/aliases/{ADAPTER}/canary/rollback", json={"comment": "done"})


def test_a_check_that_read_the_canary_before_its_gate_opened_does_not_close_it_again(
        first, make_ready, client_for, second_reviewer, promo_pools, router_client, admin, engine):
    pool = promo_pools["open"]
    version, promotion_id = start_canary(make_ready, client_for, second_reviewer, pool,
                                         steps=[{"weight": 10, "manual_gate": True}, {"weight": 50}])
    served, production = version["served_name"], production_of(admin, pool)
    report(router_client, pool, window(served, "canary", 30), window(production, "production", 30))
    with unit_of_work(engine) as slow:
        read = slow.get(Promotion, promotion_id)  # a slow check's unlocked read (held, as check holds it)
        judge(engine, promotion_id, after_s=WINDOW_S + 1)  # a quicker check stops it at the gate
        resumed = second_reviewer.post(f"/v1/promotions/{promotion_id}/canary/resume")
        assert resumed.json()["state"] == "analysing", resumed.text
        assert read.analysis_state.get("gate_opened") is None  # what the slow check judges
        assert canaries.check(slow, promotion_id) == "changed meanwhile"

    judge(engine, promotion_id, after_s=WINDOW_S + 1)
    assert canary_weight(admin, pool, served) == 50  # the gate stayed open
    second_reviewer.post(f"/v1/pools/{pool}/aliases/{ADAPTER}/canary/rollback", json={"comment": "done"})


def test_the_dashboard_shows_the_analysis_and_a_reviewer_steers_it_there(
        first, make_ready, client_for, second_reviewer, promo_pools, router_client, admin, engine, open_as):
    pool = promo_pools["open"]
    version, promotion_id = start_canary(make_ready, client_for, second_reviewer, pool,
                                         steps=[{"weight": 10, "manual_gate": True}, {"weight": 50}])
    served, production = version["served_name"], production_of(admin, pool)
    report(router_client, pool, window(served, "canary", 30), window(production, "production", 30))
    judge(engine, promotion_id, after_s=WINDOW_S + 1)

    page = open_as("acme_reviewer")
    page.goto(f"/ui/promotions/{promotion_id}")
    heading = page.get_by_role("heading", name=re.compile("^Canary analysis"))
    expect(heading).to_have_text("Canary analysis: awaiting gate")
    checks = page.get_by_role("table", name="Live checks of the canary against production")
    expect(checks.get_by_role("row", name=re.compile("^requests"))).to_contain_text("30")
    expect(checks.get_by_role("row", name=re.compile("^error_rate"))).to_contain_text("passed")
    assert unlabelled_controls(page) == []
    page.get_by_role("button", name="Resume").click()  # the gate opens: the next check steps up
    expect(heading).to_have_text("Canary analysis: analysing")
    report(router_client, pool, window(served, "canary", 30), window(production, "production", 30))
    judge(engine, promotion_id, after_s=WINDOW_S + 1)
    assert canary_weight(admin, pool, served) == 50
    page.reload()
    page.get_by_role("button", name="Pause").click()
    expect(heading).to_have_text("Canary analysis: paused")
    page.get_by_role("button", name="Resume").click()
    expect(heading).to_have_text("Canary analysis: analysing")

    page.goto(f"/ui/pools/{pool}")
    row = page.get_by_role("row", name=re.compile(r"^acme.canaried canary"))
    expect(row).to_contain_text(f"{served} 50%")
    expect(row.get_by_role("link", name="analysing, step 2")).to_have_attribute("href", f"/ui/promotions/{promotion_id}")

    report(router_client, pool, window(served, "canary", 30, errors=20), window(production, "production", 30))
    judge(engine, promotion_id, after_s=3)
    page.goto(f"/ui/promotions/{promotion_id}")
    expect(heading).to_have_text("Canary analysis: rolled back")
    expect(checks.get_by_role("row", name=re.compile("^error_rate"))).to_contain_text("failed")
    expect(page.get_by_role("button", name="Pause")).to_have_count(0)
