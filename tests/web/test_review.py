"""A reviewer decides in the dashboard with the evidence in view; nobody can decide what they may
not, with the button or without it. Every page is saved as a screenshot, and every form control
on it must have a label."""

from __future__ import annotations

import re

import httpx
from playwright.sync_api import expect

from tests.support.nodes import NodeFleet
from tests.web.conftest import POOL, SUITE, SUITE_ROWS, shoot

DECIDE = "/ui/promotions/{}/decide"


def web_session(registry_url: str, token: str) -> tuple[httpx.Client, str]:
    """An HTTP client signed in to the dashboard as a browser would be, and its CSRF token."""
    client = httpx.Client(base_url=registry_url, timeout=30, follow_redirects=True)
    form = client.get("/ui/sign-in").text
    signed_in = client.post("/ui/sign-in", data={"token": token, "csrf_token": csrf_of(form), "next": "/ui/approvals"})
    assert signed_in.status_code == 200 and "Signed in as" in signed_in.text, signed_in.text[:500]
    return client, csrf_of(signed_in.text)


def csrf_of(html: str) -> str:
    return re.search(r'name="csrf_token" value="([^"]+)"', html).group(1)


def promotion_state(admin: httpx.Client, promotion_id: int) -> dict:
    body = admin.get(f"/v1/promotions/{promotion_id}").json()
    return {k: body[k] for k in ("state", "decided_by", "decision_comment")}


def test_sign_in_refuses_bad_tokens_and_sets_a_strict_http_only_cookie(registry, tokens, browser, screenshots):
    client = httpx.Client(base_url=registry.url, timeout=30)
    form = client.get("/ui/sign-in")
    for token, status, message in (("lpt_" + "x" * 43, 401, "invalid or revoked token"),
                                   (tokens["serving_node"], 403, "a node token cannot sign in to the dashboard")):
        refused = client.post("/ui/sign-in", data={"token": token, "csrf_token": csrf_of(form.text)})
        assert refused.status_code == status and message in refused.text
        assert "loraplane_session" not in client.cookies
    no_csrf = client.post("/ui/sign-in", data={"token": tokens["acme_reviewer"]})
    assert no_csrf.status_code == 403 and "CSRF token is missing" in no_csrf.text
    assert "loraplane_session" not in client.cookies

    signed_in = client.post("/ui/sign-in", data={"token": tokens["acme_reviewer"], "csrf_token": csrf_of(form.text)},
                            follow_redirects=False)
    cookie = signed_in.headers["set-cookie"].lower()
    assert signed_in.status_code == 303 and "httponly" in cookie and "samesite=strict" in cookie
    assert tokens["acme_reviewer"].lower() not in cookie  # the token itself never leaves the registry
    assert signed_in.headers["location"] == "/ui/approvals"
    assert "frame-ancestors 'none'" in client.get("/ui/approvals").headers["content-security-policy"]

    for target in ("//evil.example/", "https://evil.example/ui/", "/v1/tokens"):  # no open redirect
        elsewhere = httpx.Client(base_url=registry.url, timeout=30)
        form = elsewhere.get("/ui/sign-in")
        sent = elsewhere.post("/ui/sign-in", follow_redirects=False, data={
            "token": tokens["acme_reviewer"], "csrf_token": csrf_of(form.text), "next": target})
        assert (sent.status_code, sent.headers["location"]) == (303, "/ui/approvals")

    page = browser.new_page(viewport={"width": 1366, "height": 768})
    page.goto(registry.url + "/ui/approvals")  # no session: to the sign-in form
    expect(page).to_have_url(re.compile(r"/ui/sign-in\?next=/ui/approvals$"))
    shoot(page, screenshots, "01-sign-in")
    page.close()


def test_the_uploader_sees_approval_disabled_with_the_reason_and_the_server_refuses_it(
        awaiting, open_as, registry, tokens, admin, screenshots):
    promotion_id = awaiting["promotion"]["id"]
    page = open_as("acme_uploader")
    page.get_by_role("link", name=f"#{promotion_id} acme/web-digits@1").click()
    approve = page.get_by_role("button", name="Approve")
    expect(approve).to_be_disabled()
    expect(page.locator("#approve-why")).to_contain_text("role 'uploader' may not approve; a reviewer must")
    expect(approve).to_have_attribute("aria-describedby", "approve-why")
    shoot(page, screenshots, "04-promotion-as-uploader")
    before = promotion_state(admin, promotion_id)

    # The disabled button is a courtesy: the server refuses the uploader's approval all the same.
    client, csrf = web_session(registry.url, tokens["acme_uploader"])
    refused = client.post(DECIDE.format(promotion_id), data={"decision": "approve", "comment": "mine, looks fine",
                                                            "csrf_token": csrf})
    assert refused.status_code == 403 and "role &#39;uploader&#39; may not do this" in refused.text
    assert promotion_state(admin, promotion_id) == before == {"state": "awaiting_approval", "decided_by": None,
                                                              "decision_comment": None}


def test_a_form_posted_without_its_csrf_token_is_refused_and_so_is_a_bad_decision(awaiting, registry, tokens, admin):
    promotion_id = awaiting["promotion"]["id"]
    client, csrf = web_session(registry.url, tokens["acme_reviewer"])
    other_session_csrf = web_session(registry.url, tokens["global_admin"])[1]
    for sent in ({}, {"csrf_token": "0" * 64}, {"csrf_token": other_session_csrf}, {"csrf_token": "é" * 64}):
        refused = client.post(DECIDE.format(promotion_id), data={"decision": "approve", "comment": "ok", **sent})
        assert refused.status_code == 403, refused.text[:300]
        assert "CSRF token is missing or does not match your session" in refused.text
    signed_out = client.post("/ui/sign-out", data={})
    assert signed_out.status_code == 403 and "CSRF" in signed_out.text
    assert csrf != other_session_csrf

    # With its token, a bad decision is refused too, saying why, and changes nothing.
    for sent, message in ((dict(decision="approve", comment="   "), "a decision needs a comment that says why"),
                          (dict(decision="approve", comment="x" * 2001), "a decision needs a comment that says why"),
                          (dict(decision="merge", comment="ok"), "unknown decision &#39;merge&#39;")):
        refused = client.post(DECIDE.format(promotion_id), data={**sent, "csrf_token": csrf})
        assert refused.status_code == 422 and message in refused.text, refused.text[:300]
    assert promotion_state(admin, promotion_id) == {"state": "awaiting_approval", "decided_by": None,
                                                    "decision_comment": None}


def test_an_approval_refused_after_its_change_began_leaves_the_pool_and_the_audit_log_as_they_were(
        awaiting, registry, tokens, admin):
    """The refusal comes after the approval took the pool's lock and began its change (the digest
    the page showed is not the version's): the page answers it, and the request commits nothing
    of the change: no generation, no audit event."""
    promotion_id = awaiting["promotion"]["id"]
    pool = awaiting["promotion"]["pool"]
    generation = admin.get(f"/v1/pools/{pool}/active-set").json()["generation"]
    events = admin.get("/v1/audit/verify").json()["events"]
    client, csrf = web_session(registry.url, tokens["acme_reviewer"])
    refused = client.post(DECIDE.format(promotion_id), data={
        "decision": "approve", "comment": "fine", "csrf_token": csrf, "digest": "0" * 64})
    assert refused.status_code == 409, refused.text[:300]
    assert "cannot be signed: the reviewer saw" in refused.text
    assert promotion_state(admin, promotion_id) == {"state": "awaiting_approval", "decided_by": None,
                                                    "decision_comment": None}
    assert admin.get(f"/v1/pools/{pool}/active-set").json()["generation"] == generation
    assert admin.get("/v1/audit/verify").json()["events"] == events


def test_a_reviewer_approves_with_the_evidence_in_view_and_the_pool_changes(
        awaiting, open_as, admin, task_kit, screenshots):
    promotion_id = awaiting["promotion"]["id"]
    generation = admin.get(f"/v1/pools/{POOL}/active-set").json()["generation"]
    page = open_as("acme_reviewer")
    row = page.get_by_role("row").filter(has_text="acme/web-digits@1")
    expect(row.get_by_role("cell").last).to_have_text("yes")  # this reviewer may approve
    expect(row).to_contain_text(f"every suite pool {POOL!r} requires passed")
    shoot(page, screenshots, "02-awaiting-approval")

    page.get_by_role("link", name=f"#{promotion_id} acme/web-digits@1").click()
    expect(page.get_by_role("heading", name=f"Suite {SUITE}: passed")).to_be_visible()
    # Other pools on the kit's base may have evaluated it on their suites too: read this one's.
    evidence = page.get_by_role("article").filter(has=page.get_by_role("heading", name=f"Suite {SUITE}: passed"))
    for metric in ("exact_match", "contains", "reference_loglik", "parity", "serving"):
        expect(evidence.get_by_role("row").filter(has_text=metric).first).to_contain_text("passed")
    expect(evidence.get_by_role("img", name="exact_match: adapter against base")).to_be_visible()
    expect(evidence.get_by_role("img", name=re.compile("^Parity: largest"))).to_be_visible()
    expect(evidence.get_by_role("img", name=re.compile("^Per example: log-likelihood of the reference"))).to_be_visible()
    expect(evidence.get_by_role("img", name="Serving throughput on the evaluation engine")).to_be_visible()
    expect(evidence.locator("table.examples tbody tr")).to_have_count(SUITE_ROWS)
    shoot(page, screenshots, "03-promotion-as-reviewer")

    page.keyboard.press("Tab")  # keyboard users start at the skip link
    expect(page.get_by_role("link", name="Skip to content")).to_be_focused()
    page.get_by_label("Comment").fill("Every example matches the reference; parity within tolerance.")
    page.keyboard.press("Tab")
    expect(page.get_by_role("button", name="Approve")).to_be_focused()  # reached from the comment
    page.keyboard.press("Enter")
    expect(page.get_by_role("status")).to_contain_text("the promotion is now active")

    active = admin.get(f"/v1/pools/{POOL}/active-set").json()
    assert active["generation"] > generation
    entry = next(e for e in active["entries"] if e["served_name"] == "acme/web-digits@1")
    assert [a["alias"] for a in entry["aliases"]] == ["production"]
    assert promotion_state(admin, promotion_id)["decided_by"].startswith("acme_reviewer")


def approved(admin: httpx.Client, promotion_id: int) -> None:
    """The production promotion active, whether or not the approval test ran first."""
    if promotion_state(admin, promotion_id)["state"] == "awaiting_approval":
        response = admin.post(f"/v1/promotions/{promotion_id}/approve", json={"comment": "for the pool page"})
        assert response.status_code == 200, response.text


def report(node: httpx.Client, node_id: str, generation: int, loaded: list[dict]) -> None:
    response = node.put(f"/v1/pools/{POOL}/nodes/{node_id}/status", json={
        "generation": generation, "loaded": loaded, "failures": [], "vllm_url": "http://10.0.0.9:8000",
        "limits": {"max_loras": 2, "max_cpu_loras": 4, "max_lora_rank": 16}})
    assert response.status_code == 200, response.text


def test_the_pool_page_shows_canary_weights_and_follows_its_nodes_live(
        awaiting, open_as, admin, uploader, client_for, registry, task_kit, screenshots):
    from devkit.pipeline_steps import evaluations_of, request_promotion, upload_dir
    from tests.support.evals import wait_finished

    approved(admin, awaiting["promotion"]["id"])
    v2 = upload_dir(uploader, "acme/web-digits", task_kit.adapters["digits_to_words_v2"])
    evaluation = next(e for e in evaluations_of(uploader, v2) if e["suite"] == SUITE)
    assert wait_finished(uploader, evaluation["id"])["state"] == "passed"
    canary = request_promotion(client_for("acme_reviewer"), POOL, v2, alias="canary", weight=20)
    assert canary.status_code == 201, canary.text

    page = open_as("acme_reviewer")  # it asked for the canary: four-eyes keeps it from approving
    page.goto(f"/ui/promotions/{canary.json()['id']}")
    expect(page.get_by_role("button", name="Approve")).to_be_disabled()
    expect(page.locator("#approve-why")).to_contain_text(re.compile(r"acme_reviewer \(identity \d+\) requested this promotion and may not approve it"))
    shoot(page, screenshots, "05-promotion-four-eyes")
    assert admin.post(f"/v1/promotions/{canary.json()['id']}/approve", json={"comment": "canary"}).status_code == 200

    nodes = NodeFleet(admin, POOL)
    generation = admin.get(f"/v1/pools/{POOL}/active-set").json()["generation"]
    both = [{"served_name": v["served_name"], "digest": v["digest"]} for v in (awaiting["version"], v2)]
    report(nodes.client("web-node-1"), "web-node-1", generation, both)
    report(nodes.client("web-node-2"), "web-node-2", generation - 1, both[:1])

    page.goto(f"/ui/pools/{POOL}")
    expect(page.get_by_role("row", name=re.compile(r"^acme.web-digits canary"))).to_contain_text("acme/web-digits@2")
    expect(page.get_by_role("row", name=re.compile(r"^acme.web-digits canary"))).to_contain_text("20%")
    expect(page.get_by_role("row", name=re.compile(r"^acme.web-digits canary"))).to_contain_text("weight set by hand")
    expect(page.get_by_role("img", name="Traffic share by alias")).to_contain_text("80 %")
    expect(page.get_by_role("heading", name=re.compile("^Nodes: 1 of 2 converged"))).to_be_visible()
    nodes_table = page.get_by_role("table", name="Per-node convergence and drift")
    expect(nodes_table.get_by_role("row").filter(has_text="web-node-2")).to_contain_text("missing acme/web-digits@2")
    expect(page.get_by_role("heading", name="Placement: every node holds every version")).to_be_visible()
    placed = page.get_by_role("table", name="Which nodes hold each version, and its share of the traffic")
    expect(placed.get_by_role("row").filter(has_text="acme/web-digits@2")).to_contain_text("web-node-1, web-node-2")
    expect(page.get_by_role("img", name="GPUs needed")).to_contain_text("assumed")
    shoot(page, screenshots, "06-pool")

    report(nodes.client("web-node-2"), "web-node-2", generation, both)  # the page follows without a reload
    expect(page.get_by_role("heading", name=re.compile("^Nodes: 2 of 2 converged"))).to_be_visible(timeout=15_000)
    nodes.close()

    page.goto("/ui/pools")
    expect(page.get_by_role("link", name=POOL)).to_be_visible()
    shoot(page, screenshots, "07-pools")
    page.goto("/ui/adapters/acme/web-digits/versions/1")
    expect(page.get_by_role("heading", name="Validation report")).to_be_visible()
    # The provenance chain: the signed attestation of its approval, verified, with its people,
    # evidence and audit event.
    expect(page.get_by_role("heading", name=f"Pool {POOL}: verified")).to_be_visible()
    chain = page.get_by_role("table", name=f"Attestation in pool {POOL}")
    expect(chain.get_by_role("row", name=re.compile("^Uploader "))).to_contain_text("acme_uploader (identity ")
    expect(chain.get_by_role("row", name=re.compile("^Approver "))).to_contain_text("(identity ")
    expect(chain.get_by_role("row", name=re.compile("^Evidence "))).to_contain_text(f"of {SUITE}: passed")
    expect(chain.get_by_role("link", name=re.compile("^hash "))).to_be_visible()
    shoot(page, screenshots, "08-version")


def test_the_audit_log_filters_and_shows_the_chain_verification(awaiting, open_as, admin, screenshots):
    approved(admin, awaiting["promotion"]["id"])
    page = open_as("global_admin")
    page.goto("/ui/audit")
    page.get_by_label("Action (exact)").fill("promotion.approved")
    page.get_by_label("Subject starts with").fill(f"pool/{POOL}/acme/web-digits")
    page.get_by_role("button", name="Filter").click()
    expect(page).to_have_url(re.compile(r"action=promotion.approved"))
    rows = page.locator("table.audit tbody tr")
    expect(rows.first).to_contain_text("promotion.approved")
    assert all("promotion.approved" in text and f"pool/{POOL}/acme/web-digits@" in text
               for text in rows.all_inner_texts())
    expect(rows).to_have_count(2)  # production, then the canary
    expect(page.get_by_role("status")).to_contain_text("Hash chain verified: all")
    shoot(page, screenshots, "09-audit")

    reviewer = open_as("acme_reviewer")
    reviewer.goto("/ui/audit")
    expect(reviewer.get_by_role("alert")).to_contain_text("role 'reviewer' may not do this")


def test_another_tenant_sees_none_of_it(awaiting, open_as, registry, tokens, screenshots):
    promotion_id = awaiting["promotion"]["id"]
    page = open_as("globex_uploader")
    expect(page.get_by_text("Nothing is waiting for approval.")).to_be_visible()
    expect(page.get_by_role("link", name="Audit log")).to_have_count(0)  # not an admin
    client, _ = web_session(registry.url, tokens["globex_uploader"])
    for path, status, message in (
            (f"/ui/promotions/{promotion_id}", 404, f"promotion {promotion_id} does not exist"),
            ("/ui/adapters/acme/web-digits/versions/1", 403, "this token belongs to tenant &#39;globex&#39;, not &#39;acme&#39;")):
        refused = client.get(path)
        assert refused.status_code == status and message in refused.text, refused.text[:400]
        assert "web-digits" not in refused.text.split("</header>")[1].replace(path, "")
    page.goto(f"/ui/pools/{POOL}")
    expect(page.get_by_role("heading", name=f"Pool {POOL}")).to_be_visible()
    expect(page.get_by_text("acme/web-digits")).to_have_count(0)
