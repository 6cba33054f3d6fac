"""A Kubernetes service-account issuer for tests: signing keys made here, its OIDC discovery
document and JWKS served by a real HTTP server on loopback (as the API server serves
/.well-known/openid-configuration and /openid/v1/jwks), and pods' projected tokens minted with the
claims a kubelet's TokenRequest gets."""

from __future__ import annotations

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from joserfc import jwt
from joserfc.jwk import ECKey, OctKey, RSAKey

AUDIENCE = "loraplane"


def rsa_key(kid: str) -> RSAKey:
    return RSAKey.generate_key(2048, parameters={"kid": kid, "use": "sig", "alg": "RS256"})


def ec_key(kid: str) -> ECKey:
    return ECKey.generate_key("P-256", parameters={"kid": kid, "use": "sig", "alg": "ES256"})


def jwks(*keys: RSAKey | ECKey) -> dict[str, Any]:
    return {"keys": [key.as_dict(private=False) for key in keys]}


class Issuer:
    """The issuer's discovery document and JWKS over HTTP. `keys` is what the JWKS holds now (a
    rotation replaces it); `requests` counts what was asked, by path."""

    def __init__(self, *keys: RSAKey | ECKey) -> None:
        self.keys = list(keys)
        self.requests: dict[str, int] = {}
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                issuer.requests[self.path] = issuer.requests.get(self.path, 0) + 1
                if self.path == "/.well-known/openid-configuration":
                    body = {"issuer": issuer.url, "jwks_uri": f"{issuer.url}/openid/v1/jwks",
                            "response_types_supported": ["id_token"], "subject_types_supported": ["public"],
                            "id_token_signing_alg_values_supported": ["RS256", "ES256"]}
                elif self.path == "/openid/v1/jwks":
                    body = jwks(*issuer.keys)
                else:
                    self.send_response(404)
                    self.end_headers()
                    return
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def key_fetches(self) -> int:
        return self.requests.get("/openid/v1/jwks", 0)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def pod_claims(issuer: str, *, namespace: str = "llm", service_account: str = "loraplane-pool-a",
               pod: str | None = "node-a-0", pod_uid: str | None = None, audience: str | list[str] = AUDIENCE,
               lifetime_s: int = 3600, issued_at: int | None = None) -> dict[str, Any]:
    """The claims of a pod's projected token, as the API server writes them."""
    now = int(time.time()) if issued_at is None else issued_at
    bound: dict[str, Any] = {
        "namespace": namespace,
        "node": {"name": "kind-worker", "uid": str(uuid.uuid4())},
        "serviceaccount": {"name": service_account, "uid": str(uuid.uuid4())},
    }
    if pod is not None:
        bound["pod"] = {"name": pod, "uid": pod_uid or str(uuid.uuid4())}
    return {"aud": audience if isinstance(audience, list) else [audience], "exp": now + lifetime_s,
            "iat": now, "nbf": now, "iss": issuer, "jti": str(uuid.uuid4()), "kubernetes.io": bound,
            "sub": f"system:serviceaccount:{namespace}:{service_account}"}


def mint(key: RSAKey | ECKey | OctKey, claims: dict[str, Any], *, alg: str | None = None,
         kid: str | None = None) -> str:
    """A token signed by `key` (its own kid and algorithm unless told otherwise)."""
    algorithm = alg or ("ES256" if isinstance(key, ECKey) else "RS256")
    header = {"alg": algorithm, "kid": kid or key.kid}
    return jwt.encode(header, claims, key, algorithms=[algorithm])


def unsigned(claims: dict[str, Any], kid: str) -> str:
    """A token with alg none: a header and claims and no signature at all."""
    import base64

    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'none', 'kid': kid})}.{part(claims)}."


def start_k8s_registry(folder, registry, issuer_url: str, accounts: dict[str, str],
                       **settings: str):
    """Another registry process of the test deployment (its database, broker and bucket) that
    admits pods' tokens of `issuer_url`; `settings` are more LORAPLANE_K8S_* variables."""
    from devkit import services

    env: dict[str, str | None] = {key: value for key, value in registry.env.items()
                                  if key.startswith("LORAPLANE_")}
    env.pop("LORAPLANE_PUBLIC_URL", None)
    env.pop("LORAPLANE_DATA_DIR", None)
    env.update({"LORAPLANE_K8S_ISSUER": issuer_url, "LORAPLANE_K8S_SERVICE_ACCOUNTS": json.dumps(accounts),
                **settings})
    return services.start_registry(folder, env)
