"""The adapters page in real Chromium: a name search and each filter (tenant, base model, state,
pool), a page at a time; a tenant's people see their own tenant's adapters only. The adapters
are this module's own, on bases of its own."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from devkit.pipeline_steps import create_suite, promoter, upload_dir
from tests.conftest import register_base
from tests.web.conftest import shoot

BASE, OTHER_BASE, POOL, SUITE = "find-base", "find-other-base", "find-pool", "find-suite"


@pytest.fixture(scope="module")
def adapters(admin, client_for, engine, tiny_base, tmp_path_factory):
    from devkit.tiny_model import build_adapter

    for base in (BASE, OTHER_BASE):
        register_base(admin, base, tiny_base)
    create_suite(admin, SUITE, BASE, [{"prompt": "1 =>", "reference": "one"}],
                 {"exact_match": {"min": 0.5}, "parity": {"max_logprob_diff": 0.01}})
    created = admin.post("/v1/pools", json={"name": POOL, "base_model": BASE, "dtype": "float32",
                                            "max_loras": 2, "max_cpu_loras": 8, "max_lora_rank": 16})
    assert created.status_code == 201, created.text
    root = tmp_path_factory.mktemp("find")

    def folder(name: str, base: str, seed: int):
        return build_adapter(tiny_base, root / name, r=8, lora_alpha=16, target_modules=("q_proj", "v_proj"),
                             seed=seed, base_model_name=base)

    uploader = client_for("acme_uploader")
    promoter(admin, uploader, engine, POOL, SUITE)("find-alpha", folder("alpha", BASE, 901))
    upload_dir(uploader, "acme/find-beta", folder("beta", BASE, 902))
    assert uploader.post("/v1/adapters/acme/find-beta/retire").status_code == 200
    upload_dir(uploader, "acme/find-gamma", folder("gamma", OTHER_BASE, 903))
    upload_dir(client_for("globex_uploader"), "globex/find-delta", folder("delta", BASE, 904))
    return ["acme/find-alpha", "acme/find-beta", "acme/find-gamma", "globex/find-delta"]


def shown(page) -> list[str]:
    return page.locator("table.adapters tbody th").all_inner_texts()


def find(page, **fields: str) -> None:
    page.goto("/ui/adapters")
    for label, value in fields.items():
        control = page.get_by_label(label, exact=True)
        if label == "State":
            control.select_option(value)
        else:
            control.fill(value)
    page.get_by_role("button", name="Find").click()
    expect(page).to_have_url(re.compile(r".*/ui/adapters\?"))


def test_a_global_admin_finds_adapters_by_name_and_each_filter(open_as, adapters, screenshots):
    page = open_as("global_admin")
    page.get_by_role("link", name="Adapters").click()
    expect(page.get_by_role("heading", name="Adapters", exact=True)).to_be_visible()

    find(page, **{"Name contains": "find-"})
    assert shown(page) == adapters
    expect(page.locator("#adapter-acme-find-beta")).to_contain_text("retired")
    shoot(page, screenshots, "adapters-01-search")

    find(page, **{"Name contains": "ND-ALP"})  # names are lowercase: the search is too
    assert shown(page) == ["acme/find-alpha"]
    find(page, **{"Name contains": "find-", "Tenant": "globex"})
    assert shown(page) == ["globex/find-delta"]
    find(page, **{"Name contains": "find-", "Base model": OTHER_BASE})
    assert shown(page) == ["acme/find-gamma"]
    find(page, **{"Name contains": "find-", "State": "retired"})
    assert shown(page) == ["acme/find-beta"]
    find(page, **{"Served in pool": POOL})
    assert shown(page) == ["acme/find-alpha"]
    expect(page.get_by_label("Served in pool", exact=True)).to_have_value(POOL)
    find(page, **{"Name contains": "find_"})  # '_' is a character, not LIKE's wildcard
    expect(page.get_by_text("No adapters match.")).to_be_visible()

    page.goto("/ui/adapters?q=find-&limit=3")
    assert shown(page) == adapters[:3]
    page.get_by_role("link", name="More adapters").click()
    assert shown(page) == adapters[3:]
    expect(page.get_by_role("link", name="More adapters")).to_have_count(0)
    expect(page.get_by_label("Name contains", exact=True)).to_have_value("find-")
    shoot(page, screenshots, "adapters-02-later-page")

    too_long = page.goto("/ui/adapters?q=" + "x" * 65)
    assert too_long.status == 422


def test_a_tenants_uploader_sees_its_own_adapters_only(open_as, adapters, screenshots):
    page = open_as("acme_uploader")
    page.goto("/ui/adapters?q=find-")
    assert shown(page) == [a for a in adapters if a.startswith("acme/")]
    expect(page.get_by_label("Tenant", exact=True)).to_have_count(0)
    refused = page.goto("/ui/adapters?tenant=globex")
    assert refused.status == 403
    expect(page.get_by_role("alert")).to_contain_text("this token belongs to tenant 'acme', not 'globex'")
    shoot(page, screenshots, "adapters-03-refused")
