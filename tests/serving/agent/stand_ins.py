"""Small real HTTP servers for the agent's fast tests: an artifact store, a vLLM's runtime LoRA
API, and a registry's active-set protocol. The vLLM stand-in answers as vLLM 0.32 does (DESIGN.md,
"vLLM facts") without a model, so faults on the node's own disk can be tested in seconds. The
registry stand-in serves whatever set (and trust bundle) a test gives it: the agent must not trust
the registry's answer to be well formed or truthful (DESIGN.md, "Trust model"), and the real
registry never sends a malformed entry nor signs with a key it does not publish, so only a
stand-in can test that. Its entries, and its set, are signed as the registry signs them
(signing.py)."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from signed_digests.digests import manifest_digest
from tests.serving.agent.signing import REGISTRY_KEY, Key, attest, bundle, sign_set

BASE = "tiny-base"
POOL = "chat"
VLLM_VERSION = "0.32.0"


class _Server:
    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _Handler(BaseHTTPRequestHandler):
    def answer(self, status: int, body: bytes = b"", content_type: str = "application/json",
               headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def json_body(self) -> Any:
        return json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"null")

    def log_message(self, *args) -> None:
        pass


class Store(_Server):
    """Serves `files` by name; `status` lets a test make it fail."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.status, self.requests = 200, 0
        store = self

        class Handler(_Handler):
            def do_GET(self) -> None:
                store.requests += 1
                self.answer(store.status, store.files.get(self.path.lstrip("/"), b""),
                            "application/octet-stream")

        super().__init__(Handler)


def entry(store: Store, name: str, files: dict[str, bytes], *,
          published: dict[str, bytes] | None = None, pool: str = POOL,
          key: Key | None = REGISTRY_KEY) -> dict:
    """An active-set entry for `files`, attested for `pool` by `key` (None: no attestation); the
    store serves `published` (default: the same bytes)."""
    for file_name, data in (published or files).items():
        store.files[f"{name}/{file_name}"] = data
    specs = [{"name": n, "sha256": hashlib.sha256(d).hexdigest(), "size": len(d)} for n, d in files.items()]
    raw = {"served_name": f"acme/{name}@1", "digest": manifest_digest(specs),
           "files": [{**s, "url": f"{store.url}/{name}/{s['name']}"} for s in specs]}
    return {**raw, "attestation": attest(raw, pool=pool, key=key) if key else None}


class StandInVllm(_Server):
    """vLLM's model list and runtime LoRA endpoints: a load needs the folder to exist (vLLM reads
    it), a second load of a name is a 400, and `loads` keeps every path it was given. `refusal`
    (status, message) makes it refuse every load, as vLLM does a rank too large (a 500)."""

    def __init__(self) -> None:
        self.adapters: dict[str, str] = {}
        self.loads: list[tuple[str, str]] = []
        self.refusal: tuple[int, str] | None = None
        vllm = self

        class Handler(_Handler):
            def do_GET(self) -> None:
                if self.path == "/version":
                    return self.answer(200, json.dumps({"version": VLLM_VERSION}).encode())
                models = [{"id": BASE, "root": BASE, "parent": None, "max_model_len": 512}] + [
                    {"id": name, "root": path, "parent": BASE} for name, path in vllm.adapters.items()]
                self.answer(200, json.dumps({"object": "list", "data": models}).encode())

            def do_POST(self) -> None:
                body = self.json_body()
                name = body.get("lora_name")
                if self.path == "/v1/load_lora_adapter":
                    vllm.loads.append((name, body.get("lora_path")))
                    if vllm.refusal:
                        return self.error(*vllm.refusal)
                    if name in vllm.adapters:
                        return self.error(400, f"The lora adapter '{name}' has already been loaded.")
                    if not Path(body["lora_path"]).is_dir():
                        return self.error(404, f"No adapter found for {body['lora_path']}")
                    vllm.adapters[name] = body["lora_path"]
                    return self.answer(200, f"Success: LoRA adapter '{name}' added successfully.".encode(),
                                       "text/plain")
                if vllm.adapters.pop(name, None) is None:
                    return self.error(404, f"The lora adapter '{name}' cannot be found.")
                self.answer(200, b"Success", "text/plain")

            def error(self, status: int, message: str) -> None:
                self.answer(status, json.dumps({"error": {"message": message, "code": status}}).encode())

        super().__init__(Handler)


class StandInRegistry(_Server):
    """The active-set long-poll (ETag, 304 after a short wait), the node status report and the
    trust bundle (`bundle`, by default one listing REGISTRY_KEY)."""

    def __init__(self, pool: str, entries: list, generation: int = 1) -> None:
        self.active = {"pool": pool, "generation": generation, "entries": entries,
                       "limits": {"max_loras": 2, "max_cpu_loras": 8, "max_lora_rank": 16}}
        self.bundle = bundle(REGISTRY_KEY)
        self.reports: list[dict] = []
        self.bundle_requests = 0
        registry = self

        class Handler(_Handler):
            def do_GET(self) -> None:
                if self.path == "/.well-known/loraplane/trust-bundle.json":
                    registry.bundle_requests += 1
                    return self.answer(200, json.dumps(registry.bundle).encode())
                etag = f'"{registry.active["generation"]}"'
                if self.headers.get("If-None-Match") == etag:
                    time.sleep(0.3)  # a short long-poll: nothing changed
                    return self.answer(304)
                body = registry.active
                if "signed" not in body:  # signed as served, unless a test set its own
                    body = {**body, "signed": sign_set(body["pool"], body["entries"], body["generation"])}
                self.answer(200, json.dumps(body).encode(), headers={"ETag": etag})

            def do_PUT(self) -> None:
                registry.reports.append(self.json_body())
                self.answer(200, b"{}")

        super().__init__(Handler)
