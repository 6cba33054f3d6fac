"""Retiring and deleting adapters and versions through the API: what each does, each refusal
(its status, code and message, and that nothing changed in the database or S3), and the tenant
boundary. A pool of this module's own with no node: a superseded version leaves it at once."""

from __future__ import annotations

import httpx
import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from devkit.pipeline_steps import PEFT_FILES, finish_evaluation, request_promotion
from tests.conftest import BUCKET
from tests.registry.conftest import PROMO_BASE
from tests.support.asserts import assert_refused
from tests.support.promotions import active_set, promote, served
from registry.tables import AuditEvent

POOL = "life-pool"


@pytest.fixture(scope="module")
def pool(admin: httpx.Client, promo_pools) -> str:
    response = admin.post("/v1/pools", json={"name": POOL, "base_model": PROMO_BASE, "dtype": "float32",
                                             "max_loras": 2, "max_cpu_loras": 64, "max_lora_rank": 16})
    assert response.status_code == 201, response.text
    return POOL


@pytest.fixture
def unchanged(engine, s3_client):
    """Assert that a refused call changed nothing: the versions as the API shows them, the
    audit log and the stored objects."""

    def snapshot(client: httpx.Client, adapter: str) -> dict:
        versions = client.get(f"/v1/adapters/{adapter}/versions").json()["items"]
        with Session(engine) as session:
            events = session.scalar(select(func.count()).select_from(AuditEvent))
        keys = sorted(o["Key"] for page in s3_client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET)
                      for o in page.get("Contents", []))
        return {"adapter": client.get(f"/v1/adapters/{adapter}").json(), "versions": versions,
                "events": events, "keys": keys}

    return snapshot


def path(version: dict) -> str:
    return f"/v1/adapters/{version['tenant']}/{version['adapter']}/versions/{version['number']}"


def events(admin: httpx.Client, action: str, subject: str) -> list[dict]:
    return admin.get("/v1/audit", params={"action": action, "subject": subject}).json()["items"]


def built(tiny_base, folder, seed: int):
    from devkit.tiny_model import build_adapter

    return build_adapter(tiny_base, folder, r=8, lora_alpha=16, target_modules=("q_proj", "v_proj"),
                         seed=seed, base_model_name=PROMO_BASE)


def upload(client: httpx.Client, adapter: str, folder) -> httpx.Response:
    parts = [("file", (name, (folder / name).read_bytes())) for name in PEFT_FILES]
    return client.post(f"/v1/adapters/{adapter}/versions", files=parts)


def test_a_version_is_retired_then_deleted(make_ready, client_for, admin, pool, s3_client):
    uploader = client_for("acme_uploader")
    version = make_ready("life-one")
    served_name = version["served_name"]

    retired = uploader.post(f"{path(version)}/retire")
    assert retired.status_code == 200, retired.text
    assert retired.json()["state"] == "retired" and retired.json()["retired_at"]
    assert uploader.post(f"{path(version)}/retire").json()["retired_at"] == retired.json()["retired_at"]
    (event,) = events(admin, "adapter_version.retired", served_name)  # retiring again: no event
    assert event["before"] == {"state": "evaluated"} and event["after"] == {"state": "retired"}

    # Never promoted or evaluated again; still read and downloaded.
    assert_refused(request_promotion(uploader, pool, version), 409, "version_retired",
                   f"{served_name} is retired and cannot be promoted")
    assert_refused(uploader.post(f"{path(version)}/evaluations", json={"suite": "promo-suite"}), 409,
                   "version_retired", f"{served_name} is retired and cannot be evaluated")
    assert uploader.get(f"{path(version)}/download").status_code == 200

    deleted = uploader.delete(path(version))
    assert deleted.status_code == 200, deleted.text
    body = deleted.json()
    assert body["state"] == "deleted" and body["files"] == [] and body["digest"] == version["digest"]
    assert body["upload_signature"] is None and body["deleted_at"]
    (event,) = events(admin, "adapter_version.deleted", served_name)
    assert event["before"]["files"] == version["files"] and event["after"] == {"state": "deleted"}
    assert_refused(uploader.get(f"{path(version)}/download"), 409, "version_deleted",
                   f"{served_name} was deleted")
    # The blobs wait for the collector's grace period (tests/registry/blob_gc).
    for entry in version["files"]:
        assert s3_client.head_object(Bucket=BUCKET, Key=f"blobs/sha256/{entry['sha256'][:2]}/{entry['sha256']}")
    assert uploader.delete(path(version)).json()["deleted_at"] == body["deleted_at"]
    assert len(events(admin, "adapter_version.deleted", served_name)) == 1


def test_a_delete_waits_for_evaluations_and_the_same_bytes_are_not_taken_again(
        client_for, tiny_base, tmp_path, engine, pool, unchanged):
    uploader = client_for("acme_uploader")
    folder = built(tiny_base, tmp_path / "again", seed=4242)
    created = upload(uploader, "acme/life-again", folder)
    assert created.status_code == 201, created.text
    version = created.json()
    # The upload queued the suite a pool of its base requires: a delete waits for it.
    (evaluation,) = uploader.get(f"{path(version)}/evaluations").json()["items"]
    before = unchanged(uploader, "acme/life-again")
    assert_refused(uploader.delete(path(version)), 409, "evaluations_unfinished",
                   f"cannot delete evaluation {evaluation['id']} of acme/life-again@1 has not finished")
    assert_refused(uploader.delete("/v1/adapters/acme/life-again"), 409, "evaluations_unfinished",
                   f"evaluation {evaluation['id']}")
    assert unchanged(uploader, "acme/life-again") == before

    finish_evaluation(engine, evaluation["id"])
    assert uploader.delete(path(version)).json()["state"] == "deleted"
    assert_refused(upload(uploader, "acme/life-again", folder), 409, "version_deleted",
                   "these bytes were acme/life-again@1, which was deleted")
    other = upload(uploader, "acme/life-again", built(tiny_base, tmp_path / "other", seed=4243))
    assert other.status_code == 201 and other.json()["number"] == 2


def test_an_adapter_is_retired_then_deleted(make_ready, client_for, admin, pool, unchanged, tiny_base,
                                            tmp_path):
    uploader = client_for("acme_uploader")
    one, two = make_ready("life-adapter"), make_ready("life-adapter")

    retired = uploader.post("/v1/adapters/acme/life-adapter/retire")
    assert retired.status_code == 200, retired.text
    assert retired.json()["state"] == "retired"
    states = {v["number"]: v["state"] for v in uploader.get("/v1/adapters/acme/life-adapter/versions").json()["items"]}
    assert states == {one["number"]: "retired", two["number"]: "retired"}
    (event,) = events(admin, "adapter.retired", "acme/life-adapter")
    assert event["after"] == {"state": "retired", "versions": [1, 2]}
    # No new version: its served names are never reused.
    assert_refused(upload(uploader, "acme/life-adapter", built(tiny_base, tmp_path / "late", seed=4244)),
                   409, "adapter_retired", "adapter acme/life-adapter is retired: it takes no new versions")

    deleted = uploader.delete("/v1/adapters/acme/life-adapter")
    assert deleted.status_code == 200, deleted.text
    assert deleted.json()["state"] == "deleted" and deleted.json()["deleted_at"]
    versions = uploader.get("/v1/adapters/acme/life-adapter/versions").json()["items"]
    assert {v["state"] for v in versions} == {"deleted"} and all(v["files"] == [] for v in versions)
    listed = uploader.get("/v1/adapters", params={"q": "life-adapter", "state": "deleted"}).json()["items"]
    assert [a["name"] for a in listed] == ["life-adapter"]
    before = unchanged(uploader, "acme/life-adapter")
    assert uploader.delete("/v1/adapters/acme/life-adapter").status_code == 200  # again: nothing
    assert unchanged(uploader, "acme/life-adapter") == before


def test_what_an_active_set_or_a_promotion_holds_is_refused(make_ready, client_for, admin, pool,
                                                          unchanged):
    uploader = client_for("acme_uploader")
    served_v = make_ready("life-held")
    promote(uploader, admin, pool, served_v)
    assert "acme/life-held@1" in served(active_set(admin, pool))
    before = unchanged(uploader, "acme/life-held")

    assert_refused(uploader.post(f"{path(served_v)}/retire"), 409, "held_by_active_set",
                   f"cannot retire acme/life-held@1 is in the active set of pool '{pool}' (alias 'production')")
    refused = uploader.delete(path(served_v))
    assert_refused(refused, 409, "held_by_active_set", "acme/life-held@1 is in the active set")
    assert "Promote another version" in refused.json()["error"]["hint"]
    assert_refused(uploader.post("/v1/adapters/acme/life-held/retire"), 409, "held_by_active_set",
                   "cannot retire acme/life-held@1 is in the active set")
    assert_refused(uploader.delete("/v1/adapters/acme/life-held"), 409, "held_by_active_set",
                   "cannot delete acme/life-held@1")
    assert unchanged(uploader, "acme/life-held") == before

    pending_v = make_ready("life-held")
    created = request_promotion(uploader, pool, pending_v)
    assert created.status_code == 201, created.text
    promotion_id = created.json()["id"]
    before = unchanged(uploader, "acme/life-held")
    refused = uploader.post(f"{path(pending_v)}/retire")
    assert_refused(refused, 409, "pending_promotion",
                   f"cannot retire promotion {promotion_id} ({pool}:production, awaiting_approval) "
                   "names acme/life-held@2")
    assert f"loraplane promotion reject {promotion_id}" in refused.json()["error"]["hint"]
    assert_refused(uploader.delete(path(pending_v)), 409, "pending_promotion", f"promotion {promotion_id}")
    assert unchanged(uploader, "acme/life-held") == before

    # Once the promotion is decided and has superseded version 1 (no node: at once), version 1
    # is the alias's way back: a one-call rollback restores it, so it is held.
    approved = admin.post(f"/v1/promotions/{promotion_id}/approve", json={"comment": "ok"})
    assert approved.status_code == 200, approved.text
    assert "acme/life-held@1" not in served(active_set(admin, pool))
    before = unchanged(uploader, "acme/life-held")
    refused = uploader.post(f"{path(served_v)}/retire")
    assert_refused(refused, 409, "rollback_target",
                   f"cannot retire acme/life-held@1 is what alias 'production' of pool '{pool}' rolls back to")
    assert "Promote another version to that alias first" in refused.json()["error"]["hint"]
    assert_refused(uploader.delete(path(served_v)), 409, "rollback_target", "rolls back to")
    assert unchanged(uploader, "acme/life-held") == before

    # A newer version replaces version 2: version 1 is no way back any more. It may be retired,
    # but not deleted: its attestation still verifies and names its files.
    promote(uploader, admin, pool, make_ready("life-held"))
    assert "acme/life-held@3" in served(active_set(admin, pool))
    before = unchanged(uploader, "acme/life-held")
    refused = uploader.delete(path(served_v))
    assert_refused(refused, 409, "attested", "cannot delete attestation")
    assert "proves acme/life-held@1 and still verifies" in refused.json()["error"]["message"]
    assert "Retire the version instead" in refused.json()["error"]["hint"]
    assert unchanged(uploader, "acme/life-held") == before
    assert uploader.post(f"{path(served_v)}/retire").json()["state"] == "retired"
    # The alias still has its way back: version 2.
    rolled = admin.post(f"/v1/pools/{pool}/aliases/acme/life-held/production/rollback", json={"comment": "back"})
    assert rolled.status_code == 200, rolled.text
    assert served(active_set(admin, pool))["acme/life-held@2"] == [("production", 100)]


def test_only_the_tenants_own_uploaders_and_admins_may_retire_or_delete(make_ready, client_for,
                                                                         unchanged, pool):
    version = make_ready("life-boundary")
    before = unchanged(client_for("acme_admin"), "acme/life-boundary")
    for who, message in (("globex_uploader", "this token belongs to tenant 'globex', not 'acme'"),
                         ("globex_admin", "this token belongs to tenant 'globex', not 'acme'"),
                         ("acme_reviewer", "role 'reviewer' may not do this")):
        client = client_for(who)
        for response in (client.post(f"{path(version)}/retire"), client.delete(path(version)),
                         client.post("/v1/adapters/acme/life-boundary/retire"),
                         client.delete("/v1/adapters/acme/life-boundary")):
            assert_refused(response, 403, "forbidden", message)
    # Another tenant's name that does not exist gets the same 403: nothing is given away.
    assert_refused(client_for("globex_admin").delete("/v1/adapters/acme/no-such-adapter"), 403,
                   "forbidden", "not 'acme'")
    assert_refused(client_for("acme_uploader").delete("/v1/adapters/globex/anything"), 403,
                   "forbidden", "not 'globex'")
    assert_refused(client_for("acme_uploader").post("/v1/adapters/acme/no-such-adapter/retire"), 404,
                   "adapter_not_found", "adapter acme/no-such-adapter does not exist")
    assert unchanged(client_for("acme_admin"), "acme/life-boundary") == before
    # The tenant's admin may; so may a global admin.
    assert client_for("acme_admin").post(f"{path(version)}/retire").json()["state"] == "retired"
    assert client_for("global_admin").delete(path(version)).json()["state"] == "deleted"
