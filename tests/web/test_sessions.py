"""Dashboard sessions live on the server: signing out ends the session even for a copied
cookie, a revoked token's session ends, and the token page lists and revokes tokens."""

from __future__ import annotations

import httpx

from tests.support.nodes import issue_token
from tests.web.test_review import csrf_of, web_session


def test_signing_out_ends_the_session_even_for_a_copied_cookie(registry, tokens):
    client, csrf = web_session(registry.url, tokens["acme_reviewer"])
    copied = client.cookies["loraplane_session"]

    signed_out = client.post("/ui/sign-out", data={"csrf_token": csrf}, follow_redirects=False)

    assert signed_out.status_code == 303 and signed_out.headers["location"] == "/ui/sign-in"
    replay = httpx.get(registry.url + "/ui/approvals", cookies={"loraplane_session": copied},
                       follow_redirects=False)
    assert replay.status_code == 303 and replay.headers["location"].startswith("/ui/sign-in")
    # The token itself still works: only the session ended.
    assert httpx.get(registry.url + "/v1/whoami",
                     headers={"Authorization": f"Bearer {tokens['acme_reviewer']}"}).status_code == 200


def test_a_visitor_cannot_choose_the_nonce_behind_its_csrf_token(registry):
    chosen = '"/../blobs/sha256/00/' + "0" * 64 + '\\0129999999999"'
    first = httpx.get(registry.url + "/ui/sign-in", cookies={"loraplane_visit": chosen})
    again = httpx.get(registry.url + "/ui/sign-in", cookies={"loraplane_visit": chosen})
    # An unsigned cookie is ignored: each visit gets a fresh nonce of the server's choosing.
    assert first.status_code == 200 and "loraplane_visit" in first.cookies
    assert csrf_of(first.text) != csrf_of(again.text)


def test_the_token_page_lists_and_revokes(registry, admin, client_for):
    plain = issue_token(admin, "leaving-reviewer", role="reviewer", tenant="acme")
    leaving = httpx.Client(base_url=registry.url, headers={"Authorization": f"Bearer {plain}"})
    token_id = leaving.get("/v1/whoami").json()["token_id"]
    lead_token = issue_token(admin, "acme-token-keeper", role="admin", tenant="acme")
    client, csrf = web_session(registry.url, lead_token)

    listing = client.get("/ui/tokens")
    assert listing.status_code == 200
    assert f"Revoke token {token_id} of leaving-reviewer" in listing.text
    assert "globex_admin" not in listing.text  # another tenant's tokens stay out of sight

    revoked = client.post(f"/ui/tokens/{token_id}/revoke", data={"csrf_token": csrf})

    assert revoked.status_code == 200 and f"Revoke token {token_id} " not in revoked.text
    assert leaving.get("/v1/whoami").status_code == 401
    forged = client.post(f"/ui/tokens/{token_id}/revoke", data={"csrf_token": "0" * 64})
    assert forged.status_code == 403 and "CSRF token" in forged.text
    other_tenant = client_for("globex_admin").get("/v1/whoami").json()["token_id"]
    refused = client.post(f"/ui/tokens/{other_tenant}/revoke", data={"csrf_token": csrf})
    assert refused.status_code == 404 and f"token {other_tenant} does not exist" in refused.text
    assert client_for("globex_admin").get("/v1/whoami").status_code == 200
