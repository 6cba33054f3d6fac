"""The pod's projected service-account token (LORAPLANE_AGENT_TOKEN_FILE) as the agent's bearer
token. The kubelet replaces the file well before the token expires, so it is read again whenever
it changed (its modification time, size or inode), and never sent past that; the registry
verifies it. The pod's name in it is this node's id (the registry takes it from there too)."""

from __future__ import annotations

import base64
import json
import logging
import os
from collections.abc import Generator
from pathlib import Path

import httpx

log = logging.getLogger("loraplane.agent")
MAX_TOKEN_BYTES = 8 * 1024  # the registry's bound: a projected token is 1-2 KiB


def read_token(path: Path) -> str:
    """The token in the file; ValueError saying what is wrong with it."""
    try:
        with path.open("rb") as file:
            raw = file.read(MAX_TOKEN_BYTES + 1)
    except OSError as error:
        raise ValueError(f"the token file {str(path)!r} cannot be read: {error.strerror}") from None
    if len(raw) > MAX_TOKEN_BYTES:
        raise ValueError(f"the token file {str(path)!r} is larger than {MAX_TOKEN_BYTES // 1024} KiB: "
                         "it does not hold a projected service-account token")
    token = raw.decode("ascii", errors="replace").strip()
    if token.count(".") != 2 or not token.startswith("eyJ"):
        raise ValueError(f"the token file {str(path)!r} does not hold a JWT (a projected "
                         "service-account token)")
    return token


def pod_name(token: str) -> str:
    """The pod's name in the token's `kubernetes.io` claims, read without checking the signature:
    the token is this pod's own, and the registry checks it."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        name = claims["kubernetes.io"]["pod"]["name"]
    except (ValueError, KeyError, TypeError, IndexError):
        name = None
    if not isinstance(name, str) or not name:
        raise ValueError("the token file holds no pod name (kubernetes.io.pod.name): it is not a "
                         "pod's projected service-account token")
    return name


class TokenFile(httpx.Auth):
    """Sends the file's current token with every request."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp = self._stat()
        self._token = read_token(path)

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["Authorization"] = f"Bearer {self.current()}"
        yield request

    def current(self) -> str:
        """The token as the file holds it now. A file that cannot be read for a moment (the
        kubelet swaps it atomically, so it should not happen) leaves the last token in use."""
        stamp = self._stat()
        if stamp is not None and stamp != self._stamp:
            try:
                self._token, self._stamp = read_token(self.path), stamp
                log.info("read the renewed service-account token from %s", self.path)
            except ValueError as error:
                log.warning("%s; sending the token read before", error)
        return self._token

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            stat = os.stat(self.path)
        except OSError as error:
            log.warning("the token file %s cannot be read: %s; sending the token read before",
                        self.path, error.strerror)
            return None
        return stat.st_mtime_ns, stat.st_size, stat.st_ino
