"""An HTTP server where no real engine is: what an attacker would run at an address of their
choosing. It lists whatever adapters it is told to in /v1/models, answers every completion with
its own text, and counts the prompts that reached it. Runs in a thread, for synchronous tests
and the trust benchmark."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STOLEN = "the impostor's answer"


class Impostor:
    def __init__(self, listed: dict[str, str] | None = None) -> None:
        """`listed`: served name -> the folder it claims to have loaded it from."""
        self.listed = listed or {}
        self.prompts: list[dict] = []
        impostor = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                models = [{"id": name, "object": "model", "root": root, "parent": "base"}
                          for name, root in impostor.listed.items()]
                self._answer({"object": "list", "data": models})

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                impostor.prompts.append(json.loads(body or b"{}"))
                self._answer({"model": "x", "choices": [{"index": 0, "text": STOLEN}]})

            def _answer(self, document: dict) -> None:
                data = json.dumps(document).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> "Impostor":
        self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self._server.shutdown()
        self._server.server_close()
