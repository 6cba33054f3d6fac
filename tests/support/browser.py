"""Headless Chromium (Debian's, driven by Playwright) signed in as a test principal, for the
dashboard's tests wherever their fixtures live."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def browser():
    """Chromium for one module: Playwright's sync API keeps an event loop running in this thread
    while it is open, which would break asyncio.run() in whatever tests the worker runs next."""
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, headless=True)
        yield browser
        browser.close()


@pytest.fixture
def open_as(browser, registry, tokens) -> Iterator:
    """A fresh browser context signed in as a test principal, on a laptop-sized window."""
    contexts = []

    def sign_in(principal: str):
        context = browser.new_context(viewport={"width": 1366, "height": 768}, base_url=registry.url)
        contexts.append(context)
        page = context.new_page()
        page.goto("/ui/sign-in")
        page.get_by_label("API token").fill(tokens[principal])
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(re.compile(r".*/ui/approvals$"))
        return page

    yield sign_in
    for context in contexts:
        context.close()


def unlabelled_controls(page) -> list[str]:
    """Every visible form control without a label a screen reader would announce."""
    return page.evaluate("""() => [...document.querySelectorAll('input, select, textarea, button')]
        .filter(el => el.type !== 'hidden')
        .filter(el => {
            if (el.tagName === 'BUTTON') return !el.textContent.trim() && !el.getAttribute('aria-label');
            return !(el.labels && el.labels.length) && !el.getAttribute('aria-label')
                && !el.getAttribute('aria-labelledby');
        })
        .map(el => el.outerHTML.slice(0, 120))""")


def shoot(page, screenshots: Path, name: str) -> None:
    page.screenshot(path=str(screenshots / f"{name}.png"), full_page=True)
    assert unlabelled_controls(page) == [], f"{name}: form controls without a label"
