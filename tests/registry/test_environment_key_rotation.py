"""Replacing LORAPLANE_ATTESTATION_PRIVATE_KEY, with the old key in
LORAPLANE_ATTESTATION_PREVIOUS_PRIVATE_KEYS, is a rotation like a folder keyring's: the trust
bundle gets a new version, the old key its overlap, and a node pinned on the old bundle follows.
Registries are started as `loraplane serve` starts them, on a database of their own."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from devkit import services
from migrations import runner
from registry.db import make_engine
from registry.tables import AttestationKeyLedger, AuditEvent
from serving.agent.trust import TrustStore
from signed_digests.provenance import TRUST_BUNDLE_PATH, TrustBundle, key_id


def pem(private: Ed25519PrivateKey) -> str:
    return private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption()).decode()


def kid(private: Ed25519PrivateKey) -> str:
    return key_id(private.public_key().public_bytes_raw())


OLD, NEW = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()


@pytest.fixture(scope="module")
def first_starts(postgres, tmp_path_factory) -> dict[str, dict]:
    """Each state the tests start from, made once, as a database to copy (`template`) and the
    trust bundle its last start served: a first start on OLD, and a rotation from OLD to NEW."""
    name = "environment_key_rotation"
    url = services.create_database(postgres.url, f"{name}_first")
    runner.upgrade(url)
    folder = tmp_path_factory.mktemp("first-starts")
    first = bundle_of((url, folder), OLD)
    rotated_url = services.create_database(postgres.url, f"{name}_rotated", template=f"{name}_first")
    rotated = bundle_of((rotated_url, folder), NEW, OLD)
    return {"first": {"template": f"{name}_first", "bundle": first},
            "rotated": {"template": f"{name}_rotated", "bundle": rotated}}


@pytest.fixture
def deployment_at(postgres, first_starts, tmp_path) -> Callable[[str], tuple[str, Path]]:
    """A deployment (database URL, registry folder) in one of those states, a copy of its own."""
    def at(state: str) -> tuple[str, Path]:
        url = services.create_database(postgres.url, "environment_key_rotation",
                                       template=first_starts[state]["template"])
        return url, tmp_path

    return at


def start(deployment, current: Ed25519PrivateKey, *previous: Ed25519PrivateKey) -> services.Service:
    url, folder = deployment
    return services.start_registry(folder / "registry", {
        "LORAPLANE_DATABASE_URL": url, "LORAPLANE_STORAGE": "local", "LORAPLANE_BROKER_URL": None,
        "LORAPLANE_ATTESTATION_KEY_DIR": None,  # the test session's key folder: not this deployment's
        "LORAPLANE_ATTESTATION_PRIVATE_KEY": pem(current),
        "LORAPLANE_ATTESTATION_PREVIOUS_PRIVATE_KEYS": "".join(pem(key) for key in previous) or None})


def bundle_of(deployment, current: Ed25519PrivateKey, *previous: Ed25519PrivateKey) -> dict:
    registry = start(deployment, current, *previous)
    try:
        return httpx.get(registry.url + TRUST_BUNDLE_PATH).json()
    finally:
        registry.stop()


def node_pinned_on(bundle: dict, folder: Path) -> TrustStore:
    """A node's trust store that pinned `bundle` on its first start, and fetches what it is handed."""
    handed = {"bundle": bundle}

    async def fetch() -> dict:
        return handed["bundle"]

    store = TrustStore(pinned=folder / "pinned.json", operator_file=None, fetch=fetch)
    store.hand = handed  # type: ignore[attr-defined]
    assert asyncio.run(store.refresh())
    return store


def offered(store: TrustStore, bundle: dict) -> bool:
    store.hand["bundle"] = bundle  # type: ignore[attr-defined]
    return asyncio.run(store.refresh())


def test_a_node_pinned_on_the_old_key_follows_a_rotation_by_deployment(first_starts, deployment_at, tmp_path):
    first, rotated = first_starts["first"]["bundle"], first_starts["rotated"]["bundle"]
    node = node_pinned_on(first, tmp_path / "node")
    assert node.bundle.version == 1 and set(node.bundle.keys) == {kid(OLD)}

    assert offered(node, rotated), node.problem
    assert node.bundle.version == 2 and set(node.bundle.keys) == {kid(OLD), kid(NEW)}
    old_until = node.bundle.keys[kid(OLD)].not_after
    assert timedelta(days=6, hours=23) < old_until - datetime.now(UTC) <= timedelta(days=7)
    assert node.bundle.keys[kid(NEW)].not_after is None

    deployment = deployment_at("rotated")
    again = bundle_of(deployment, NEW, OLD)  # a restart with the same keys moves nothing
    restarted = TrustBundle.parse(again, trusted_by=node.bundle)
    assert restarted.version == 2 and restarted.keys[kid(OLD)].not_after == old_until
    # The pre-rotation bundle, replayed: only the old key signed it, and it vouches for nothing now.
    assert not offered(node, first)
    assert node.problem.endswith("the new trust bundle is not signed by any key the node already trusts")

    engine = make_engine(deployment[0], pooled=False)
    with Session(engine) as session:
        rotations = session.scalars(select(AuditEvent.after).where(
            AuditEvent.action == "attestation_key.rotated")).all()
    engine.dispose()
    assert rotations == [{"retired_key_id": kid(OLD), "key_id": kid(NEW), "version": 2,
                          "retired_key_trusted_until": old_until.isoformat(), "source": "environment"}]


def test_a_key_replaced_without_the_old_one_is_not_followed_and_says_why(first_starts, deployment_at, tmp_path):
    node = node_pinned_on(first_starts["first"]["bundle"], tmp_path / "node")

    assert not offered(node, bundle_of(deployment_at("first"), NEW))

    assert node.bundle.version == 1
    assert node.problem.endswith("the new trust bundle is not signed by any key the node already trusts")


def test_a_ledger_a_database_writer_extended_stops_the_registry_from_starting(deployment_at):
    deployment = deployment_at("rotated")
    engine = make_engine(deployment[0], pooled=False)
    with Session(engine) as session, session.begin():
        session.execute(update(AttestationKeyLedger).values(trust_ends={kid(OLD): "2999-01-01T00:00:00+00:00"}))
    engine.dispose()

    with pytest.raises(RuntimeError) as refused:
        start(deployment, NEW, OLD)

    assert "the attestation key ledger in the database does not hold its seal" in str(refused.value)


def test_going_back_to_a_replaced_key_is_refused(deployment_at):
    deployment = deployment_at("rotated")

    with pytest.raises(RuntimeError) as refused:
        start(deployment, OLD, NEW)

    assert f"LORAPLANE_ATTESTATION_PRIVATE_KEY is {kid(OLD)[:16]}…, a key this deployment rotated out" \
        in str(refused.value)


def test_a_ledger_a_database_writer_deleted_stops_the_registry_from_starting(deployment_at):
    deployment = deployment_at("rotated")
    engine = make_engine(deployment[0], pooled=False)
    with Session(engine) as session, session.begin():
        session.execute(delete(AttestationKeyLedger))  # a first start again, with fresh overlaps
    engine.dispose()

    with pytest.raises(RuntimeError) as refused:
        start(deployment, NEW, OLD)

    assert ("the attestation key ledger in the database is at version none, but the audit log records a "
            "rotation to version 2: it was deleted or put back from an older copy") in str(refused.value)
