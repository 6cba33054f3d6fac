"""`loraplane adapter ...` and `loraplane version ...` as a user runs them against the session's
registry: find adapters, retire and delete a version and an adapter, and refusals that say what
held them and what to do. The adapters are on promo-base, in a pool of this module's own."""

from __future__ import annotations

import json

import pytest

from devkit.pipeline_steps import create_suite, upload_dir
from tests.conftest import register_base
from tests.support.cli import cli

BASE = "cli-life-base"


@pytest.fixture(scope="module")
def make_version(admin, tiny_base, tmp_path_factory, client_for):
    from devkit.tiny_model import build_adapter

    register_base(admin, BASE, tiny_base)
    root, seeds = tmp_path_factory.mktemp("cli-life"), iter(range(700, 800))

    def make(name: str) -> dict:
        seed = next(seeds)
        folder = build_adapter(tiny_base, root / f"{name}-{seed}", r=8, lora_alpha=16,
                               target_modules=("q_proj", "v_proj"), seed=seed, base_model_name=BASE)
        return upload_dir(client_for("acme_uploader"), f"acme/{name}", folder)

    return make


def test_an_uploader_retires_and_deletes_from_the_cli(registry, tokens, make_version):
    def run(*args: str, token: str = tokens["acme_uploader"]):
        return cli(*args, token=token, url=registry.url)

    make_version("cli-life")
    make_version("cli-life")

    listed = run("adapter", "list", "--search", "cli-li", "--state", "active", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [a["name"] for a in json.loads(listed.stdout)] == ["cli-life"]
    assert "acme/cli-life" in run("adapter", "list", "--search", "cli-life").stdout

    retired = run("version", "retire", "acme/cli-life@1")
    assert retired.returncode == 0, retired.stderr
    assert "retired acme/cli-life@1" in retired.stderr and json.loads(retired.stdout)["state"] == "retired"
    deleted = run("version", "delete", "acme/cli-life@1")
    assert deleted.returncode == 0, deleted.stderr
    assert json.loads(deleted.stdout)["files"] == []

    retired = run("adapter", "retire", "acme/cli-life")
    assert retired.returncode == 0, retired.stderr
    assert json.loads(retired.stdout)["state"] == "retired"
    deleted = run("adapter", "delete", "acme/cli-life")
    assert deleted.returncode == 0, deleted.stderr
    assert "deleted acme/cli-life" in deleted.stderr and json.loads(deleted.stdout)["state"] == "deleted"
    gone = json.loads(run("adapter", "list", "--search", "cli-life", "--state", "deleted", "--json").stdout)
    assert [a["name"] for a in gone] == ["cli-life"]


def test_cli_refusals_say_what_holds_and_what_to_do(registry, tokens, make_version, client_for, admin):
    def run(*args: str, token: str = tokens["acme_uploader"]):
        return cli(*args, token=token, url=registry.url)

    make_version("cli-held")
    create_suite(admin, "cli-life-suite", BASE, [{"prompt": "1 =>", "reference": "one"}],
                 {"exact_match": {"min": 0.5}})
    queued = client_for("acme_uploader").post("/v1/adapters/acme/cli-held/versions/1/evaluations",
                                              json={"suite": "cli-life-suite"})
    assert queued.status_code in (200, 202), queued.text

    held = run("version", "delete", "acme/cli-held@1")
    assert held.returncode == 1
    assert (f"evaluation {queued.json()['id']} of acme/cli-held@1 has not finished "
            "(evaluations_unfinished, HTTP 409)") in held.stderr
    assert "retire the version instead" in held.stderr
    other = run("adapter", "retire", "acme/cli-held", token=tokens["globex_uploader"])
    assert other.returncode == 1 and "this token belongs to tenant 'globex', not 'acme'" in other.stderr
    wrong = run("version", "retire", "acme/cli-held")
    assert wrong.returncode == 1 and "'acme/cli-held' is not a version (tenant/name@N)" in wrong.stderr
    versioned = run("adapter", "delete", "acme/cli-held@1")
    assert versioned.returncode == 1 and "loraplane version retire|delete" in versioned.stderr
    assert client_for("acme_uploader").get("/v1/adapters/acme/cli-held/versions/1").json()["state"] == "evaluating"
