"""`loraplane tenant ...`, run as a user runs it against the session's registry with a global
admin's token: create, list, show, rename, quota, disable and enable, and errors that say what
to do. The tenants are this module's own."""

from __future__ import annotations

import json
import secrets

import httpx

from tests.support.asserts import assert_refused
from tests.support.cli import cli
from tests.support.nodes import issue_token


def test_a_global_admin_manages_a_tenant_from_the_cli(registry, tokens, admin):
    name = f"cli-{secrets.token_hex(3)}"
    admin_token = tokens["global_admin"]

    def run(*args: str, token: str = admin_token):
        return cli("tenant", *args, token=token, url=registry.url)

    created = run("create", name, "--display-name", "CLI Team", "--max-suites", "4")
    assert created.returncode == 0, created.stderr
    assert f"created tenant {name}" in created.stderr
    body = json.loads(created.stdout)
    assert body["display_name"] == "CLI Team" and body["quotas"]["max_suites"]["effective"] == 4

    listed = run("list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert name in {t["name"] for t in json.loads(listed.stdout)}
    table = run("list")
    assert name in table.stdout and "4 (own)" in table.stdout

    renamed = run("rename", name, "CLI Team Two")
    assert renamed.returncode == 0, renamed.stderr
    assert json.loads(renamed.stdout)["display_name"] == "CLI Team Two"
    assert json.loads(run("show", name).stdout)["name"] == name  # the slug stays

    quota = run("quota", name, "--max-suites", "default", "--max-waiting-evaluations", "9")
    assert quota.returncode == 0, quota.stderr
    quotas = json.loads(quota.stdout)["quotas"]
    assert quotas["max_suites"]["own"] is None and quotas["max_waiting_evaluations"]["effective"] == 9

    member = issue_token(admin, "cli-member", role="uploader", tenant=name)
    member_headers = {"Authorization": f"Bearer {member}"}
    disabled = run("disable", name)
    assert disabled.returncode == 0, disabled.stderr
    assert f"tenant {name} is disabled" in disabled.stderr
    assert_refused(httpx.get(registry.url + "/v1/whoami", headers=member_headers), 401,
                   "tenant_disabled", f"tenant '{name}' is disabled")
    # The member's own CLI says why, and what to do.
    refused = cli("whoami", token=member, url=registry.url)
    assert refused.returncode == 1
    assert f"tenant '{name}' is disabled" in refused.stderr
    assert f"loraplane tenant enable {name}" in refused.stderr

    enabled = run("enable", name)
    assert enabled.returncode == 0, enabled.stderr
    assert httpx.get(registry.url + "/v1/whoami", headers=member_headers).status_code == 200


def test_tenant_cli_errors_say_what_and_how_to_fix(registry, tokens):
    def run(*args: str, token: str = tokens["global_admin"]):
        return cli("tenant", *args, token=token, url=registry.url)

    bad = run("create", "Not A Slug")
    assert bad.returncode == 1
    assert "invalid tenant name 'Not A Slug'" in bad.stderr and "hint:" in bad.stderr
    missing = run("show", f"nobody-{secrets.token_hex(3)}")
    assert missing.returncode == 1 and "does not exist (tenant_not_found, HTTP 404)" in missing.stderr
    nothing = run("quota", "acme")
    assert nothing.returncode == 1 and "give --max-waiting-evaluations or --max-suites" in nothing.stderr
    not_a_number = run("quota", "acme", "--max-suites", "lots")
    assert not_a_number.returncode == 1 and "--max-suites must be a number or 'default'" in not_a_number.stderr
    not_allowed = run("disable", "globex", token=tokens["acme_admin"])
    assert not_allowed.returncode == 1 and "it needs a global admin" in not_allowed.stderr
    assert "--max-waiting-evaluations" in run("quota", "--help").stdout
