"""The dashboard in real Chromium (Debian's, driven by Playwright) against the session's
registry, with a version that the real eval engine has evaluated and that awaits approval."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from devkit.pipeline_steps import create_suite, evaluations_of, request_promotion, upload_dir
from tests.support.evals import wait_finished

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("LORAPLANE_TEST_ARTIFACTS", REPO / "test-artifacts")) / "dashboard"
POOL, SUITE = "web-pool", "web-digits"
METRICS = {"exact_match": {"min": 0.8}, "contains": {"min": 0.8}, "reference_loglik": {"min_margin": 5.0},
           "parity": {"max_logprob_diff": 1e-3, "max_token_mismatch_rate": 0.0},
           "serving": {"min_throughput_ratio": 0.05, "prompts": 4}}


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


@pytest.fixture(scope="session")
def screenshots() -> Path:
    shutil.rmtree(ARTIFACTS, ignore_errors=True)
    ARTIFACTS.mkdir(parents=True)
    return ARTIFACTS


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


@pytest.fixture(scope="module")
def awaiting(admin: httpx.Client, uploader: httpx.Client, kit_base: str, task_kit, eval_worker) -> dict:
    """acme/web-digits@1, evaluated by the worker on the real eval engine (the pool requires the
    suite, so the upload asks for it), and its promotion to web-pool awaiting approval."""
    create_suite(admin, SUITE, kit_base, task_kit.suites["digits_to_words"], METRICS)
    created = admin.post("/v1/pools", json={"name": POOL, "base_model": kit_base, "max_loras": 2,
                                            "max_cpu_loras": 4, "max_lora_rank": 16, "dtype": "float32",
                                            "required_suites": [SUITE]})
    assert created.status_code == 201, created.text
    version = upload_dir(uploader, "acme/web-digits", task_kit.adapters["digits_to_words"])
    evaluations = [e for e in evaluations_of(uploader, version) if e["suite"] == SUITE]
    assert evaluations, "the upload did not ask for the pool's required suite"
    assert wait_finished(uploader, evaluations[0]["id"])["state"] == "passed"
    promotion = request_promotion(uploader, POOL, version)
    assert promotion.status_code == 201, promotion.text
    assert promotion.json()["state"] == "awaiting_approval"
    return {"version": version, "promotion": promotion.json()}


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
