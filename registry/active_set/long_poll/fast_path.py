"""The node fleet's requests to the active set, answered before routing and validation.

A large fleet sends almost nothing else: long-polls, and conditional GETs that end in a 304.
When the query holds at most `wait=S` and `node=ID` and the token is valid (from the principal
cache, or one lookup shared by every request of that token), the answer goes out here, straight
over ASGI, through the same `protocol.answer` as the endpoint. Anything else (a bad token, an
odd query, any refusal) goes on to the endpoint, which explains it.
"""

from __future__ import annotations

import re
import time
from urllib.parse import parse_qsl

from starlette.types import ASGIApp, Receive, Scope, Send

from registry.active_set.long_poll import protocol
from registry.active_set.long_poll import state
from registry.active_set.long_poll.endpoints import MAX_WAIT_S
from registry.auth.service_accounts.pod_tokens import MAX_TOKEN_CHARS
from registry.errors import LoraplaneError
from registry.names import NAME_PATTERN
from registry.metrics import LATENCY, REQUESTS

PATH = re.compile(r"/v1/pools/([a-z0-9][a-z0-9_-]{0,63})/active-set")
ROUTE = "/v1/pools/{pool}/active-set"
# A longer header is no token of ours (a pod's service-account token is the longest): the
# endpoint refuses it.
MAX_AUTHORIZATION = len("Bearer ") + MAX_TOKEN_CHARS


class ActiveSetFastPath:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET":
            match = PATH.fullmatch(scope["path"])
            if match and await self._answer(match.group(1), scope, send):
                return
        await self.app(scope, receive, send)

    async def _answer(self, pool: str, scope: Scope, send: Send) -> bool:
        started = time.perf_counter()
        wait_s, node = _query(scope.get("query_string", b""))
        headers = dict(scope["headers"])
        authorization = headers.get(b"authorization", b"").decode("latin-1")
        if wait_s is None or not authorization.startswith("Bearer ") or len(authorization) > MAX_AUTHORIZATION:
            return False
        polls = state.of(scope["app"])
        try:  # a fleet's tokens leave the cache together: one shared lookup, not the full route each
            principal = await polls.principals.authenticate(authorization.removeprefix("Bearer "))
        except Exception:  # a refusal, or the database away: the endpoint explains it
            return False
        known = protocol.generation_in(headers.get(b"if-none-match", b"").decode("latin-1"))
        try:
            status, generation, body = await protocol.answer(polls, pool, principal, known, wait_s, node)
        except LoraplaneError:
            return False  # nothing was sent: the endpoint answers with the full explanation
        response_headers = [(name.lower().encode(), value.encode())
                            for name, value in protocol.headers(generation).items()]
        if body is not None:
            response_headers += [(b"content-type", b"application/json"),
                                 (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": response_headers})
        await send({"type": "http.response.body", "body": body or b""})
        REQUESTS.labels("GET", ROUTE, str(status)).inc()
        if not wait_s:
            LATENCY.labels("GET", ROUTE).observe(time.perf_counter() - started)
        return True


def _query(query: bytes) -> tuple[float | None, str | None]:
    """(wait, node) of a query made only of `wait=S` with S in range and `node=ID`, each at most
    once; (None, None) for anything else."""
    pairs = parse_qsl(query.decode("latin-1"), keep_blank_values=True)
    fields = dict(pairs)
    if len(fields) != len(pairs) or not set(fields) <= {"wait", "node"}:
        return None, None
    node = fields.get("node")
    if node is not None and not NAME_PATTERN.fullmatch(node):
        return None, None
    try:
        wait_s = float(fields.get("wait", 0))
    except ValueError:
        return None, None
    return (wait_s, node) if 0 <= wait_s <= MAX_WAIT_S else (None, None)
