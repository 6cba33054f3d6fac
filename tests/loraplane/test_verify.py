"""`loraplane verify tenant/name@N`, run as a user runs it against the session's registry: the
chain from the bytes (and a downloaded folder) through the signed attestation and the people who
approved, to the evaluation evidence and the audit event."""

from __future__ import annotations

import base64
import itertools
import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from devkit.pipeline_steps import (
    create_suite, evaluations_of, finish_evaluation, request_promotion, upload_dir,
)
from registry.auth.principal import Role
from registry.tables import Adapter, AdapterVersion, Attestation, AuditEvent, Pool, Tenant
from registry.tokens import issuing as token_service
from signed_digests import provenance
from tests.support.cli import cli
from devkit.units_of_work import unit_of_work

BASE = "verify-base"  # a base, suite and pools of this module's own
POOL, OTHER_POOL = "verify-pool", "verify-other"
SUITE = "verify-suite"
seeds = itertools.count(500)


@pytest.fixture(scope="module")
def pools(admin, tiny_base) -> None:
    config = json.loads((tiny_base / "config.json").read_text())
    assert admin.post("/v1/base-models", json={"name": BASE, "config": config}).status_code == 201
    create_suite(admin, SUITE, BASE, [{"prompt": "1 2 =>", "reference": "one two"}],
                 {"exact_match": {"min": 0.5}, "parity": {"max_logprob_diff": 0.01}})
    for name in (POOL, OTHER_POOL):
        # Requiring the suite makes each upload's evaluation (recorded as passed below).
        response = admin.post("/v1/pools", json={"name": name, "base_model": BASE, "dtype": "float32",
                                                 "max_loras": 2, "max_cpu_loras": 64,
                                                 "max_lora_rank": 16, "required_suites": [SUITE]})
        assert response.status_code == 201, response.text


@pytest.fixture(scope="module")
def approver(engine, registry) -> httpx.Client:
    """A reviewer who is neither the uploader nor the requester (four-eyes)."""
    with unit_of_work(engine) as session:
        _, plain = token_service.create_token(session, subject="verify_approver", role=Role.REVIEWER,
                                              tenant="acme", actor="tests")
    with httpx.Client(base_url=registry.url, timeout=60,
                      headers={"Authorization": f"Bearer {plain}"}) as client:
        yield client


@pytest.fixture(scope="module")
def make_version(pools, tiny_base, tmp_path_factory, engine, client_for):
    """Upload a new version of acme/<name> built for this module's base, with its evaluation
    recorded as passed."""
    from devkit.tiny_model import build_adapter

    root = tmp_path_factory.mktemp("verify-adapters")

    def make(name: str) -> dict:
        seed = next(seeds)
        folder = build_adapter(tiny_base, root / f"{name}-{seed}", r=8, lora_alpha=16,
                               target_modules=("q_proj", "v_proj"), seed=seed, base_model_name=BASE)
        version = upload_dir(client_for("acme_uploader"), f"acme/{name}", folder)
        for evaluation in evaluations_of(client_for("acme_admin"), version):
            finish_evaluation(engine, evaluation["id"])
        return version

    return make


@pytest.fixture(scope="module")
def approve(client_for, approver):
    def run(version: dict, pool: str = POOL) -> dict:
        requested = request_promotion(client_for("acme_reviewer"), pool, version)
        assert requested.status_code == 201, requested.text
        approved = approver.post(f"/v1/promotions/{requested.json()['id']}/approve",
                                 json={"comment": "evals fine"})
        assert approved.status_code == 200, approved.text
        return approved.json()

    return run


@pytest.fixture(scope="module")
def approved(make_version, approve) -> dict:
    version = make_version("verified-bot")
    approve(version)
    return version


def verify(ref: str, *args: str, token: str, url: str):
    return cli("verify", ref, *args, token=token, url=url)


def download(client: httpx.Client, version: dict, folder: Path) -> Path:
    link = client.get(f"/v1/adapters/acme/{version['adapter']}/versions/{version['number']}/download")
    assert link.status_code == 200, link.text
    folder.mkdir()
    for entry in link.json()["files"]:
        fetched = httpx.get(entry["url"])
        assert fetched.status_code == 200
        (folder / entry["name"]).write_bytes(fetched.content)
    return folder


def attestation_of(client: httpx.Client, version: dict) -> dict:
    listed = client.get(f"/v1/adapters/acme/{version['adapter']}/versions/{version['number']}/attestations")
    assert listed.status_code == 200, listed.text
    [attestation] = listed.json()
    return attestation


def stored(engine) -> dict[str, int]:
    with Session(engine) as session:
        return {table.__tablename__: session.scalar(select(func.count()).select_from(table))
                for table in (Attestation, AuditEvent, AdapterVersion)}


def test_a_good_approved_version_shows_its_whole_chain(approved, tokens, registry, client_for, approver):
    served = approved["served_name"]
    attestation = attestation_of(client_for("acme_admin"), approved)
    approver_identity = approver.get("/v1/whoami").json()["identity_id"]

    result = verify(served, token=tokens["acme_admin"], url=registry.url)

    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert f"digest {approved['digest']} covers 2 files" in out
    assert "fetched from the registry itself" in out and "pin a copy with --trust-bundle" in out
    assert f"signed by key {attestation['key_id'][:16]}…, trusted" in out
    assert f"approver   identity {approver_identity} (verify_approver)" in out
    assert f"{SUITE}: passed" in out and "exact_match 1 pass" in out
    assert f"{attestation['audit_event_hash']} found" in out and "promotion.activated" in out
    assert out.rstrip().endswith("every link holds")
    # Top-down: bytes, then the attestation, the people, the evidence, the audit event.
    order = [out.index(marker) for marker in ("bytes", "attestation", "people", "evaluation evidence",
                                              "audit event")]
    assert order == sorted(order)

    as_json = json.loads(verify(served, "--json", token=tokens["acme_admin"], url=registry.url).stdout)
    assert as_json["holds"] is True and as_json["served_name"] == served
    [chain] = as_json["attestations"]
    assert chain["statement"]["predicate"]["approver"]["identity_id"] == approver_identity
    assert [(link["name"], link["state"]) for link in chain["links"]] == \
        [("signature", "holds"), ("subjects", "holds"), ("audit event", "holds")]


def test_a_pinned_trust_bundle_is_used_and_named(approved, tokens, registry, tmp_path):
    pinned = tmp_path / "trust-bundle.json"
    pinned.write_text(httpx.get(registry.url + "/.well-known/loraplane/trust-bundle.json").text)

    result = verify(approved["served_name"], "--trust-bundle", str(pinned), token=tokens["acme_admin"],
                    url=registry.url)

    assert result.returncode == 0, result.stdout + result.stderr
    assert f"pinned file {pinned}" in result.stdout
    assert "fetched from the registry" not in result.stdout


def test_a_faithful_download_verifies_and_a_tampered_one_names_the_file(approved, tokens, registry,
                                                                        client_for, tmp_path):
    faithful = download(client_for("acme_admin"), approved, tmp_path / "faithful")
    args = dict(token=tokens["acme_admin"], url=registry.url)

    good = verify(approved["served_name"], "--folder", str(faithful), **args)
    assert good.returncode == 0, good.stdout + good.stderr
    assert "every file present, none extra, each sha256 equal" in good.stdout

    flipped = tmp_path / "flipped"
    shutil.copytree(faithful, flipped)
    weights = flipped / "adapter_model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0x01  # one byte of the last tensor
    weights.write_bytes(bytes(data))
    changed = verify(approved["served_name"], "--folder", str(flipped), **args)
    assert changed.returncode == 1, changed.stdout + changed.stderr
    assert "adapter_model.safetensors differs" in changed.stdout
    assert "the chain breaks at: folder" in changed.stdout

    extra = tmp_path / "extra"
    shutil.copytree(faithful, extra)
    (extra / "notes.txt").write_text("not approved")
    added = verify(approved["served_name"], "--folder", str(extra), **args)
    assert added.returncode == 1, added.stdout + added.stderr
    assert "notes.txt is not part of the version" in added.stdout

    (faithful / "adapter_config.json").unlink()
    missing = verify(approved["served_name"], "--folder", str(faithful), **args)
    assert missing.returncode == 1 and "adapter_config.json is missing" in missing.stdout


def test_a_trust_bundle_of_another_key_does_not_hold_the_signer(approved, tokens, registry, tmp_path):
    stranger = Ed25519PrivateKey.generate()
    raw = stranger.public_key().public_bytes_raw()
    document = {"version": 1, "issued_at": datetime.now(UTC).isoformat(),
                "keys": [{"key_id": provenance.key_id(raw), "algorithm": "ed25519",
                          "public_key": base64.b64encode(raw).decode(), "not_after": None}]}
    bundle = tmp_path / "other.json"
    bundle.write_text(json.dumps(provenance.envelope(provenance.BUNDLE_PAYLOAD, document,
                                                     [(provenance.key_id(raw), stranger.sign)])))

    result = verify(approved["served_name"], "--trust-bundle", str(bundle), token=tokens["acme_admin"],
                    url=registry.url)

    assert result.returncode == 1, result.stdout + result.stderr
    assert "which the trust bundle does not hold" in result.stdout
    assert "not proven: what follows is the registry's word only" in result.stdout
    assert "the chain breaks at: signature" in result.stdout


def test_a_version_without_attestation_fails_saying_so(make_version, tokens, registry, engine):
    version = make_version("unattested-bot")
    before = stored(engine)

    result = verify(version["served_name"], token=tokens["acme_admin"], url=registry.url)

    assert result.returncode == 1, result.stdout + result.stderr
    assert (f"{version['served_name']} has no attestation: nothing signed says it was approved "
            f"to serve") in result.stdout
    assert "the chain breaks at: attestation" in result.stdout
    assert stored(engine) == before
    assert httpx.get(registry.url + "/readyz").status_code == 200


def test_only_the_asked_pool_is_checked(approved, tokens, registry):
    result = verify(approved["served_name"], "--pool", OTHER_POOL, token=tokens["acme_admin"],
                    url=registry.url)

    assert result.returncode == 1, result.stdout + result.stderr
    assert f"has no attestation in pool {OTHER_POOL}" in result.stdout
    assert f"It is attested in: {POOL}." in result.stdout


def test_a_token_that_may_not_read_the_audit_log_is_told_so(approved, tokens, registry):
    result = verify(approved["served_name"], token=tokens["acme_reviewer"], url=registry.url)

    assert result.returncode == 0, result.stdout + result.stderr
    assert "not looked up: this token may not read the audit log (role 'reviewer' may not do this" \
        in result.stdout
    assert "the audit event was not checked" in result.stdout


def test_an_edited_version_record_breaks_the_chain(make_version, approve, tokens, registry, engine):
    """A database edit that points an approved version at another version's bytes."""
    swapped, other = make_version("swapped-bot"), make_version("swapped-bot")
    approve(swapped)
    with unit_of_work(engine) as session:
        adapter_id = session.scalar(select(Adapter.id).join(Tenant, Tenant.id == Adapter.tenant_id)
                                    .where(Tenant.name == "acme", Adapter.name == "swapped-bot"))
        rows = {number: session.scalar(select(AdapterVersion).where(
            AdapterVersion.adapter_id == adapter_id, AdapterVersion.number == number))
            for number in (swapped["number"], other["number"])}
        records = {n: (row.digest, list(row.files)) for n, row in rows.items()}
        # (adapter, digest) is unique: park one digest while the two rows trade places.
        rows[other["number"]].digest = "0" * 64
        session.flush()
        for mine, theirs in ((swapped["number"], other["number"]), (other["number"], swapped["number"])):
            rows[mine].digest, rows[mine].files = records[theirs]
            session.flush()

    result = verify(swapped["served_name"], token=tokens["acme_admin"], url=registry.url)

    assert result.returncode == 1, result.stdout + result.stderr
    assert (f"the attestation approves digest {swapped['digest'][:12]}…, not {other['digest'][:12]}…"
            in result.stdout)
    assert "the chain breaks at: subjects" in result.stdout


def test_usage_errors_exit_2_with_the_registrys_message(approved, tokens, registry, engine):
    before = stored(engine)

    missing = verify("acme/verified-bot@99", token=tokens["acme_admin"], url=registry.url)
    assert missing.returncode == 2, missing.stdout + missing.stderr
    assert "adapter acme/verified-bot has no version 99 (version_not_found, HTTP 404)" in missing.stderr
    assert "List versions with GET /v1/adapters/acme/verified-bot/versions." in missing.stderr
    assert missing.stdout == ""

    other_tenant = verify(approved["served_name"], token=tokens["globex_admin"], url=registry.url)
    assert other_tenant.returncode == 2
    assert "this token belongs to tenant 'globex', not 'acme' (forbidden, HTTP 403)" in other_tenant.stderr

    malformed = verify("acme/verified-bot", token=tokens["acme_admin"], url=registry.url)
    assert malformed.returncode == 2 and "'acme/verified-bot' is not tenant/name@N" in malformed.stderr

    unreadable = verify(approved["served_name"], "--trust-bundle", "/nonexistent/bundle.json",
                        token=tokens["acme_admin"], url=registry.url)
    assert unreadable.returncode == 2
    assert "cannot read the trust bundle /nonexistent/bundle.json" in unreadable.stderr

    assert stored(engine) == before
    assert httpx.get(registry.url + "/readyz").status_code == 200


def test_only_each_pools_newest_attestation_counts(make_version, approve, approver, tokens, registry):
    """A rollback attests the restored version again: the newest statement is the one in force,
    and the earlier one is listed as history (a key retired since may no longer vouch for it)."""
    first, second = make_version("history-bot"), make_version("history-bot")
    approve(first)
    approve(second)
    rolled = approver.post(f"/v1/pools/{POOL}/aliases/acme/history-bot/production/rollback",
                           json={"comment": "regressed"})
    assert rolled.status_code == 200, rolled.text

    result = verify(first["served_name"], "--json", token=tokens["acme_admin"], url=registry.url)

    assert result.returncode == 0, result.stdout + result.stderr
    chains = json.loads(result.stdout)["attestations"]
    assert [(c["action"], c["current"]) for c in chains] == [("approve", False), ("rollback", True)]
    assert chains[1]["statement"]["predicate"]["comment"] == "regressed"
    assert [link["name"] for link in chains[0]["links"]] == ["signature", "subjects"]
    text = verify(first["served_name"], token=tokens["acme_admin"], url=registry.url).stdout
    assert f"#{chains[0]['id']} approve in {POOL}" in text and "verifies" in text
    assert f"attestation {chains[1]['id']} (rollback, pool {POOL})" in text


def test_an_attestation_relabelled_to_another_pool_does_not_count_for_it(make_version, approve, tokens,
                                                                         registry, engine):
    """A registry (or its database) that lists a genuine attestation of one pool under another."""
    version = approve(make_version("relabelled-bot"))
    with unit_of_work(engine) as session:
        other = session.scalar(select(Pool.id).where(Pool.name == OTHER_POOL))
        row = session.scalar(select(Attestation).join(AdapterVersion, AdapterVersion.id == Attestation.version_id)
                             .join(Adapter, Adapter.id == AdapterVersion.adapter_id)
                             .where(Adapter.name == "relabelled-bot"))
        row.pool_id = other

    result = verify(version["served_name"], token=tokens["acme_admin"], url=registry.url)
    for_other = verify(version["served_name"], "--pool", OTHER_POOL, token=tokens["acme_admin"], url=registry.url)

    assert result.returncode == 1, result.stdout + result.stderr
    assert f"signed for pool '{POOL}', not '{OTHER_POOL}'" in " ".join(result.stdout.split())
    assert for_other.returncode == 1 and f"has no attestation in pool {OTHER_POOL}" in for_other.stdout
