"""The tenants page in real Chromium: a global admin creates a tenant, renames it, sets its
quotas, disables and enables it, and sees a refusal with its reason; everyone else gets 403 and
no link to it. Disabling a tenant ends its members' dashboard sessions too."""

from __future__ import annotations

import re
import secrets

import httpx
from playwright.sync_api import expect

from devkit.units_of_work import unit_of_work
from registry.auth.principal import Role
from registry.tokens import issuing as token_service
from tests.web.conftest import shoot
from tests.web.test_review import web_session


def test_a_global_admin_manages_tenants_on_the_page(open_as, registry, admin, engine, screenshots):
    name = f"web-{secrets.token_hex(3)}"
    page = open_as("global_admin")
    page.get_by_role("link", name="Tenants").click()
    expect(page).to_have_url(re.compile(r".*/ui/tenants$"))
    expect(page.get_by_role("heading", name="Tenants", exact=True)).to_be_visible()

    page.get_by_label("Name (slug, never changes)").fill(name)
    page.get_by_label("Display name", exact=True).fill("Web Team")
    page.get_by_label("Max eval suites").fill("5")
    page.get_by_role("button", name="Create tenant").click()

    expect(page.get_by_role("status")).to_have_text(f"Saved tenant {name}.")
    row = page.locator(f"#tenant-{name}")
    expect(row.get_by_label(f"Display name of {name}")).to_have_value("Web Team")
    expect(row.locator(f"#suites-{name}")).to_have_value("5")
    assert admin.get(f"/v1/tenants/{name}").json()["quotas"]["max_suites"]["own"] == 5

    row.get_by_label(f"Display name of {name}").fill("Web Team Renamed")
    row.get_by_role("button", name=f"Rename {name}").click()
    expect(page.get_by_role("status")).to_have_text(f"Saved tenant {name}.")
    row = page.locator(f"#tenant-{name}")
    expect(row.get_by_label(f"Display name of {name}")).to_have_value("Web Team Renamed")

    row.locator(f"#suites-{name}").fill("")  # back to the deployment default
    row.locator(f"#waiting-{name}").fill("3")
    row.get_by_role("button", name=f"Save quotas of {name}").click()
    row = page.locator(f"#tenant-{name}")
    expect(row).to_contain_text("Waiting evaluations (applies: 3)")
    quotas = admin.get(f"/v1/tenants/{name}").json()["quotas"]
    assert quotas["max_suites"]["own"] is None and quotas["max_waiting_evaluations"]["own"] == 3
    shoot(page, screenshots, "tenants-01-created")

    with unit_of_work(engine) as session:
        _, member = token_service.create_token(session, subject=f"{name}-admin", role=Role.ADMIN,
                                               tenant=name, actor="tests")
    member_dashboard, _ = web_session(registry.url, member)
    row.get_by_role("button", name=f"Disable {name}").click()
    row = page.locator(f"#tenant-{name}")
    expect(row).to_contain_text("disabled since")
    whoami = httpx.get(registry.url + "/v1/whoami", headers={"Authorization": f"Bearer {member}"})
    assert whoami.status_code == 401 and whoami.json()["error"]["code"] == "tenant_disabled"
    # The member's dashboard session ends with it: back to the sign-in form.
    ended = member_dashboard.get("/ui/tokens", follow_redirects=False)
    assert ended.status_code == 303 and ended.headers["location"].startswith("/ui/sign-in")
    shoot(page, screenshots, "tenants-02-disabled")

    row.get_by_role("button", name=f"Enable {name}").click()
    expect(page.locator(f"#tenant-{name}")).to_contain_text("enabled")
    assert httpx.get(registry.url + "/v1/whoami",
                     headers={"Authorization": f"Bearer {member}"}).status_code == 200

    # A refusal shows the tenants again with the reason, and changes nothing.
    page.get_by_label("Name (slug, never changes)").fill(name)
    page.get_by_role("button", name="Create tenant").click()
    expect(page.get_by_role("alert")).to_contain_text(f"tenant '{name}' already exists")
    expect(page.locator(f"#tenant-{name}").get_by_label(f"Display name of {name}")).to_have_value(
        "Web Team Renamed")
    shoot(page, screenshots, "tenants-03-refused")


def test_only_a_global_admin_sees_the_tenants_page(open_as, registry, tokens, screenshots):
    page = open_as("acme_admin")
    expect(page.get_by_role("link", name="Tenants")).to_have_count(0)
    response = page.goto("/ui/tenants")
    assert response.status == 403
    expect(page.get_by_role("alert")).to_contain_text("role 'admin' may not do this; it needs a global admin")

    client, csrf = web_session(registry.url, tokens["acme_admin"])
    refused = client.post("/ui/tenants/acme/disable", data={"csrf_token": csrf})
    assert refused.status_code == 403 and "it needs a global admin" in refused.text
    admin_client, admin_csrf = web_session(registry.url, tokens["global_admin"])
    forged = admin_client.post("/ui/tenants/acme/disable", data={"csrf_token": "0" * 64})
    assert forged.status_code == 403 and "CSRF token" in forged.text
    assert httpx.get(registry.url + "/v1/whoami",
                     headers={"Authorization": f"Bearer {tokens['acme_admin']}"}).status_code == 200
