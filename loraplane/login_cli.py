"""`loraplane login` and `logout`: sign on through the registry's identity provider in a browser,
and keep the short-lived token it gives (loraplane_client/credentials.py).

The browser goes to the registry's /ui/sso/start with this command's loopback port and a PKCE
challenge; after the provider, the registry sends the browser to the loopback address with a
one-time code, which only this command, holding the verifier, can exchange for a token."""

from __future__ import annotations

import secrets
import threading
import webbrowser
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import typer

from loraplane.cli_support import call, console, fail
from loraplane_client import credentials
from loraplane_client.connection import ClientSettings, RegistryError, checked, connect
from registry.sso import pkce

DONE_PAGE = (b"<!doctype html><title>loraplane</title><p>You are signed in to loraplane. "
             b"You can close this tab.</p>")


def login(
    no_browser: bool = typer.Option(False, "--no-browser",
                                    help="Print the sign-in address instead of opening a browser."),
    timeout_s: float = typer.Option(300, min=10, max=3600, help="How long to wait for the sign-in."),
):
    """Sign on through your company's identity provider, and keep the token it gives for this
    registry (LORAPLANE_URL) in ~/.config/loraplane/credentials.json. Commands use it while
    LORAPLANE_TOKEN is unset."""
    settings = ClientSettings()
    with connect(ClientSettings(url=settings.url, token=None)) as client:
        offer = call(lambda: checked(client.get("/v1/sso")))
    if not offer["enabled"]:
        fail(f"single sign-on is not configured on {settings.url}",
             "Use a token (LORAPLANE_TOKEN), or ask the registry's operators to set LORAPLANE_SSO_ISSUER.")
    verifier = secrets.token_urlsafe(64)
    challenge = pkce.s256(verifier)
    receiver = _Loopback()
    address = f"{settings.url.rstrip('/')}{offer['start_path']}?" + urlencode(
        {"cli_port": receiver.port, "cli_challenge": challenge})
    typer.echo(f"Sign in with {offer['provider']} at:\n{address}", err=True)
    typer.echo(f"Continue only if the page shows the code {pkce.confirmation_code(challenge)}.", err=True)
    if not no_browser:
        webbrowser.open(address)
    with console.status("waiting for the sign-in in the browser ..."):
        code = receiver.wait(timeout_s)
    if code is None:
        fail(f"no sign-in arrived within {timeout_s:.0f} s", "Run `loraplane login` again.")
    with connect(ClientSettings(url=settings.url, token=None)) as client:
        login = call(lambda: checked(client.post("/v1/sso/token",
                                                 json={"exchange_code": code, "code_verifier": verifier})))
    who = f"{login['subject']} ({login['role']}@{login['tenant'] or '*'}, identity {login['identity_id']})"
    saved = credentials.save(settings.url, login["token"], login["expires_at"], who)
    console.print(f"signed in to {settings.url} as {who} until {login['expires_at']} (token kept in {saved})")


def logout():
    """Revoke the token `loraplane login` kept for this registry (LORAPLANE_URL), and forget it."""
    url = ClientSettings().url
    saved = credentials.saved_token(url)
    if saved is None:
        credentials.forget(url)
        console.print(f"no unexpired sign-in was kept for {url}")
        return
    try:
        with connect(ClientSettings(url=url, token=saved)) as client:
            token_id = checked(client.get("/v1/whoami"))["token_id"]
            checked(client.post(f"/v1/tokens/{token_id}/revoke"))
        revoked = "revoked and forgotten"
    except (RegistryError, httpx.HTTPError) as error:
        revoked = f"forgotten here, but not revoked ({error}): it expires on its own"
    credentials.forget(url)
    console.print(f"signed out of {url}: its token is {revoked}")


def link_identity(
    other_token_file: Path | None = typer.Option(
        None, "--other-token-file", help="A file holding the other token; without it, you are asked for it."),
):
    """Link your identity (the token in use: LORAPLANE_TOKEN, else `loraplane login`'s) with the
    identity of another token you hold, such as one from before single sign-on. Four-eyes then
    treats them as one person. Links only ever join."""
    other = (call(other_token_file.read_text) if other_token_file is not None
             else typer.prompt("The other token", hide_input=True)).strip()
    with connect() as client:
        linked = call(lambda: checked(client.post("/v1/identities/link", json={"token": other})))
    console.print(f"linked as one person: identities {', '.join(map(str, linked['identities']))}")


class _Loopback:
    """One request to 127.0.0.1 on a free port: the registry's redirect with the login code."""

    def __init__(self) -> None:
        self.code: str | None = None
        self._arrived = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
                parts = urlsplit(self.path)
                code = parse_qs(parts.query).get("code", [""])[0]
                if parts.path != "/callback" or not code or len(code) > 128:
                    self.send_error(404)
                    return
                receiver.code = code
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.end_headers()
                self.wfile.write(DONE_PAGE)
                receiver._arrived.set()

            def log_message(self, *args) -> None:  # the code is a secret: never printed
                return

        self._server = HTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        # A short poll, so the wait ends as soon as the code arrives (the default is half a second).
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    def wait(self, timeout_s: float) -> str | None:
        try:
            self._arrived.wait(timeout_s)
            return self.code
        finally:
            self._server.shutdown()

