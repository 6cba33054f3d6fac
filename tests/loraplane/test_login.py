"""`loraplane login`, run as a person runs it: it prints where to sign on, the browser goes
through the real OpenID provider, the registry hands the CLI a one-time code on its loopback
address, and the CLI keeps the short-lived token it exchanged, which later commands use."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx

from tests.support.sso import authorize, confirm_cli, person, shown_code

LORAPLANE = Path(sys.executable).parent / "loraplane"


def cli_env(registry_url: str, config: Path) -> dict[str, str]:
    env = {**os.environ, "LORAPLANE_URL": registry_url, "XDG_CONFIG_HOME": str(config), "COLUMNS": "300"}
    env.pop("LORAPLANE_TOKEN", None)
    return env


def test_login_keeps_a_short_lived_token_of_the_person_that_commands_use(sso_registry, oidc_provider, tmp_path):
    person(oidc_provider.url, "lin", email="lin@example.com", groups=["acme-uploaders"])
    env = cli_env(sso_registry.url, tmp_path)
    login = subprocess.Popen([str(LORAPLANE), "login", "--no-browser", "--timeout-s", "60"], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert login.stderr.readline().startswith("Sign in with Test IdP at:")
        address = login.stderr.readline().strip()
        printed_code = login.stderr.readline().split("the code ")[1].rstrip(".\n")
        with httpx.Client() as browser:
            confirmation = browser.get(address)
            assert shown_code(confirmation) == printed_code  # the person checks it is their command
            answer = authorize(confirm_cli(browser, confirmation).headers["location"], "lin")
            handed = browser.get(answer)
            assert handed.status_code == 303 and handed.headers["location"].startswith("http://127.0.0.1:")
            assert "You are signed in to loraplane" in browser.get(handed.headers["location"]).text
        out, err = login.communicate(timeout=60)
    finally:
        login.kill()
    assert login.returncode == 0, err
    assert f"signed in to {sso_registry.url} as lin@example.com (uploader@acme" in " ".join((out + err).split())

    kept = tmp_path / "loraplane" / "credentials.json"
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    saved = json.loads(kept.read_text())[sso_registry.url]
    lifetime = datetime.fromisoformat(saved["expires_at"]) - datetime.now(UTC)
    assert timedelta(hours=11, minutes=58) < lifetime <= timedelta(hours=12)  # LORAPLANE_SSO_CLI_TOKEN_TTL_S
    whoami = subprocess.run([str(LORAPLANE), "whoami"], env=env, capture_output=True, text=True, timeout=60)
    assert whoami.returncode == 0, whoami.stderr
    assert '"role": "uploader"' in whoami.stdout and '"tenant": "acme"' in whoami.stdout

    logout = subprocess.run([str(LORAPLANE), "logout"], env=env, capture_output=True, text=True, timeout=60)
    assert logout.returncode == 0, logout.stderr
    assert "its token is revoked and forgotten" in " ".join((logout.stdout + logout.stderr).split())
    assert sso_registry.url not in json.loads(kept.read_text())
    kept_token = saved["token"]
    assert httpx.get(sso_registry.url + "/v1/whoami", headers={"Authorization": f"Bearer {kept_token}"}).status_code == 401

    code = httpx.URL(handed.headers["location"]).params["code"]
    replayed = httpx.post(sso_registry.url + "/v1/sso/token",
                          json={"exchange_code": code, "code_verifier": "v" * 64})
    assert replayed.status_code == 401
    assert replayed.json()["error"]["message"] == "this login code is unknown, used, expired, or not this CLI's"


def test_login_on_a_registry_without_sign_on_says_so(registry, tmp_path):
    refused = subprocess.run([str(LORAPLANE), "login", "--no-browser"], env=cli_env(registry.url, tmp_path),
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == 1
    said = " ".join((refused.stdout + refused.stderr).split())
    assert f"single sign-on is not configured on {registry.url}" in said
    assert not (tmp_path / "loraplane" / "credentials.json").exists()


def test_link_identity_joins_an_old_token_to_the_sign_on_as_one_person(sso_registry, oidc_provider, admin, tmp_path):
    from tests.support.nodes import issue_token
    from tests.support.sso import login_token

    person(oidc_provider.url, "noa", email="noa@example.com", groups=["acme-reviewers"])
    old = issue_token(admin, "noa-laptop", role="uploader", tenant="acme")
    (tmp_path / "old.token").write_text(old + "\n")
    env = {**cli_env(sso_registry.url, tmp_path), "LORAPLANE_TOKEN": login_token(sso_registry.url, "noa")}

    linked = subprocess.run([str(LORAPLANE), "link-identity", "--other-token-file", str(tmp_path / "old.token")],
                            env=env, capture_output=True, text=True, timeout=60)

    assert linked.returncode == 0, linked.stderr
    mine = httpx.get(sso_registry.url + "/v1/whoami", headers={"Authorization": f"Bearer {env['LORAPLANE_TOKEN']}"})
    theirs = httpx.get(sso_registry.url + "/v1/whoami", headers={"Authorization": f"Bearer {old}"})
    ids = sorted([mine.json()["identity_id"], theirs.json()["identity_id"]])
    assert f"linked as one person: identities {ids[0]}, {ids[1]}" in " ".join((linked.stdout + linked.stderr).split())
