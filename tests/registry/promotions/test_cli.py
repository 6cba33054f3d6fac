"""`loraplane promotion ...`, `loraplane plan` and `loraplane audit verify`, as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess

from tests.support.cli import LORAPLANE, cli


def test_request_approve_and_roll_back_from_the_command_line(registry, tokens, make_ready, promo_pools):
    pool = promo_pools["open"]
    make_ready("cli-bot")
    make_ready("cli-bot")

    first = cli("promotion", "request", pool, "acme/cli-bot@1", token=tokens["acme_uploader"], url=registry.url)
    assert first.returncode == 0, first.stderr
    first_id = json.loads(first.stdout)["id"]
    assert f"promotion {first_id} is awaiting_approval" in first.stderr
    own = cli("promotion", "approve", str(first_id), "--comment", "mine", token=tokens["acme_uploader"],
              url=registry.url)
    assert own.returncode == 1 and "role 'uploader' may not do this" in own.stderr
    approved = cli("promotion", "approve", str(first_id), "--comment", "evals pass",
                   token=tokens["global_admin"], url=registry.url)
    assert approved.returncode == 0 and f"promotion {first_id} is active" in approved.stderr

    second = json.loads(cli("promotion", "request", pool, "acme/cli-bot@2", token=tokens["acme_uploader"],
                            url=registry.url).stdout)
    cli("promotion", "approve", str(second["id"]), "--comment", "better", token=tokens["global_admin"],
        url=registry.url)
    rolled = cli("promotion", "rollback", pool, "acme/cli-bot", "--comment", "regressed",
                 token=tokens["global_admin"], url=registry.url)

    assert rolled.returncode == 0, rolled.stderr
    assert f"{pool}:production of acme/cli-bot now serves acme/cli-bot@1" in rolled.stderr
    again = cli("promotion", "rollback", pool, "acme/cli-bot", "--comment", "again",
                token=tokens["global_admin"], url=registry.url)
    assert again.returncode == 1 and "has no earlier version to restore" in again.stderr
    malformed = cli("promotion", "request", pool, "acme/cli-bot", token=tokens["acme_uploader"], url=registry.url)
    assert malformed.returncode == 1 and "'acme/cli-bot' is not tenant/name@N" in malformed.stderr


def test_plan_prints_the_pools_sizing(registry, tokens, promo_pools):
    tables = cli("plan", promo_pools["open"], "--gpu-hour-usd", "4", token=tokens["acme_reviewer"],
                 url=registry.url)
    as_json = cli("plan", promo_pools["open"], "--json", token=tokens["acme_reviewer"], url=registry.url)
    refused = cli("plan", promo_pools["open"], "--gpu-hour-usd", "0", token=tokens["acme_reviewer"],
                  url=registry.url)

    assert tables.returncode == 0, tables.stderr
    assert "measured" in tables.stdout and "assumed" in tables.stdout
    assert json.loads(as_json.stdout)["pool"] == promo_pools["open"]
    assert refused.returncode == 1 and "gpu_hour_usd" in refused.stderr


def test_audit_verify_against_the_registry_database(database_url):
    result = subprocess.run([LORAPLANE, "audit", "verify"], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "LORAPLANE_DATABASE_URL": database_url})
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("audit chain intact: ")
