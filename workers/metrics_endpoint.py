"""A small HTTP server for a worker's or housekeeper's /metrics, beside Celery in the same
process. Like the registry's, it answers only a metrics token or a global admin, checked against
the database the process already uses."""

from __future__ import annotations

import logging
import threading
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import make_wsgi_app

from registry.auth import tokens
from registry.auth.principal import Role
from registry.db import plain_transaction
from registry.errors import LoraplaneError

log = logging.getLogger(__name__)
MAX_AUTHORIZATION = 4096  # a bearer token is far shorter: refuse before any database work


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args) -> None:  # noqa: A002 - the base class's name
        pass  # one line per scrape is noise; refusals are logged below


UNAUTHORIZED, FORBIDDEN, UNAVAILABLE = "401 Unauthorized", "403 Forbidden", "503 Service Unavailable"


def refusal(environ: dict) -> tuple[str, str] | None:
    """(status, why) when the request's bearer token may not read metrics, else None."""
    header = environ.get("HTTP_AUTHORIZATION", "")
    if len(header) > MAX_AUTHORIZATION or not header.startswith("Bearer "):
        return UNAUTHORIZED, "send a metrics token: Authorization: Bearer <token>"
    try:
        with plain_transaction() as session:
            principal = tokens.authenticate(session, header.removeprefix("Bearer ").strip())
    except LoraplaneError as error:
        return UNAUTHORIZED, error.message
    except Exception as error:  # the database is away: nothing can be checked, so nothing is shown
        return UNAVAILABLE, f"cannot check the token now ({type(error).__name__}); try again"
    if principal.role is Role.METRICS or principal.is_global_admin:
        return None
    return FORBIDDEN, (f"this {principal.role} token may not read metrics; use a metrics token "
                       f"(loraplane token create --role metrics)")


def metrics_app(environ: dict, start_response):
    if environ.get("PATH_INFO") != "/metrics":
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"only /metrics is served here\n"]
    refused = refusal(environ)
    if refused is not None:
        status, why = refused
        log.warning("metrics scrape refused: %s", why)
        start_response(status, [("Content-Type", "text/plain"), ("WWW-Authenticate", "Bearer")])
        return [f"{why}\n".encode()]
    return _PROMETHEUS(environ, start_response)


_PROMETHEUS = make_wsgi_app()


def serve(host: str, port: int) -> WSGIServer:
    """Start serving in a daemon thread; returns the server (its port when 0 was asked)."""
    server = make_server(host, port, metrics_app, _ThreadingServer, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    log.info("metrics on http://%s:%d/metrics", host, server.server_port)
    return server
