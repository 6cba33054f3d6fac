"""LORAPLANE_SECRET_KEY rotates: with the new secret current and the old one in
LORAPLANE_PREVIOUS_SECRET_KEYS, what the old one keyed still verifies (the audit chain and its head
on file, tokens, dashboard sessions and forms, download links), everything new is keyed with the
new one, and a token is rehashed under it on first use. The first registry to start with the new
secret seals live rows again (node address bindings, canary analyses) and records the old secret's
checkpoint: nothing written after it with the old secret is believed. Dropping the old secret makes
what only it keyed fail, saying where a rotated-out secret belongs."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from devkit import services
from devkit.units_of_work import unit_of_work
from migrations import runner
from registry import audit
from registry.audit import sealed
from registry.base_models.schemas import BaseModelCreate
from registry.base_models.service import register
from registry.nodes import addresses
from registry.pools import service as pools
from registry.pools.schemas import PoolCreate
from registry.pool_lookup.lookup import pool_by_name as existing_pool
from registry.secret_checkpoints import service as secret_checkpoints
from registry.deployment_keys import service as deployment_keys
from registry.audit import anchor
from registry.audit.verify import verify_chain
from registry.auth import tokens
from registry.auth.principal import Role
from registry.db import make_engine
from registry.deployment_keys.service import KeysDiffer
from registry.errors import Forbidden, NotFound, Unauthorized
from registry.promotions import analysis_seals
from registry.settings import get_settings
from registry.storage.local import LocalStore
from registry.tables import ApiToken, AuditEvent, Promotion
from registry.tokens.issuing import create_token
from tests.registry.audit.tools import run_verify
from web import session as dashboard

OLD, NEW = "old-secret-" + "o" * 32, "new-secret-" + "n" * 32
CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
          "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
          "num_key_value_heads": 2, "vocab_size": 512, "torch_dtype": "float32"}



@contextmanager
def secrets_set(current: str, previous: str = "") -> Iterator[None]:
    """This process (and the CLI it starts) with these secrets, then the settings as they were."""
    saved = {name: os.environ.get(name) for name in ("LORAPLANE_SECRET_KEY", "LORAPLANE_PREVIOUS_SECRET_KEYS")}
    os.environ["LORAPLANE_SECRET_KEY"], os.environ["LORAPLANE_PREVIOUS_SECRET_KEYS"] = current, previous
    get_settings.cache_clear()
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        get_settings.cache_clear()


@pytest.fixture
def rotated_deployment(postgres, tmp_path, monkeypatch):
    """A database of its own, written under the old secret: audit events, a token, a published
    key fingerprint, and the chain's head on file."""
    monkeypatch.setenv("LORAPLANE_AUDIT_HEAD_FILE", str(tmp_path / "audit-head.json"))
    secret_checkpoints.forget_cache()  # another test's database may have had checkpoints
    url = services.create_database(postgres.url, "secret_rotation")
    runner.upgrade(url)
    engine = make_engine(url, pooled=False)
    with secrets_set(OLD):
        with unit_of_work(engine) as session:
            _, plain = create_token(session, subject="ada", role=Role.ADMIN, tenant=None, actor="tests")
            deployment_keys.publish(session, actor="registry (start)")
            register(session, BaseModelCreate(name="rotation-base", config=CONFIG), actor="tests")
            pool = pools.create(session, PoolCreate(name="rotation", base_model="rotation-base", max_loras=1,
                                                    max_cpu_loras=1, max_lora_rank=8), actor="tests")
            addresses.bind(session, existing_pool(session, pool.name), "node-1", "http://node-1.internal:8000",
                           actor="tests")
        for i in range(3):
            with unit_of_work(engine) as session:
                audit.record(session, actor="tests", action="demo.event", subject=f"old/{i}")
    yield url, engine, plain
    engine.dispose()
    secret_checkpoints.forget_cache()


def test_after_a_rotation_what_the_old_secret_keyed_verifies_and_new_work_uses_the_new(rotated_deployment):
    url, engine, plain = rotated_deployment
    with secrets_set(OLD):
        cookie = dashboard._serializer("session").dumps("session-secret")
        form = dashboard.Visit(None, "nonce").csrf_token
        link = LocalStore(get_settings()).presigned_url("blobs/sha256/ab/ab" + "0" * 62, 600)
        canary = Promotion(id=7, pool_id=1, adapter_id=2, version_id=3, analysis={"steps": [5, 50]},
                           analysis_state={"step": 0})
        canary.analysis_seal = analysis_seals.seal(canary)

    with secrets_set(NEW, previous=OLD):
        with Session(engine) as session:
            report = verify_chain(session)
        assert report.intact, report.problems
        assert report.keyed_by_previous_secret == report.events == 8  # token, keys, base, pool, binding, 3 events

        with unit_of_work(engine) as session:
            assert tokens.authenticate(session, plain).subject == "ada"
            audit.record(session, actor="tests", action="demo.event", subject="new/0")
        with Session(engine) as session:
            stored = session.scalar(select(ApiToken.token_hash).where(ApiToken.subject == "ada"))
        assert stored == tokens.hash_token(plain)  # now under the new secret's key

        assert dashboard._serializer("session").loads(cookie, max_age=60) == "session-secret"
        dashboard.check_csrf(dashboard.Visit(None, "nonce"), form)
        expires, signature = (part.split("=")[1] for part in link.split("?")[1].split("&"))
        with pytest.raises(NotFound, match="artifact not found"):  # the link holds; no blob is there
            LocalStore(get_settings()).open_signed("blobs/sha256/ab/ab" + "0" * 62, int(expires), signature)
        # A canary's analysis holds under the current secret alone: the rotation's first registry
        # seals the live ones again (test_a_rotated_out_secret_verifies_nothing_written_after_its_checkpoint).
        assert not analysis_seals.holds(canary)
        assert anchor.read(Path(os.environ["LORAPLANE_AUDIT_HEAD_FILE"])) is not None

        with Session(engine) as session:
            report = verify_chain(session)
        assert report.intact and report.events == 9 and report.keyed_by_previous_secret == 8
        verified = run_verify(url)
        assert verified.returncode == 0, verified.stderr
        assert "audit chain intact: 9 events" in verified.stdout
        assert ("8 of them keyed with a previous secret (LORAPLANE_PREVIOUS_SECRET_KEYS): keep it "
                "there while they must verify") in verified.stdout

    with secrets_set(NEW):  # the old secret dropped: only what the new one keyed holds
        with Session(engine) as session:
            report = verify_chain(session)
        assert [problem.id for problem in report.problems if problem.kind == "altered"] == [1, 2, 3, 4, 5, 6, 7, 8]
        assert report.problems[0].detail.endswith(
            "or keyed with a secret that is neither LORAPLANE_SECRET_KEY nor in "
            "LORAPLANE_PREVIOUS_SECRET_KEYS here")
        with pytest.raises(Forbidden, match="the download link is invalid or has expired"):
            LocalStore(get_settings()).open_signed("blobs/sha256/ab/ab" + "0" * 62, int(expires), signature)
        with pytest.raises(Forbidden, match="CSRF token is missing or does not match"):
            dashboard.check_csrf(dashboard.Visit(None, "nonce"), form)
        assert not analysis_seals.holds(canary)
        with Session(engine) as session:  # the token was rehashed, so it outlives the old secret
            assert tokens.authenticate(session, plain).subject == "ada"


def test_a_token_never_used_since_the_rotation_fails_once_the_old_secret_is_dropped(rotated_deployment):
    _, engine, plain = rotated_deployment
    with secrets_set(NEW), Session(engine) as session:
        with pytest.raises(Unauthorized, match="invalid or revoked token"):
            tokens.authenticate(session, plain)
        stored = session.scalar(select(ApiToken.token_hash).where(ApiToken.subject == "ada"))
    with secrets_set(OLD):
        assert stored == tokens.hash_token(plain)  # left as it was


def test_a_worker_still_on_the_old_secret_refuses_to_start_and_says_how_to_rotate(rotated_deployment):
    _, engine, _ = rotated_deployment
    with secrets_set(NEW, previous=OLD), unit_of_work(engine) as session:
        deployment_keys.publish(session, actor="registry (start)")  # the rotated registry starts
    with secrets_set(OLD), Session(engine) as session, pytest.raises(KeysDiffer) as refused:
        deployment_keys.require_the_registrys(session, "worker")
    assert "this worker does not hold the registry's LORAPLANE_SECRET_KEY (it is set here, to another value)" \
        in str(refused.value)
    assert "After a rotation, each gets the new secret, and the old one in LORAPLANE_PREVIOUS_SECRET_KEYS." \
        in refused.value.hint
    with secrets_set(NEW, previous=OLD), Session(engine) as session:
        deployment_keys.require_the_registrys(session, "worker")  # the rotated worker starts


def test_a_previous_secret_shorter_than_32_characters_is_refused_naming_it(monkeypatch):
    monkeypatch.setenv("LORAPLANE_PREVIOUS_SECRET_KEYS", f"{OLD},too-short")
    with pytest.raises(ValueError, match="previous secret 2 is shorter than 32 characters"):
        get_settings.__wrapped__()



def test_a_rotated_out_secret_verifies_nothing_written_after_its_checkpoint(rotated_deployment):
    url, engine, plain = rotated_deployment
    with secrets_set(NEW, previous=OLD), unit_of_work(engine) as session:
        deployment_keys.publish(session, actor="registry (start)")  # the first registry with the new secret
    with Session(engine) as session:
        rotated = session.scalars(select(AuditEvent).where(AuditEvent.action == "deployment.secret.rotated")).one()
    assert rotated.after["resealed"] == {"node_addresses": 1, "canary_analyses": 0, "traffic_windows": 0,
                                         "attestation_key_ledger": 0}
    last_before = rotated.after["through_event"]

    # Someone who kept the old secret and can write to the database, afterwards:
    forged_event = forge_event(engine, OLD)
    planted_token = plant_token(engine, OLD)

    with secrets_set(NEW, previous=OLD):
        with Session(engine) as session:
            report = verify_chain(session)
            assert [(p.id, p.kind) for p in report.problems] == [(forged_event, "retired_secret")]
            assert report.problems[0].detail.endswith(
                f"is keyed with a secret rotated out after event {last_before}: it was written by someone "
                "who still holds that secret")
            assert sealed.sealed_events(session, "forged/1", "demo.event") == []
            with pytest.raises(Unauthorized, match="invalid or revoked token"):
                tokens.authenticate(session, planted_token)
        with unit_of_work(engine) as session:
            assert tokens.authenticate(session, plain).subject == "ada"  # made before: rehashed
            assert addresses.trusted_one(session, existing_pool(session, "rotation"), "node-1") == \
                ("bound", "http://node-1.internal:8000")

    with secrets_set(NEW), Session(engine) as session:  # the old secret dropped: the binding holds
        assert addresses.trusted_one(session, existing_pool(session, "rotation"), "node-1") == \
            ("bound", "http://node-1.internal:8000")
        assert tokens.authenticate(session, plain).subject == "ada"


def forge_event(engine, secret: str) -> int:
    """An audit event chained after the last one, keyed with `secret`, written straight to the table."""
    from datetime import UTC, datetime

    from sqlalchemy import insert

    from registry.audit.chain import HMAC_SHA256, event_hash
    from registry.keys import Purpose, _derive

    with engine.begin() as connection:
        last = connection.execute(select(AuditEvent.id, AuditEvent.hash).order_by(AuditEvent.id.desc())).first()
        fields = dict(at=datetime.now(UTC), actor="tests", action="demo.event", subject="forged/1",
                      tenant_id=None, before=None, after=None)
        digest = event_hash(last.hash, **fields, key=_derive(secret.encode(), Purpose.AUDIT_CHAIN))
        connection.execute(insert(AuditEvent).values(**fields, prev_hash=last.hash, hash=digest,
                                                     hash_scheme=HMAC_SHA256))
        return last.id + 1


def plant_token(engine, secret: str) -> str:
    """A token row whose hash is keyed with `secret`, on the first identity."""
    import hashlib
    import hmac as hmac_module

    from registry.keys import Purpose, _derive

    chosen = "lpt_" + "c" * 43
    digest = hmac_module.new(_derive(secret.encode(), Purpose.API_TOKENS), chosen.encode(), hashlib.sha256).hexdigest()
    with unit_of_work(engine) as session:
        session.add(ApiToken(token_hash=digest, subject="planted", identity_id=1, role="admin"))
    return chosen
