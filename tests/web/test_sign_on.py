"""The dashboard's sign-on in real Chromium, through the real OpenID provider's form: the
sign-in page offers the provider, the person lands in the approval queue signed in as
themselves, and an answer replayed in the browser is refused on the sign-in page, saying why.
(tests/registry/sso/test_sign_on.py replays answers with the cookie kept, as a thief would.)"""

from __future__ import annotations

import re
import uuid

from tests.support.sso import person
from tests.web.conftest import shoot


def test_signing_on_in_chromium_lands_signed_in_and_a_replayed_answer_is_refused(
        browser, sso_registry, oidc_provider, screenshots):
    who = f"rae-{uuid.uuid4().hex[:8]}"
    person(oidc_provider.url, who, email="rae@example.com", groups=["acme-reviewers"])
    context = browser.new_context(viewport={"width": 1366, "height": 768}, base_url=sso_registry.url)
    try:
        page = context.new_page()
        page.goto("/ui/sign-in")
        shoot(page, screenshots, "sign-in-with-provider")
        page.get_by_role("link", name="Sign in with Test IdP").click()

        page.wait_for_url(re.compile(rf"^{re.escape(oidc_provider.url)}/oauth2/authorize"))
        page.get_by_placeholder("sub").fill(who)
        answers = []
        page.on("request", lambda request: answers.append(request.url) if "/ui/sso/callback" in request.url else None)
        page.get_by_role("button", name="Authorize").click()

        page.wait_for_url(re.compile(r".*/ui/approvals$"))
        assert "rae@example.com" in page.content()
        shoot(page, screenshots, "signed-on")

        page.goto(answers[0])  # the provider's answer, once more: its sign-in cookie is gone
        error = page.locator("#sign-in-error")
        assert error.inner_text().startswith("this browser did not start the sign-in this answer is for")
    finally:
        context.close()
