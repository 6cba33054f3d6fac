"""Reports as a node sends them, and what the registry stored, read from its database."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import httpx
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from registry.tables import (
    Adapter, AdapterVersion, AuditEvent, Evaluation, Pool, Requalification, Tenant, WebhookDelivery,
)
from devkit.pipeline_steps import create_suite

RQ_BASE, RQ_SUITE = "requal-base", "requal-suite"
LIMITS = {"max_loras": 2, "max_cpu_loras": 8, "max_lora_rank": 16}


def config_sha256(config: dict) -> str:
    """Written out here, not imported: the digest attestations name must stay this one."""
    text = json.dumps(config, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def register_base_with_suite(admin: httpx.Client, tiny_base: Path, base: str, suite: str) -> dict:
    config = json.loads((tiny_base / "config.json").read_text())
    assert admin.post("/v1/base-models", json={"name": base, "config": config}).status_code == 201
    create_suite(admin, suite, base, [{"prompt": "1 2 =>", "reference": "one two"}],
                 {"exact_match": {"min": 0.5}, "parity": {"max_logprob_diff": 0.01}})
    return config


def make_pool(admin: httpx.Client, name: str, base: str, suite: str, **extra) -> dict:
    body = {"name": name, "base_model": base, "dtype": "float32", "required_suites": [suite],
            **LIMITS, **extra}
    response = admin.post("/v1/pools", json=body)
    assert response.status_code == 201, response.text
    return response.json()


def node_report(vllm_version: str, *, dtype: str = "bfloat16", **flags) -> dict:
    return {"generation": 0, "loaded": [], "vllm_url": "http://10.0.0.9:8000", "limits": LIMITS,
            "engine": {"vllm_version": vllm_version, "dtype": dtype,
                       "flags": {"enable_lora": True, **flags}}}


def report(client: httpx.Client, pool: str, node_id: str, vllm_version: str, **flags) -> None:
    response = client.put(f"/v1/pools/{pool}/nodes/{node_id}/status",
                          json=node_report(vllm_version, **flags))
    assert response.status_code == 200, response.text


def pool_row(engine, name: str) -> Pool:
    with Session(engine) as session:
        return session.scalar(select(Pool).where(Pool.name == name))


def marks(engine, pool: str, *, open_only: bool = False) -> list[Requalification]:
    with Session(engine) as session:
        query = select(Requalification).join(Pool, Pool.id == Requalification.pool_id) \
            .where(Pool.name == pool).order_by(Requalification.id)
        if open_only:
            query = query.where(Requalification.cleared_at.is_(None))
        return list(session.scalars(query))


def evaluation_rows(engine, version_ids: set[int]) -> list[Evaluation]:
    with Session(engine) as session:
        return list(session.scalars(select(Evaluation).where(Evaluation.version_id.in_(version_ids))
                                    .order_by(Evaluation.id)))


def audit_count(engine, action: str, subject_prefix: str) -> int:
    with Session(engine) as session:
        return session.scalar(select(func.count()).select_from(AuditEvent).where(
            AuditEvent.action == action, AuditEvent.subject.startswith(subject_prefix)))


def deliveries(engine, event: str, pool: str) -> list[WebhookDelivery]:
    with Session(engine) as session:
        rows = session.scalars(select(WebhookDelivery).where(WebhookDelivery.event == event)
                               .order_by(WebhookDelivery.id))
        # One row per subscribed webhook: other tests' webhooks may take these events too.
        unique: dict[str, WebhookDelivery] = {}
        for row in rows:
            if row.payload["data"]["pool"] == pool:
                unique.setdefault(json.dumps(row.payload["data"], sort_keys=True), row)
        return list(unique.values())


def version_id(engine, version: dict) -> int:
    with Session(engine) as session:
        return session.scalar(
            select(AdapterVersion.id).join(Adapter, Adapter.id == AdapterVersion.adapter_id)
            .join(Tenant, Tenant.id == Adapter.tenant_id)
            .where(Tenant.name == version["tenant"], Adapter.name == version["adapter"],
                   AdapterVersion.number == version["number"]))


def dashboard(registry_url: str, token: str) -> httpx.Client:
    """A client signed in to the dashboard as a browser is: the sign-in form, then its cookie."""
    client = httpx.Client(base_url=registry_url, timeout=30, follow_redirects=True)
    form = client.get("/ui/sign-in").text
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', form).group(1)
    signed_in = client.post("/ui/sign-in", data={"token": token, "csrf_token": csrf, "next": "/ui/pools"})
    assert signed_in.status_code == 200 and "Signed in as" in signed_in.text, signed_in.text[:500]
    return client


def declare(admin: httpx.Client, pool: str, vllm_version: str, **flags) -> dict:
    """The operator declares the engine a node reports with these values (a round may start)."""
    response = admin.post(f"/v1/pools/{pool}/engines", json=node_report(vllm_version, **flags)["engine"])
    assert response.status_code == 200, response.text
    return response.json()
