"""Eval suites: a JSONL dataset in the store plus metrics, thresholds and generation settings."""

from __future__ import annotations

import hashlib
import json

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from devkit import services
from registry.eval_suites.schemas import Example
from registry.eval_suites.service import load_examples
from registry.settings import RegistrySettings
from registry.storage.s3 import S3Store
from registry.tables import EvalSuite, Evaluation
from tests.conftest import BUCKET
from tests.support.asserts import assert_refused

EXAMPLES = [{"prompt": "digits: 1 2 =>", "reference": " one two"},
            {"prompt": "digits: 3 =>", "reference": " three"}]


def suite(**changes):
    return {"name": "qa", "base_model": "tiny-llama", "examples": EXAMPLES,
            "metrics": {"exact_match": {"min": 0.9}}, **changes}


def stored(engine, s3_client) -> tuple[int, list[str]]:
    with Session(engine) as session:
        count = session.scalar(select(func.count()).select_from(EvalSuite))
    listing = s3_client.list_objects_v2(Bucket=BUCKET)
    return count, sorted(o["Key"] for o in listing.get("Contents", []))


def test_create_stores_the_dataset_as_canonical_jsonl(admin, base_model, s3_client):
    created = admin.post("/v1/eval-suites", json=suite(name="suite-a", generation={"max_tokens": 8}))
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["example_count"] == 2 and body["generation"]["max_tokens"] == 8
    assert {k: v for k, v in body["metrics"].items() if v is not None} == {"exact_match": {"min": 0.9}}
    key = f"blobs/sha256/{body['dataset_sha256'][:2]}/{body['dataset_sha256']}"
    data = s3_client.get_object(Bucket=BUCKET, Key=key)["Body"].read()
    assert hashlib.sha256(data).hexdigest() == body["dataset_sha256"]
    assert [json.loads(line) for line in data.decode().split("\n") if line] == EXAMPLES
    assert admin.get("/v1/eval-suites/suite-a").json() == body
    assert "suite-a" in {s["name"] for s in admin.get("/v1/eval-suites").json()["items"]}


@pytest.mark.parametrize(("body", "status", "code", "message"), [
    (suite(metrics={}), 422, "invalid_request", "a suite needs at least one metric"),
    (suite(examples=[]), 422, "invalid_request", "examples"),
    (suite(metrics={"exact_match": {"min": 1.5}}), 422, "invalid_request", "min"),
    (suite(metrics={"bleu": {"min": 0.5}}), 422, "invalid_request", "bleu"),
    (suite(examples=[{"prompt": "x", "reference": "y", "id": 3}]), 422, "invalid_request", "id"),
    (suite(examples=[{"prompt": "", "reference": "y"}]), 422, "invalid_request", "prompt"),
    (suite(generation={"max_tokens": 0}), 422, "invalid_request", "max_tokens"),
    (suite(generation={"stop": ["x" * 40]}), 422, "invalid_request", "stop string"),
    (suite(base_model="missing"), 404, "base_model_not_found", "'missing'"),
    (suite(name="Bad Name"), 422, "invalid_name", "invalid eval suite name"),
    (suite(name="suite-dup"), 409, "already_exists", "'suite-dup'"),
])
def test_bad_suite_is_refused_and_nothing_is_stored(admin, base_model, engine, s3_client, body,
                                                    status, code, message):
    if body["name"] == "suite-dup":
        assert admin.post("/v1/eval-suites", json=suite(name="suite-dup")).status_code == 201
    before = stored(engine, s3_client)
    assert_refused(admin.post("/v1/eval-suites", json=body), status, code, message)
    assert stored(engine, s3_client) == before


@pytest.mark.parametrize("principal", ["acme_admin", "acme_uploader", "acme_reviewer", "serving_node"])
def test_only_a_global_admin_creates_global_suites(client_for, base_model, engine, s3_client, principal):
    before = stored(engine, s3_client)
    response = client_for(principal).post("/v1/eval-suites", json=suite(name=f"by-{principal}"))
    assert_refused(response, 403, "forbidden", "may not do this")
    assert stored(engine, s3_client) == before


def test_reading_needs_a_token(client_for, base_model):
    assert_refused(client_for("none").get("/v1/eval-suites"), 401, "unauthorized", "token")


def test_a_pool_requires_suites_that_exist_for_its_base(admin, base_model, tiny_base):
    # A base of its own: a pool that requires a suite queues an evaluation for every upload on
    # its base, which other tests' uploads must not get.
    config = json.loads((tiny_base / "config.json").read_text())
    assert admin.post("/v1/base-models", json={"name": "suite-pool-base", "config": config}).status_code == 201
    assert admin.post("/v1/eval-suites", json=suite(name="pool-suite", base_model="suite-pool-base")).status_code == 201
    assert admin.post("/v1/eval-suites", json=suite(name="other-base-suite")).status_code == 201
    pool = {"name": "with-suite", "base_model": "suite-pool-base", "max_loras": 2, "max_cpu_loras": 4,
            "max_lora_rank": 16, "dtype": "float32"}
    assert_refused(admin.post("/v1/pools", json={**pool, "required_suites": ["other-base-suite"]}),
                   422, "suite_base_mismatch", "'other-base-suite'")
    created = admin.post("/v1/pools", json={**pool, "required_suites": ["pool-suite"]})
    assert created.status_code == 201, created.text
    assert created.json()["required_suites"] == ["pool-suite"]


# Characters str.splitlines() breaks at besides "\n" and "\r": JSON escapes the control ones, but
# U+0085, U+2028 and U+2029 stay raw inside the stored JSONL's strings.
LINE_BREAKERS = ["\x85", "\u2028", "\u2029", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e"]


def test_references_with_line_separators_read_back_byte_identical(admin, base_model, engine, s3,
                                                                  monkeypatch):
    examples = [{"prompt": f"say {i}:", "reference": f"before{char}after {i}"}
                for i, char in enumerate(LINE_BREAKERS)]
    examples.append({"prompt": "all:", "reference": "".join(LINE_BREAKERS) + " end"})
    created = admin.post("/v1/eval-suites", json=suite(name="separators", examples=examples))
    assert created.status_code == 201, created.text
    assert created.json()["example_count"] == len(examples)

    # Read the way a worker does: the registry's own S3 store, checked against the digest.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", services.S3_CREDENTIALS["AWS_ACCESS_KEY_ID"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", services.S3_CREDENTIALS["AWS_SECRET_ACCESS_KEY"])
    store = S3Store(RegistrySettings(storage="s3", s3_endpoint_url=s3.url, s3_bucket=BUCKET))
    with Session(engine) as session:
        row = session.scalar(select(EvalSuite).where(EvalSuite.name == "separators"))
    read = load_examples(store, row)

    assert read == [Example(**e) for e in examples]
    assert [(e.prompt.encode(), e.reference.encode()) for e in read] == \
        [(e["prompt"].encode(), e["reference"].encode()) for e in examples]


def test_a_tenant_suite_is_its_own_and_invisible_to_other_tenants(client_for, base_model, engine, s3_client):
    """acme's uploader creates acme/faq. globex sees nothing of it: its list, a direct read (403,
    the tenant is in the path) and an evaluation request naming it (answered exactly as a suite
    that does not exist)."""
    acme, globex = client_for("acme_uploader"), client_for("globex_uploader")
    created = acme.post("/v1/eval-suites", json=suite(name="faq", tenant="acme"))

    assert created.status_code == 201, created.text
    assert (created.json()["name"], created.json()["tenant"]) == ("acme/faq", "acme")
    assert acme.get("/v1/eval-suites/acme/faq").json() == created.json()
    assert "acme/faq" in {s["name"] for s in acme.get("/v1/eval-suites").json()["items"]}
    assert "acme/faq" not in {s["name"] for s in globex.get("/v1/eval-suites").json()["items"]}
    assert_refused(globex.get("/v1/eval-suites/acme/faq"), 403, "forbidden", "not 'acme'")
    assert_refused(client_for("acme_uploader").get("/v1/eval-suites/acme/missing"), 404, "suite_not_found",
                   "'acme/missing'")


def test_another_tenants_suite_is_answered_as_one_that_does_not_exist(client_for, base_model, make_adapter):
    acme, globex = client_for("acme_uploader"), client_for("globex_uploader")
    assert acme.post("/v1/eval-suites", json=suite(name="private", tenant="acme")).status_code == 201
    folder = make_adapter(seed=191)
    parts = [("file", (name, (folder / name).read_bytes()))
             for name in ("adapter_config.json", "adapter_model.safetensors")]
    assert globex.post("/v1/adapters/globex/asker/versions", files=parts).status_code == 201

    hidden = globex.post("/v1/adapters/globex/asker/versions/1/evaluations", json={"suite": "acme/private"})
    missing = globex.post("/v1/adapters/globex/asker/versions/1/evaluations", json={"suite": "acme/absent"})

    assert_refused(hidden, 404, "suite_not_found", "eval suite 'acme/private' does not exist")
    assert hidden.json()["error"] == {**missing.json()["error"],
                                      "message": missing.json()["error"]["message"].replace("absent", "private")}


@pytest.mark.parametrize(("principal", "tenant", "status", "message"), [
    ("globex_uploader", "acme", 403, "not 'acme'"),
    ("acme_reviewer", "acme", 403, "may not do this"),
    ("serving_node", "acme", 403, "may not do this"),
    ("global_admin", "no-such-tenant", 404, "tenant 'no-such-tenant' does not exist"),
])
def test_a_tenant_suite_is_created_only_by_that_tenants_admins_and_uploaders(
        client_for, base_model, engine, s3_client, principal, tenant, status, message):
    before = stored(engine, s3_client)
    response = client_for(principal).post("/v1/eval-suites", json=suite(name=f"t-{principal}", tenant=tenant))
    assert_refused(response, status, "forbidden" if status == 403 else "tenant_not_found", message)
    assert stored(engine, s3_client) == before


def test_a_pool_requires_global_suites_only(admin, client_for, base_model):
    assert client_for("acme_admin").post("/v1/eval-suites", json=suite(name="mine", tenant="acme")).status_code == 201
    pool = {"name": "tenant-suite-pool", "base_model": "tiny-llama", "max_loras": 2, "max_cpu_loras": 4,
            "max_lora_rank": 16, "dtype": "float32", "required_suites": ["acme/mine"]}
    assert_refused(admin.post("/v1/pools", json=pool), 422, "suite_not_global",
                   "eval suite 'acme/mine' belongs to a tenant")


def test_even_a_global_admin_cannot_score_another_tenants_adapter_with_a_tenant_suite(admin, client_for, engine,
                                                                                      base_model, make_adapter):
    """The check is on the version's tenant, not the caller: acme's dataset never scores globex."""
    assert client_for("acme_uploader").post("/v1/eval-suites", json=suite(name="own", tenant="acme")).status_code == 201
    folder = make_adapter(seed=192)
    parts = [("file", (name, (folder / name).read_bytes()))
             for name in ("adapter_config.json", "adapter_model.safetensors")]
    assert client_for("globex_uploader").post("/v1/adapters/globex/scored/versions", files=parts).status_code == 201

    def evaluations() -> int:
        with Session(engine) as session:
            return session.scalar(select(func.count()).select_from(Evaluation))

    before = evaluations()
    response = admin.post("/v1/adapters/globex/scored/versions/1/evaluations", json={"suite": "acme/own"})

    assert_refused(response, 404, "suite_not_found", "eval suite 'acme/own' does not exist")
    assert evaluations() == before
