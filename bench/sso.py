"""What signing on costs: the dashboard's sign-on round trip and `loraplane login`'s against a
local OpenID provider process, and what an SSO session adds to each authenticated request beside
a bearer token, side by side in one run.

    ./dev bench sso [--sign-ons 30] [--requests 400]

Runs real Postgres, one registry process configured for sign-on, and oidc-provider-mock (a real
OpenID provider: discovery, keys, its authorization form, its token endpoint).

- dashboard_sign_in_ms_p50: from GET /ui/sso/start to the callback's signed-in answer: the
  redirect, the provider's form posted, and the callback (which exchanges the code with the
  provider and checks the ID token). Each in a fresh browser.
- cli_login_ms_p50: the same with `loraplane login`'s loopback receiver (loraplane/login_cli.py),
  the confirmation page's form posted, through the exchange of the one-time code for a token;
  without the interpreter's start.
- authenticated_request_added_ms_p50: authenticating a request by an SSO dashboard session
  (cookie, session row, its token) minus by a bearer token (its keyed hash), both with the
  registry's own code on the same database, alternating, N each. Beside it, over HTTP: the
  same dashboard page with an SSO session and with a token sign-in's session, and /v1/whoami
  with a `loraplane login` token and with an issued token.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import statistics
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

import httpx
from starlette.requests import Request

from bench import report
from devkit import services
from devkit.units_of_work import unit_of_work
from loraplane.login_cli import _Loopback
from registry.auth import tokens
from registry.auth.principal import Role
from registry.db import make_engine, plain_transaction
from registry.sso import pkce
from registry.settings import get_settings
from registry.tokens import issuing
from web.session import SESSION_COOKIE, visit_of

CLIENT_ID = "loraplane-bench"
MAPPINGS = [{"claim": "groups", "value": "reviewers", "role": "reviewer", "tenant": "bench"}]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sign-ons", type=int, default=30)
    parser.add_argument("--requests", type=int, default=400)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="loraplane-bench-sso-"))
    work.chmod(0o755)  # PostgreSQL runs as its own user
    running: list[services.Service] = []
    try:
        database_url, s3 = services.start_database_and_store(work, running, "bench")
        os.environ["LORAPLANE_DATABASE_URL"] = database_url  # this process authenticates on it too
        get_settings.cache_clear()
        provider = services.start_oidc_provider(work / "provider")
        running.append(provider)
        registry = services.start_registry(work / "registry", {
            **services.registry_env(database_url, s3, "bench"),
            "LORAPLANE_SSO_ISSUER": provider.url, "LORAPLANE_SSO_CLIENT_ID": CLIENT_ID,
            "LORAPLANE_SSO_CLIENT_SECRET": "bench-secret", "LORAPLANE_SSO_ROLE_MAPPINGS": json.dumps(MAPPINGS)})
        running.append(registry)
        engine = make_engine(database_url)
        with unit_of_work(engine) as session:
            _, issued = issuing.create_token(session, subject="bench-reviewer", role=Role.REVIEWER,
                                             tenant="bench", actor="bench")
        httpx.put(f"{provider.url}/users/{quote('ria')}",
                  json={"email": "ria@example.com", "groups": ["reviewers"]}).raise_for_status()
        dashboard = [_sign_on(registry.url, "ria")[0] for _ in range(args.sign_ons)]
        cli = [_login(registry.url, "ria")[0] for _ in range(args.sign_ons)]
        metrics = {"dashboard_sign_in_ms_p50": round(statistics.median(dashboard), 2),
                   "dashboard_sign_in_ms_p99": round(_p99(dashboard), 2),
                   "cli_login_ms_p50": round(statistics.median(cli), 2),
                   "cli_login_ms_p99": round(_p99(cli), 2)}
        metrics.update(_per_request(registry.url, issued, args.requests))
        engine.dispose()
    finally:
        for service in reversed(running):
            service.stop()
    report.write("sso", metrics, {"sign_ons": args.sign_ons, "requests": args.requests,
                                  "provider": "oidc-provider-mock (local process)",
                                  "database": "PostgreSQL (local)"})


def _sign_on(registry_url: str, subject: str) -> tuple[float, httpx.Client]:
    browser = httpx.Client(base_url=registry_url, timeout=30)
    started_at = time.perf_counter()
    started = browser.get("/ui/sso/start")
    answer = httpx.post(started.headers["location"], data={"sub": subject}).headers["location"]
    landed = browser.get(answer)
    elapsed = (time.perf_counter() - started_at) * 1000
    assert landed.status_code == 200 and SESSION_COOKIE in browser.cookies, landed.text[:300]
    return elapsed, browser


def _login(registry_url: str, subject: str) -> tuple[float, str]:
    started_at = time.perf_counter()
    verifier = secrets.token_urlsafe(64)
    challenge = pkce.s256(verifier)
    receiver = _Loopback()
    with httpx.Client(base_url=registry_url, timeout=30) as browser:
        confirmation = browser.get("/ui/sso/start", params={"cli_port": receiver.port, "cli_challenge": challenge})
        form = dict(re.findall(r'name="(csrf_token|cli_port|cli_challenge)" value="([^"]*)"', confirmation.text))
        started = browser.post("/ui/sso/start", data=form)  # the person confirms the code
        answer = httpx.post(started.headers["location"], data={"sub": subject}).headers["location"]
        handed = browser.get(answer)
        httpx.get(handed.headers["location"])  # the browser lands on the CLI's loopback address
    code = receiver.wait(30)
    login = httpx.post(f"{registry_url}/v1/sso/token", json={"exchange_code": code, "code_verifier": verifier})
    elapsed = (time.perf_counter() - started_at) * 1000
    assert login.status_code == 200, login.text
    return elapsed, login.json()["token"]


def _per_request(registry_url: str, issued: str, n: int) -> dict[str, float]:
    _, sso_browser = _sign_on(registry_url, "ria")
    _, login_token = _login(registry_url, "ria")
    token_browser = httpx.Client(base_url=registry_url, timeout=30)
    form = token_browser.get("/ui/sign-in")
    csrf = form.text.split('name="csrf_token" value="')[1].split('"')[0]
    token_browser.post("/ui/sign-in", data={"token": issued, "csrf_token": csrf, "next": "/ui/approvals"})
    assert SESSION_COOKIE in token_browser.cookies
    cookie = f"{SESSION_COOKIE}={sso_browser.cookies[SESSION_COOKIE]}".encode()
    scope = {"type": "http", "method": "GET", "path": "/ui/approvals", "headers": [(b"cookie", cookie)],
             "query_string": b""}

    def sso_session() -> None:
        with plain_transaction() as session:
            assert visit_of(session, Request(scope)).principal is not None

    def bearer() -> None:
        with plain_transaction() as session:
            tokens.authenticate(session, issued)

    def page(browser: httpx.Client):
        return lambda: browser.get("/ui/approvals").raise_for_status()

    def whoami(token: str):
        headers = {"Authorization": f"Bearer {token}"}
        return lambda: httpx.get(registry_url + "/v1/whoami", headers=headers).raise_for_status()

    in_process = _side_by_side(sso_session, bearer, n)
    dashboard = _side_by_side(page(sso_browser), page(token_browser), n // 4)
    api = _side_by_side(whoami(login_token), whoami(issued), n // 4)
    return {"authenticated_request_added_ms_p50": in_process["added"],
            "sso_session_auth_ms_p50": in_process["first"], "bearer_token_auth_ms_p50": in_process["second"],
            "dashboard_page_sso_session_added_ms_p50": dashboard["added"],
            "dashboard_page_ms_p50": dashboard["second"],
            "api_login_token_added_ms_p50": api["added"], "api_whoami_ms_p50": api["second"]}


def _side_by_side(first, second, n: int) -> dict[str, float]:
    """Alternating, so both see the same machine; the medians and their difference, in ms."""
    times: dict[str, list[float]] = {"first": [], "second": []}
    for round_number in range(n):
        order = [("first", first), ("second", second)]
        for name, call in order if round_number % 2 else reversed(order):
            started = time.perf_counter()
            call()
            times[name].append((time.perf_counter() - started) * 1000)
    first_ms, second_ms = statistics.median(times["first"]), statistics.median(times["second"])
    return {"first": round(first_ms, 3), "second": round(second_ms, 3), "added": round(first_ms - second_ms, 3)}


def _p99(values: list[float]) -> float:
    return sorted(values)[min(len(values) - 1, int(len(values) * 0.99))]


if __name__ == "__main__":
    main()
