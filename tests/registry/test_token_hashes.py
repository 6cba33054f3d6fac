"""Tokens are stored under a hash keyed with the registry host's key: someone who can write to the
database cannot mint a working token by inserting the hash of a secret of their choosing. Tokens
stored unkeyed (issued before) work only during an upgrade window, once each, and are rekeyed."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from devkit import services
from registry.auth.tokens import hash_token
from registry.tables import ApiToken
from devkit.units_of_work import unit_of_work


def plant(engine, *, role: str = "admin") -> tuple[str, int]:
    """What a database writer does: a token row under the unkeyed hash of their own secret,
    on the identity of the first global admin."""
    plain = "lpt_" + secrets.token_urlsafe(32)
    with unit_of_work(engine) as session:
        model = session.scalars(select(ApiToken).where(ApiToken.role == role, ApiToken.tenant_id.is_(None))
                                .order_by(ApiToken.id)).first()
        row = ApiToken(token_hash=hashlib.sha256(plain.encode()).hexdigest(), subject="planted",
                       identity_id=model.identity_id, role=role, expires_at=model.expires_at)
        session.add(row)
        session.flush()
        return plain, row.id


def stored_hash(engine, row_id: int) -> str:
    with Session(engine) as session:
        return session.get(ApiToken, row_id).token_hash


@pytest.fixture(scope="module")
def upgrading(service_dir: Path, registry) -> Iterator[services.Service]:
    """A registry of the same deployment in its upgrade window."""
    env = {key: value for key, value in registry.env.items() if key.startswith("LORAPLANE_")}
    env.pop("LORAPLANE_PUBLIC_URL", None)
    env.pop("LORAPLANE_DATA_DIR", None)
    server = services.start_registry(service_dir / "registry-upgrading",
                                     {**env, "LORAPLANE_LEGACY_TOKEN_HASHES": "upgrade"})
    yield server
    server.stop()


def test_a_token_row_planted_in_the_database_is_refused(registry, engine, admin):
    plain, row_id = plant(engine)

    refused = httpx.get(registry.url + "/v1/tokens", headers={"Authorization": f"Bearer {plain}"})

    assert refused.status_code == 401 and refused.json()["error"]["message"] == "invalid or revoked token"
    assert stored_hash(engine, row_id) == hashlib.sha256(plain.encode()).hexdigest()  # left as found


def test_in_an_upgrade_window_an_unkeyed_token_works_once_and_is_stored_keyed(upgrading, registry, engine, admin):
    plain, row_id = plant(engine, role="admin")
    headers = {"Authorization": f"Bearer {plain}"}

    assert httpx.get(upgrading.url + "/v1/whoami", headers=headers).status_code == 200

    assert stored_hash(engine, row_id) == hash_token(plain)
    assert httpx.get(registry.url + "/v1/whoami", headers=headers).status_code == 200  # keyed now
