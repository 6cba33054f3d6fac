"""Real PEFT adapters are accepted, parsed correctly, stored by content and readable back."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import zipfile
from pathlib import Path

import httpx

from registry.adapters.artifact import blob_key
from tests.conftest import BUCKET


def upload(client: httpx.Client, adapter: str, files: list[tuple[str, bytes]], **data) -> httpx.Response:
    parts = [("file", (name, content)) for name, content in files]
    return client.post(f"/v1/adapters/{adapter}/versions", files=parts, data=data)


def peft_files(folder: Path) -> list[tuple[str, bytes]]:
    return [(name, (folder / name).read_bytes())
            for name in ("adapter_config.json", "adapter_model.safetensors")]


def test_real_peft_adapter_is_accepted_with_rank_and_targets_parsed(
        uploader, base_model, make_adapter, s3_client, stored_state):
    folder = make_adapter(seed=11, r=16, lora_alpha=32, target_modules=("q_proj", "k_proj", "down_proj"))
    before = stored_state()

    response = upload(uploader, "acme/parsed", peft_files(folder))

    assert response.status_code == 201, response.text
    version = response.json()
    assert version["served_name"] == "acme/parsed@1"
    assert version["rank"] == 16
    assert version["lora_alpha"] == 32
    assert version["target_modules"] == ["down_proj", "k_proj", "q_proj"]
    assert version["tensor_count"] == 2 * 3 * 2  # A and B, three modules, two layers
    assert version["dtype"] == "F32"
    assert version["uploaded_by"] == "acme_uploader"
    assert version["state"] == "validated"
    files = {entry["name"]: entry for entry in version["files"]}
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        content = (folder / name).read_bytes()
        assert files[name] == {"name": name, "sha256": hashlib.sha256(content).hexdigest(),
                               "size": len(content)}
        stored = s3_client.get_object(Bucket=BUCKET, Key=blob_key(files[name]["sha256"]))["Body"].read()
        assert stored == content
    canonical = json.dumps(version["files"], sort_keys=True, separators=(",", ":")).encode()
    assert version["digest"] == hashlib.sha256(canonical).hexdigest()
    assert version["size_bytes"] == sum(entry["size"] for entry in version["files"])
    after = stored_state()
    assert after["adapter_versions"] == before["adapter_versions"] + 1
    assert after["audit_events"] == before["audit_events"] + 1
    assert set(after["s3_keys"]) - set(before["s3_keys"]) == {blob_key(f["sha256"]) for f in files.values()}


def test_identical_bytes_return_the_existing_version_in_any_packaging(uploader, base_model, make_adapter,
                                                                       stored_state):
    folder = make_adapter(seed=12)
    first = upload(uploader, "acme/same-bytes", peft_files(folder))
    assert first.status_code == 201
    before = stored_state()

    again = upload(uploader, "acme/same-bytes", peft_files(folder))
    as_tar = upload(uploader, "acme/same-bytes", [("adapter.tar.gz", _tar_gz(folder))])
    as_zip = upload(uploader, "acme/same-bytes", [("adapter.zip", _zip(folder, prefix="my-adapter/"))])

    for response in (again, as_tar, as_zip):
        assert response.status_code == 200, response.text
        assert response.json()["number"] == 1
        assert response.json()["digest"] == first.json()["digest"]
    assert stored_state() == before


def test_new_bytes_get_the_next_version_number(uploader, base_model, make_adapter):
    first = upload(uploader, "acme/numbered", peft_files(make_adapter(seed=13)))
    second = upload(uploader, "acme/numbered", peft_files(make_adapter(seed=14)))
    assert (first.status_code, second.status_code) == (201, 201)
    assert (first.json()["number"], second.json()["number"]) == (1, 2)
    assert second.json()["served_name"] == "acme/numbered@2"


def test_patterns_that_agree_with_r_and_alpha_are_accepted(uploader, base_model, make_adapter):
    """Patterns that repeat r and lora_alpha change nothing: every module has the config's rank."""
    folder = make_adapter(seed=15, r=8, lora_alpha=16, target_modules=("q_proj", "v_proj"))
    config = json.loads((folder / "adapter_config.json").read_text())
    config["rank_pattern"], config["alpha_pattern"] = {"q_proj": 8}, {"v_proj": 16}
    accepted = upload(uploader, "acme/patterned", [
        ("adapter_config.json", json.dumps(config).encode()),
        ("adapter_model.safetensors", (folder / "adapter_model.safetensors").read_bytes())])
    assert accepted.status_code == 201, accepted.text
    assert accepted.json()["rank"] == 8


def test_explicit_base_model_and_alias_resolution(uploader, base_model, make_adapter, tiny_base):
    folder = make_adapter(seed=16)
    config = json.loads((folder / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = str(tiny_base)  # a registered alias
    response = upload(uploader, "acme/by-alias", [
        ("adapter_config.json", json.dumps(config).encode()),
        ("adapter_model.safetensors", (folder / "adapter_model.safetensors").read_bytes())],
        base_model=base_model)
    assert response.status_code == 201, response.text
    assert response.json()["base_model"] == base_model


def test_read_api_lists_filters_paginates_and_presigns(uploader, client_for, base_model, make_adapter):
    for seed in (21, 22, 23):
        assert upload(uploader, "acme/listed", peft_files(make_adapter(seed=seed))).status_code == 201

    page = uploader.get("/v1/adapters/acme/listed/versions", params={"limit": 2}).json()
    assert [v["number"] for v in page["items"]] == [1, 2]
    rest = uploader.get("/v1/adapters/acme/listed/versions",
                        params={"limit": 2, "cursor": page["next_cursor"]}).json()
    assert [v["number"] for v in rest["items"]] == [3] and rest["next_cursor"] is None
    assert uploader.get("/v1/adapters/acme/listed/versions", params={"state": "evaluating"}).json()[
        "items"] == []

    adapters = client_for("acme_reviewer").get("/v1/adapters", params={"base_model": base_model}).json()
    assert "listed" in {a["name"] for a in adapters["items"]}
    assert {a["tenant"] for a in adapters["items"]} == {"acme"}
    assert uploader.get("/v1/adapters/acme/listed").json()["latest_version"] == 3

    download = client_for("acme_reviewer").get("/v1/adapters/acme/listed/versions/2/download").json()
    assert download["digest"] == uploader.get("/v1/adapters/acme/listed/versions/2").json()["digest"]
    for entry in download["files"]:
        fetched = httpx.get(entry["url"])
        assert fetched.status_code == 200
        assert hashlib.sha256(fetched.content).hexdigest() == entry["sha256"]
        assert len(fetched.content) == entry["size"]

    missing = uploader.get("/v1/adapters/acme/listed/versions/9")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "version_not_found"


def _tar_gz(folder: Path) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name in ("adapter_config.json", "adapter_model.safetensors", "README.md"):
            tar.add(folder / name, arcname=name)
    return buffer.getvalue()


def _zip(folder: Path, prefix: str = "") -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in ("adapter_config.json", "adapter_model.safetensors"):
            archive.write(folder / name, arcname=prefix + name)
    return buffer.getvalue()


def test_declared_weights_digest_streams_to_storage_and_is_checked(uploader, base_model, make_adapter,
                                                                  s3_client, stored_state):
    folder = make_adapter(seed=17)
    weights = (folder / "adapter_model.safetensors").read_bytes()
    sha = hashlib.sha256(weights).hexdigest()
    before = stored_state()

    wrong = upload(uploader, "acme/declared", peft_files(folder), weights_sha256="0" * 64)

    assert wrong.status_code == 422
    assert wrong.json()["error"]["code"] == "digest_mismatch"
    assert f"has sha256 {sha}, but the upload declared {'0' * 64}" in wrong.json()["error"]["message"]
    assert stored_state() == before
    assert s3_client.list_multipart_uploads(Bucket=BUCKET).get("Uploads", []) == []

    right = upload(uploader, "acme/declared", peft_files(folder), weights_sha256=sha)

    assert right.status_code == 201, right.text
    assert s3_client.get_object(Bucket=BUCKET, Key=blob_key(sha))["Body"].read() == weights
    assert s3_client.list_multipart_uploads(Bucket=BUCKET).get("Uploads", []) == []


def test_a_refused_streamed_upload_leaves_no_object_and_no_open_upload(uploader, base_model, make_adapter,
                                                                      s3_client, stored_state):
    folder = make_adapter(seed=18)
    config = json.loads((folder / "adapter_config.json").read_text())
    config["use_dora"] = True
    weights = (folder / "adapter_model.safetensors").read_bytes()
    before = stored_state()

    response = upload(uploader, "acme/streamed-refusal",
                      [("adapter_config.json", json.dumps(config).encode()),
                       ("adapter_model.safetensors", weights)],
                      weights_sha256=hashlib.sha256(weights).hexdigest())

    assert response.status_code == 422
    assert response.json()["error"]["code"] == "dora_unsupported"
    assert stored_state() == before
    assert s3_client.list_multipart_uploads(Bucket=BUCKET).get("Uploads", []) == []
