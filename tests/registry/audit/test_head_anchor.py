"""The chain's head leaves the database with every commit that adds events: signed, into the
registry's head file, and into every webhook payload. Verify checks the chain against it."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from devkit.pipeline_steps import request_promotion
from registry.audit import anchor
from registry.tables import AuditEvent, WebhookDelivery


def audit_event(admin, action: str, subject: str) -> dict:
    events = admin.get("/v1/audit", params={"action": action, "subject": subject}).json()["items"]
    assert len(events) == 1, events
    return events[0]


def assert_head_of(engine, head: anchor.Head, event: dict) -> None:
    """`head` names `event` as the chain's last, with every event up to it counted."""
    with Session(engine) as session:
        counted = session.scalar(select(func.count()).select_from(AuditEvent)
                                 .where(AuditEvent.id <= head.last_id))
    assert (head.last_id, head.last_hash, head.count) == (event["id"], event["hash"], counted)


def test_each_commit_moves_the_signed_head_outside_the_database(registry, admin, engine):
    created = admin.post("/v1/tokens", json={"subject": "anchored", "role": "reviewer", "tenant": "acme"})
    assert created.status_code == 201, created.text

    files = list((Path(registry.env["LORAPLANE_DATA_DIR"]) / "audit-heads").glob("*.json"))
    assert len(files) == 1, files
    head = anchor.read(files[0])  # raises unless signed with the deployment's audit-head key
    event = audit_event(admin, "token.create", f"token/{created.json()['id']}")
    assert event["hash_scheme"] == "hmac-sha256"
    assert_head_of(engine, head, event)

    report = admin.get("/v1/audit/verify").json()
    assert report["intact"] and report["problems"] == []
    assert report["external_head"] == {"last_id": head.last_id, "last_hash": head.last_hash,
                                       "count": head.count, "at": head.at}
    assert report["anchor"] == (f"the head recorded at {head.at} (event {head.last_id}, "
                                f"{head.count} events) is in the chain")


def test_every_webhook_payload_carries_the_head_that_includes_its_event(
        client_for, admin, engine, promo_pools, make_ready, uploader):
    acme_admin = client_for("acme_admin")
    hook = acme_admin.post("/v1/webhooks", json={"url": "http://127.0.0.1:9/hook", "tenant": "acme",
                                                 "events": ["promotion.requested"]}).json()
    promotion = request_promotion(uploader, promo_pools["open"], make_ready("anchored")).json()
    assert acme_admin.delete(f"/v1/webhooks/{hook['id']}").status_code == 204

    with Session(engine) as session:
        payloads = session.scalars(select(WebhookDelivery.payload)
                                   .where(WebhookDelivery.webhook_id == hook["id"])).all()
    assert len(payloads) == 1 and payloads[0]["data"]["id"] == promotion["id"]
    head = anchor.from_signed(payloads[0]["audit_head"])
    assert_head_of(engine, head, audit_event(admin, "promotion.requested",
                                             f"pool/{promo_pools['open']}/acme/anchored@1"))
