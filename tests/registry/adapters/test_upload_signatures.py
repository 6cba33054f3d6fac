"""Uploads signed with model-signing: verified against the tenant's keys, kept with the version;
every bad, foreign or missing signature refused with nothing stored."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import tarfile
from datetime import UTC, datetime, timedelta

import pytest

from registry.adapters.artifact import blob_key
from signed_digests.digests import manifest_digest
from tests.conftest import BUCKET
from tests.registry.signing_keys_support import (
    add_key, new_key, new_tenant, peft_files, sign, upload,
)
from tests.support.asserts import assert_refused

CONFIG, WEIGHTS, SIG = "adapter_config.json", "adapter_model.safetensors", "model.sig"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module")
def signer(engine, client_with, base_model):
    """A tenant with one signing key, and the private half its team signs with."""
    tenant = new_tenant(engine, client_with, "signed")
    key = new_key()
    record = add_key(tenant.admin, tenant.name, "team-a", key)
    return tenant, key, record


@pytest.fixture(scope="module")
def unsigned_adapter(make_adapter):
    """An adapter no test stores: every refusal below uploads it, so a stray blob would show."""
    return peft_files(make_adapter(seed=181))


def test_a_signed_upload_is_verified_and_its_signature_kept_as_a_file(
        signer, make_adapter, tmp_path, s3_client, stored_state):
    tenant, key, record = signer
    files = peft_files(make_adapter(seed=182))
    signature = sign(files, key, tmp_path)
    before = stored_state()

    response = upload(tenant.uploader, f"{tenant.name}/bot", {**files, SIG: signature})

    assert response.status_code == 201, response.text
    version = response.json()
    kept = version["upload_signature"]
    assert {k: v for k, v in kept.items() if k != "verified_at"} == {
        "file": SIG, "sha256": sha256(signature), "key_name": "team-a",
        "key_fingerprint": record["fingerprint"]}
    age = datetime.now(UTC) - datetime.fromisoformat(kept["verified_at"])
    assert timedelta(0) <= age < timedelta(minutes=1)
    assert version["files"] == [{"name": name, "sha256": sha256(data), "size": len(data)}
                                for name, data in {**files, SIG: signature}.items()]
    assert version["digest"] == manifest_digest(version["files"])  # the digest covers model.sig
    stored = s3_client.get_object(Bucket=BUCKET, Key=blob_key(sha256(signature)))["Body"].read()
    assert stored == signature
    read_back = tenant.uploader.get(f"/v1/adapters/{tenant.name}/bot/versions/1").json()
    assert read_back["upload_signature"] == kept
    event = tenant.admin.get("/v1/audit", params={"action": "adapter_version.upload",
                                                  "subject": f"{tenant.name}/bot@1"}).json()["items"][0]
    assert event["after"]["upload_signature"]["key_fingerprint"] == record["fingerprint"]
    after = stored_state()
    assert after["adapter_versions"] == before["adapter_versions"] + 1
    kept_blobs = {blob_key(sha256(d)) for d in (*files.values(), signature)}
    assert kept_blobs <= set(after["s3_keys"])  # the config may be shared with earlier versions
    assert set(after["s3_keys"]) - set(before["s3_keys"]) <= kept_blobs


def test_a_signature_inside_an_archive_is_verified_the_same(signer, make_adapter, tmp_path):
    tenant, key, record = signer
    files = peft_files(make_adapter(seed=183))
    signature = sign(files, key, tmp_path)
    first = upload(tenant.uploader, f"{tenant.name}/packed", {**files, SIG: signature})
    assert first.status_code == 201, first.text

    packed = upload(tenant.uploader, f"{tenant.name}/packed",
                    {"adapter.tar.gz": tar_gz({**files, SIG: signature}, prefix="my-adapter/")})

    assert packed.status_code == 200, packed.text  # the same three files: the same version
    assert packed.json()["digest"] == first.json()["digest"]
    assert packed.json()["upload_signature"]["key_name"] == "team-a"


def tampered(files, key, tmp_path, make_adapter):
    """Signed, then the weights swapped for another valid adapter's of the same shape."""
    signature = sign(files, key, tmp_path)
    other = peft_files(make_adapter(seed=184))[WEIGHTS]
    return ({**files, WEIGHTS: other, SIG: signature},
            f"{WEIGHTS} has sha256 {sha256(other)}, but {SIG} signs {sha256(files[WEIGHTS])}")


def forged(files, key, tmp_path, make_adapter):
    """A real signature whose payload is edited to sign other weights: the manifest inside is
    consistent, only the signature no longer covers it."""
    other = peft_files(make_adapter(seed=184))[WEIGHTS]
    bundle = json.loads(sign(files, key, tmp_path))
    payload = json.loads(base64.b64decode(bundle["dsseEnvelope"]["payload"]))
    for resource in payload["predicate"]["resources"]:
        if resource["name"] == WEIGHTS:
            resource["digest"] = sha256(other)
    resources = payload["predicate"]["resources"]
    root = hashlib.sha256(b"".join(bytes.fromhex(r["digest"]) for r in resources))
    payload["subject"][0]["digest"]["sha256"] = root.hexdigest()
    bundle["dsseEnvelope"]["payload"] = base64.b64encode(json.dumps(payload).encode()).decode()
    return ({**files, WEIGHTS: other, SIG: json.dumps(bundle).encode()},
            f"the signature in {SIG} does not verify with signing key 'team-a' of tenant '{{tenant}}'")


def by_another_key(files, key, tmp_path, make_adapter):
    return ({**files, SIG: sign(files, new_key(), tmp_path)},
            f"{SIG} was signed by a key that is not one of the signing keys of tenant '{{tenant}}'")


def listing_an_extra_file(files, key, tmp_path, make_adapter):
    signature = sign({**files, "README.md": b"# bot\n"}, key, tmp_path)
    return ({**files, SIG: signature},
            f"{SIG} does not match the uploaded files: it lists README.md, which is not one of the "
            f"uploaded adapter files ({CONFIG}, {WEIGHTS})")


def missing_a_file(files, key, tmp_path, make_adapter):
    signature = sign({CONFIG: files[CONFIG]}, key, tmp_path)
    return ({**files, SIG: signature},
            f"{SIG} does not match the uploaded files: it does not list {WEIGHTS}")


def sharded(files, key, tmp_path, make_adapter):
    from model_signing.hashing import Config

    signature = sign(files, key, tmp_path, hashing=Config().use_shard_serialization())
    return ({**files, SIG: signature},
            f"{SIG} digests the files by shards/sha256; the registry verifies whole-file sha256 digests")


def not_a_bundle(files, key, tmp_path, make_adapter):
    return {**files, SIG: b"not a signature"}, f"{SIG} is not a model-signing bundle (JSONDecodeError"


# (id, build(files, key, tmp_path, make_adapter) -> (parts, message))
BAD_SIGNATURES = {"tampered_after_signing": tampered, "payload_forged": forged,
                  "signed_by_another_key": by_another_key, "lists_an_extra_file": listing_an_extra_file,
                  "misses_a_file": missing_a_file, "sharded_digests": sharded,
                  "not_a_bundle": not_a_bundle}


@pytest.mark.parametrize("build", BAD_SIGNATURES.values(), ids=BAD_SIGNATURES.keys())
def test_a_bad_signature_is_refused_and_nothing_stored(
        signer, unsigned_adapter, make_adapter, tmp_path, stored_state, build):
    tenant, key, _ = signer
    parts, message = build(unsigned_adapter, key, tmp_path, make_adapter)
    before = stored_state()

    response = upload(tenant.uploader, f"{tenant.name}/refused", parts)

    assert_refused(response, 422, "bad_upload_signature", message.replace("{tenant}", tenant.name))
    assert response.json()["error"]["hint"]
    assert_nothing_stored(tenant, before, stored_state())


def test_a_signature_larger_than_its_bound_is_refused_before_it_is_read(
        signer, unsigned_adapter, stored_state):
    tenant, _, _ = signer
    before = stored_state()

    response = upload(tenant.uploader, f"{tenant.name}/refused",
                      {**unsigned_adapter, SIG: b"{" + b" " * 64 * 1024 + b"}"})

    assert_refused(response, 413, "signature_too_large", f"{SIG} is larger than 65536 bytes")
    assert_nothing_stored(tenant, before, stored_state())


def test_a_signature_is_refused_when_the_tenant_has_no_keys(
        engine, client_with, base_model, unsigned_adapter, tmp_path, stored_state):
    tenant = new_tenant(engine, client_with, "keyless")
    parts = {**unsigned_adapter, SIG: sign(unsigned_adapter, new_key(), tmp_path)}
    before = stored_state()

    response = upload(tenant.uploader, f"{tenant.name}/refused", parts)

    assert_refused(response, 422, "no_signing_keys",
                   f"{SIG} was sent, but tenant '{tenant.name}' has no signing keys to verify it with")
    assert "loraplane signing-key add" in response.json()["error"]["hint"]
    assert_nothing_stored(tenant, before, stored_state())


def test_an_unsigned_upload_is_refused_when_the_tenant_requires_signatures(
        engine, client_with, base_model, unsigned_adapter, stored_state):
    tenant = new_tenant(engine, client_with, "strict")
    add_key(tenant.admin, tenant.name, "team-a", new_key())
    policy = tenant.admin.put(f"/v1/tenants/{tenant.name}/signing-policy",
                              json={"require_signed_uploads": True})
    assert policy.status_code == 200, policy.text
    before = stored_state()

    response = upload(tenant.uploader, f"{tenant.name}/refused", unsigned_adapter)

    assert_refused(response, 422, "unsigned_upload",
                   f"tenant '{tenant.name}' requires signed uploads, and this upload has no {SIG}")
    assert "model_signing sign key" in response.json()["error"]["hint"]
    assert_nothing_stored(tenant, before, stored_state())


def test_a_signature_by_a_revoked_key_is_refused(engine, client_with, base_model,
                                                  unsigned_adapter, tmp_path, stored_state):
    tenant = new_tenant(engine, client_with, "revoked")
    key = new_key()
    add_key(tenant.admin, tenant.name, "old", key)
    assert tenant.admin.post(f"/v1/tenants/{tenant.name}/signing-keys/old/revoke").status_code == 200
    add_key(tenant.admin, tenant.name, "new", new_key())
    parts = {**unsigned_adapter, SIG: sign(unsigned_adapter, key, tmp_path)}
    before = stored_state()

    response = upload(tenant.uploader, f"{tenant.name}/refused", parts)

    assert_refused(response, 422, "bad_upload_signature",
                   f"{SIG} was signed by a key that is not one of the signing keys of tenant "
                   f"'{tenant.name}'")
    assert_nothing_stored(tenant, before, stored_state())


def assert_nothing_stored(tenant, before: dict, after: dict) -> None:
    assert after == before  # no adapter or version row, no audit event, no blob
    missing = tenant.uploader.get(f"/v1/adapters/{tenant.name}/refused/versions")
    assert_refused(missing, 404, "adapter_not_found", f"adapter {tenant.name}/refused does not exist")
    assert tenant.uploader.get("/readyz").status_code == 200


def tar_gz(files: dict[str, bytes], prefix: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(prefix + name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_the_cli_sends_the_signature_a_team_wrote_into_the_adapter_folder(signer, make_adapter,
                                                                           tmp_path, registry):
    from tests.support.cli import cli

    tenant, key, record = signer
    folder = tmp_path / "signed-folder"
    files = peft_files(make_adapter(seed=184))
    folder.mkdir()
    for name, data in files.items():
        (folder / name).write_bytes(data)
    (folder / SIG).write_bytes(sign(files, key, tmp_path))  # where `model_signing sign` puts it

    token = tenant.uploader.headers["Authorization"].removeprefix("Bearer ")
    pushed = cli("push", str(folder), "--adapter", f"{tenant.name}/cli-signed", "--quiet",
                 token=token, url=registry.url)

    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    version = tenant.uploader.get(f"/v1/adapters/{tenant.name}/cli-signed/versions/1").json()
    assert version["upload_signature"]["key_fingerprint"] == record["fingerprint"]
    assert SIG in [f["name"] for f in version["files"]]
