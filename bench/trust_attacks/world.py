"""A small deployment to attack: a pool serving two tenants' versions, a canary under analysis,
a version awaiting approval, one that was rolled back, a real router in front of a node whose
address is bound to a dead port, an impostor server that would answer anything, and a token of
every credential kind. Built through the registry's API as its users would build it; only the
evaluations are recorded as a worker records them (no engine is needed to attack the fleet)."""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from sqlalchemy import Engine, select

from bench.hostile_corpus import synthesize_adapter
from bench.trust_attacks.impostor import Impostor
from devkit import services
from devkit.pipeline_steps import create_suite, evaluations_of, finish_evaluation, request_promotion
from registry.settings import get_settings
from registry.tables import Pool

BASE_NAME, SUITE, POOL, OTHER_POOL = "trust-base", "trust-suite", "trust", "trust-other"
BASE = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
        "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
        "num_hidden_layers": 2, "vocab_size": 256}
LIMITS = {"max_loras": 2, "max_cpu_loras": 8, "max_lora_rank": 16}
CANARY_POLICY = {"window_s": 60, "min_requests": 20, "steps": [{"weight": 10}, {"weight": 50}]}
CHAT, CODE = "acme/trust-chat", "globex/trust-code"
# Every credential kind an attacker may hold, and the people who set the world up.
CREDENTIALS = ("node", "router", "app", "tenant_admin", "uploader", "reviewer", "database_writer")


@dataclass
class World:
    registry_url: str
    router_url: str
    engine: Engine
    impostor: Impostor
    tokens: dict[str, str]
    versions: dict[str, dict] = field(default_factory=dict)  # "chat@1" -> the version's JSON
    canary_id: int = 0
    # The pool's signed active set while code@2 was production: a backup a database writer kept.
    old_signed_set: dict | None = None
    _clients: dict[str, httpx.Client] = field(default_factory=dict)

    def client(self, who: str) -> httpx.Client:
        if who not in self._clients:
            self._clients[who] = httpx.Client(base_url=self.registry_url, timeout=60,
                                              headers={"Authorization": f"Bearer {self.tokens[who]}"})
        return self._clients[who]

    def ask_router(self, who: str, model: str) -> httpx.Response:
        return httpx.post(self.router_url + "/v1/completions", timeout=30,
                          headers={"Authorization": f"Bearer {self.tokens[who]}"},
                          json={"model": model, "prompt": "ACME customer PII: account 4111", "max_tokens": 4})

    def close(self) -> None:
        for client in self._clients.values():
            client.close()


def build(registry_url: str, engine: Engine, admin_token: str, folder: Path) -> tuple[World, list]:
    """The world, and what was started for it (the impostor and the router) for the caller to
    stop. The canary checks this process runs judge windows sent just now: no grace to wait out."""
    if get_settings().canary_grace_s != 0:
        raise RuntimeError("build the trust world with LORAPLANE_CANARY_GRACE_S=0 in this process")
    admin = httpx.Client(base_url=registry_url, timeout=60, headers={"Authorization": f"Bearer {admin_token}"})
    admin.post("/v1/base-models", json={"name": BASE_NAME, "config": BASE}).raise_for_status()
    create_suite(admin, SUITE, BASE_NAME, [{"prompt": "1 =>", "reference": "one"}],
                 {"exact_match": {"min": 0.5}, "parity": {"max_logprob_diff": 0.01}})
    for name in (POOL, OTHER_POOL):
        admin.post("/v1/pools", json={"name": name, "base_model": BASE_NAME, "dtype": "float32",
                                      "required_suites": [SUITE], **LIMITS}).raise_for_status()
    tokens = {"global_admin": admin_token, **{who: _token(admin, **scope) for who, scope in {
        "tenant_admin": {"subject": "admin@acme", "role": "admin", "tenant": "acme"},
        "uploader": {"subject": "uploader@acme", "role": "uploader", "tenant": "acme"},
        "reviewer": {"subject": "reviewer@acme", "role": "reviewer", "tenant": "acme"},
        "second_reviewer": {"subject": "reviewer-2@acme", "role": "reviewer", "tenant": "acme"},
        "globex_uploader": {"subject": "uploader@globex", "role": "uploader", "tenant": "globex"},
        "globex_reviewer": {"subject": "reviewer@globex", "role": "reviewer", "tenant": "globex"},
        "app": {"subject": "app@acme", "role": "app", "tenant": "acme"},
        "node": {"subject": "node-1", "role": "node", "pool": POOL, "instance_id": "node-1",
                 "vllm_url": f"http://127.0.0.1:{_dead_port()}"},
        "router": {"subject": "router-1", "role": "router", "pool": POOL, "instance_id": "router-1"},
    }.items()}}
    impostor = Impostor().__enter__()
    world = World(registry_url, "", engine, impostor, tokens)
    for adapter, uploader, count, seeds in ((CHAT, "uploader", 4, 0), (CODE, "globex_uploader", 2, 10)):
        for seed in range(1, count + 1):
            version = upload(world.client(uploader), adapter, seeds + seed)
            for evaluation in evaluations_of(admin, version):
                finish_evaluation(engine, evaluation["id"])
            world.versions[f"{adapter.split('/')[1].removeprefix('trust-')}@{seed}"] = version
    _promote(world, "uploader", "reviewer", "chat@1")
    _promote(world, "globex_uploader", "globex_reviewer", "code@1")
    _promote(world, "globex_uploader", "globex_reviewer", "code@2")
    with engine.connect() as connection:
        world.old_signed_set = connection.scalar(select(Pool.signed_active_set).where(Pool.name == POOL))
    world.client("globex_reviewer").post(f"/v1/pools/{POOL}/aliases/{CODE}/production/rollback",
                                         json={"comment": "code@2 rolled back"}).raise_for_status()
    # The canary: requested by the reviewer, approved by a second reviewer.
    canary = world.client("reviewer").post(f"/v1/pools/{POOL}/promotions", json={
        "adapter": CHAT, "version": 2, "alias": "canary", "analysis": CANARY_POLICY})
    canary.raise_for_status()
    world.canary_id = canary.json()["id"]
    world.client("second_reviewer").post(f"/v1/promotions/{world.canary_id}/approve",
                                         json={"comment": "canary"}).raise_for_status()
    active = admin.get(f"/v1/pools/{POOL}/active-set").json()
    impostor.listed = {e["served_name"]: f"/cache/{e['digest']}" for e in active["entries"]}
    world.client("node").put(f"/v1/pools/{POOL}/nodes/node-1/status", json={
        "generation": active["generation"], "limits": LIMITS,
        "loaded": [{"served_name": e["served_name"], "digest": e["digest"]} for e in active["entries"]]
    }).raise_for_status()
    router = services.start_router(folder / "router", pool=POOL, registry_url=registry_url, token=tokens["router"],
                                   settings={"LORAPLANE_ROUTER_NODES_POLL_S": "0.5",
                                             "LORAPLANE_ROUTER_TRAFFIC_REPORT_S": "3600"})
    world.router_url = router.url
    admin.close()
    return world, [router]


def prompts_reach_impostor(world: World, seconds: float = 3.0) -> bool:
    """Ask the router for acme's adapter for a while (its node poll is 0.5 s): did a prompt
    reach the impostor?"""
    before = len(world.impostor.prompts)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        world.ask_router("app", CHAT)
        time.sleep(0.25)
    return len(world.impostor.prompts) > before


def _token(admin: httpx.Client, **body) -> str:
    response = admin.post("/v1/tokens", json=body)
    response.raise_for_status()
    return response.json()["token"]


def upload(client: httpx.Client, adapter: str, seed: int) -> dict:
    files = synthesize_adapter(BASE, BASE_NAME, seed=seed).files()
    response = client.post(f"/v1/adapters/{adapter}/versions", files=[("file", f) for f in files])
    response.raise_for_status()
    return response.json()


def _promote(world: World, requester: str, approver: str, key: str) -> None:
    created = request_promotion(world.client(requester), POOL, world.versions[key])
    created.raise_for_status()
    world.client(approver).post(f"/v1/promotions/{created.json()['id']}/approve",
                                json={"comment": "setup"}).raise_for_status()


def _dead_port() -> int:
    """A port nothing listens on: where the honest node-1's engine would be."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
