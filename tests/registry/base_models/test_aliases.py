"""A base's aliases change after registration: a global admin adds the name adapters' configs
give as base_model_name_or_path, or removes one, through the API or `loraplane base-model alias`.
A name points at one base only, and every change is audited."""

from __future__ import annotations

import json
import secrets
import shutil
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from registry.tables import AuditEvent
from tests.support.asserts import assert_refused
from tests.support.cli import cli


@pytest.fixture(scope="module")
def base(admin, tiny_base) -> str:
    """A base of this module's own, with one alias to start from."""
    name = f"alias-base-{secrets.token_hex(3)}"
    config = json.loads((tiny_base / "config.json").read_text())
    response = admin.post("/v1/base-models", json={"name": name, "config": config,
                                                   "aliases": [f"/models/{name}"]})
    assert response.status_code == 201, response.text
    return name


def aliases(admin: httpx.Client, base: str) -> list[str]:
    response = admin.get(f"/v1/base-models/{base}")
    assert response.status_code == 200, response.text
    return response.json()["aliases"]


def events(engine, action: str, base: str) -> list[AuditEvent]:
    with Session(engine) as session:
        return list(session.scalars(select(AuditEvent).where(
            AuditEvent.action == action, AuditEvent.subject == f"base-model/{base}").order_by(AuditEvent.id)))


def audit_total(engine) -> int:
    with Session(engine) as session:
        return session.scalar(select(func.count()).select_from(AuditEvent)) or 0


def adapter_naming(make_adapter, tmp_path: Path, claimed: str) -> Path:
    """The tiny base's adapter, its config naming the base `claimed`."""
    folder = tmp_path / "adapter"
    shutil.copytree(make_adapter(seed=71), folder)
    config = json.loads((folder / "adapter_config.json").read_text())
    (folder / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": claimed}))
    return folder


def upload(client: httpx.Client, adapter: str, folder: Path) -> httpx.Response:
    files = [("file", (n, (folder / n).read_bytes())) for n in ("adapter_config.json", "adapter_model.safetensors")]
    return client.post(f"/v1/adapters/{adapter}/versions", files=files)


def test_an_added_alias_lets_uploads_name_the_base_and_a_removed_one_no_longer(
        admin, uploader, engine, base, make_adapter, tmp_path):
    hub_id = f"acme-research/{base}-v2"
    folder = adapter_naming(make_adapter, tmp_path, hub_id)

    unknown = upload(uploader, "acme/alias-bot", folder)
    assert_refused(unknown, 422, "unknown_base_model", f"{hub_id!r} is not a registered base model")
    assert f"loraplane base-model alias add BASE {hub_id!r}" in unknown.json()["error"]["hint"]
    wrong = uploader.post("/v1/adapters/acme/alias-bot/versions", data={"base_model": base}, files=[
        ("file", (n, (folder / n).read_bytes())) for n in ("adapter_config.json", "adapter_model.safetensors")])
    assert_refused(wrong, 422, "wrong_base_model", f"does not match the target base model {base!r}")
    assert f"loraplane base-model alias add {base} {hub_id!r}" in wrong.json()["error"]["hint"]

    added = admin.post(f"/v1/base-models/{base}/aliases", json={"alias": hub_id})
    assert added.status_code == 201, added.text
    assert added.json()["aliases"] == sorted([f"/models/{base}", hub_id])
    assert aliases(admin, base) == sorted([f"/models/{base}", hub_id])
    (event,) = events(engine, "base_model.alias.add", base)
    assert event.before == {"aliases": [f"/models/{base}"]}
    assert event.after == {"aliases": sorted([f"/models/{base}", hub_id])}
    assert event.actor.startswith("global_admin")

    again = admin.post(f"/v1/base-models/{base}/aliases", json={"alias": hub_id})
    assert again.status_code == 200 and again.json()["aliases"] == added.json()["aliases"]
    assert len(events(engine, "base_model.alias.add", base)) == 1  # nothing changed, nothing audited

    stored = upload(uploader, "acme/alias-bot", folder)
    assert stored.status_code == 201, stored.text
    assert stored.json()["base_model"] == base

    removed = admin.delete(f"/v1/base-models/{base}/aliases/{hub_id}")
    assert removed.status_code == 200, removed.text
    assert removed.json()["aliases"] == [f"/models/{base}"] == aliases(admin, base)
    (event,) = events(engine, "base_model.alias.remove", base)
    assert event.before == {"aliases": sorted([f"/models/{base}", hub_id])}
    assert event.after == {"aliases": [f"/models/{base}"]}
    # The version uploaded under the alias keeps its base; a new upload naming it is refused.
    assert uploader.get("/v1/adapters/acme/alias-bot/versions/1").json()["base_model"] == base
    other = adapter_naming(make_adapter, tmp_path / "again", hub_id)
    assert_refused(upload(uploader, "acme/alias-bot", other), 422, "unknown_base_model", repr(hub_id))


def test_aliases_with_slashes_even_aliases_inside_them_are_removed_exactly(admin, base):
    tricky = [f"/mnt/aliases/{base}", f"org/{base}", f"{base}/aliases/x", "with space?and#hash%20"]
    for alias in tricky:
        added = admin.post(f"/v1/base-models/{base}/aliases", json={"alias": alias})
        assert added.status_code == 201, added.text
    for alias in tricky:
        response = admin.delete(f"/v1/base-models/{base}/aliases/" + quote(alias, safe="/"))
        assert response.status_code == 200, (alias, response.text)
        assert alias not in response.json()["aliases"]
    assert aliases(admin, base) == [f"/models/{base}"]


@pytest.mark.parametrize(("alias", "status", "code", "message"), [
    ("tiny-llama", 409, "alias_taken", "'tiny-llama' is already the name of base model 'tiny-llama'"),
    ("TINY_BASE_ALIAS", 409, "alias_taken", "is already an alias of base model 'tiny-llama'"),
    ("OWN_NAME", 409, "alias_taken", "is already the name of base model"),
    ("   ", 422, "invalid_alias", "alias '   ' is not valid"),
    # A URL path cannot carry them: such an alias could never be removed again.
    ("..", 422, "invalid_alias", "alias '..' is not valid: it names no model"),
    (".", 422, "invalid_alias", "alias '.' is not valid: it names no model"),
    ("x" * 201, 422, "invalid_request", "body.alias: String should have at most 200 characters"),
    ("", 422, "invalid_request", "body.alias: String should have at least 1 character"),
])
def test_an_alias_that_names_another_base_or_is_malformed_is_refused_and_nothing_changes(
        admin, engine, base, base_model, tiny_base, alias, status, code, message):
    alias = {"TINY_BASE_ALIAS": str(tiny_base), "OWN_NAME": base}.get(alias, alias)
    before, theirs, audited = aliases(admin, base), aliases(admin, base_model), audit_total(engine)

    assert_refused(admin.post(f"/v1/base-models/{base}/aliases", json={"alias": alias}), status, code, message)

    assert (aliases(admin, base), aliases(admin, base_model), audit_total(engine)) == (before, theirs, audited)


def test_no_one_but_a_global_admin_changes_aliases_nor_removes_another_bases(
        admin, client_for, engine, base, base_model, tiny_base):
    before, theirs, audited = aliases(admin, base), aliases(admin, base_model), audit_total(engine)

    for principal in ("acme_admin", "acme_uploader", "serving_node"):
        client = client_for(principal)
        assert_refused(client.post(f"/v1/base-models/{base}/aliases", json={"alias": "mine"}), 403,
                       "forbidden", "global admin")
        assert_refused(client.delete(f"/v1/base-models/{base}/aliases/models/{base}"), 403, "forbidden",
                       "global admin")
    # Another base's alias is not this base's to remove: tiny-llama keeps its own.
    assert_refused(admin.delete(f"/v1/base-models/{base}/aliases/{tiny_base}"), 404, "alias_not_found",
                   f"base model {base!r} has no alias {str(tiny_base)!r}")
    assert_refused(admin.delete(f"/v1/base-models/{base}/aliases/never-added"), 404, "alias_not_found",
                   "has no alias 'never-added'")
    assert_refused(admin.post("/v1/base-models/no-such-base/aliases", json={"alias": "x"}), 404,
                   "base_model_not_found", "'no-such-base' does not exist")
    assert_refused(admin.delete("/v1/base-models/no-such-base/aliases/x"), 404, "base_model_not_found",
                   "'no-such-base' does not exist")

    assert (aliases(admin, base), aliases(admin, base_model), audit_total(engine)) == (before, theirs, audited)


def test_loraplane_base_model_alias_add_and_remove(registry, tokens, admin, engine, base, base_model):
    alias = f"/checkpoints/{base}/final"

    def run(*args: str, token: str = tokens["global_admin"]):
        return cli("base-model", "alias", *args, token=token, url=registry.url)

    added = run("add", base, alias)
    assert added.returncode == 0, added.stderr
    assert f"base model {base} is also known as {alias!r}" in added.stderr
    printed = json.loads(added.stdout)
    assert alias in printed["aliases"] and "modules" not in printed
    assert alias in aliases(admin, base)

    audited = audit_total(engine)
    taken = run("add", base, "tiny-llama")
    assert taken.returncode == 1
    assert "'tiny-llama' is already the name of base model 'tiny-llama' (alias_taken, HTTP 409)" in taken.stderr
    not_admin = run("add", base, "another", token=tokens["acme_admin"])
    assert not_admin.returncode == 1 and "HTTP 403" in not_admin.stderr
    assert alias in aliases(admin, base) and "another" not in aliases(admin, base)
    assert audit_total(engine) == audited

    # A '..' in an alias stays in it: the command never resolves it into another endpoint's path.
    dotted = "../../../webhooks/1"
    assert run("add", base, dotted).returncode == 0 and dotted in aliases(admin, base)
    assert run("remove", base, dotted).returncode == 0 and dotted not in aliases(admin, base)

    removed = run("remove", base, alias)
    assert removed.returncode == 0, removed.stderr
    assert f"base model {base} is no longer known as {alias!r}" in removed.stderr
    assert alias not in aliases(admin, base)
    missing = run("remove", base, alias)
    assert missing.returncode == 1 and "(alias_not_found, HTTP 404)" in missing.stderr
