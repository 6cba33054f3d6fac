"""The demo's tenant, base model, pool, suite and tokens, made through the registry's API.

Safe to run again: what exists is kept, and tokens saved by an earlier run are reused while the
registry still accepts them. Everything `loraplane demo` needs is saved in `demo.json` (mode
0600, since it holds tokens)."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

from loraplane_client.connection import checked

TENANT = "demo"
POOL = "demo"
SUITE = "demo-tasks"
BASE_MODEL = "tiny-task-llama"  # the task kit's base; its adapter_config.json names it
NODE_ID = "local-node"
ROUTER_ID = "local-router"
# The node's vLLM is started with these too: the agent loads what the pool admits.
POOL_LIMITS = {"max_loras": 2, "max_cpu_loras": 4, "max_lora_rank": 16, "dtype": "float32"}
# Held-out prompts of both kit tasks. An adapter solves one task, so a good one answers half of
# them exactly and the base none: the pool admits an adapter that has learnt its task.
SUITE_ROWS_PER_TASK = 12
SUITE_METRICS = {"exact_match": {"min": 0.45}, "parity": {"max_logprob_diff": 0.01}}

# name -> (role, scope) of each demo token; the subjects are who the audit log names.
TOKENS = {
    "uploader": {"subject": "ml-engineer", "role": "uploader", "tenant": TENANT},
    "reviewer": {"subject": "reviewer", "role": "reviewer", "tenant": TENANT},
    "app": {"subject": "demo-app", "role": "app", "tenant": TENANT},
    "node": {"subject": NODE_ID, "role": "node", "pool": POOL, "instance_id": NODE_ID},
    "router": {"subject": ROUTER_ID, "role": "router", "pool": POOL, "instance_id": ROUTER_ID},
}


@dataclass
class DemoSetup:
    registry_url: str
    router_url: str
    kit_dir: str
    tokens: dict[str, str]
    tenant: str = TENANT
    pool: str = POOL
    suite: str = SUITE
    base_model: str = BASE_MODEL

    @classmethod
    def load(cls, path: Path) -> DemoSetup:
        return cls(**json.loads(path.read_text()))

    def save(self, path: Path) -> None:
        staging = path.with_name(f".{path.name}.{os.getpid()}")
        descriptor = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as file:
            json.dump(asdict(self), file, indent=2)
        os.replace(staging, path)


def seed(registry: httpx.Client, kit, saved: DemoSetup | None, *, registry_url: str,
         router_url: str, node_url: str) -> DemoSetup:
    """`registry` carries the admin token; `kit` is the built task kit; `node_url` is where the
    router reaches the node's vLLM, bound to the node (routers never take a node's word for it)."""
    _ensure(registry, f"/v1/base-models/{BASE_MODEL}", "/v1/base-models",
            {"name": BASE_MODEL, "config": json.loads((kit.base_dir / "config.json").read_text())})
    rows = [row for task in ("digits_to_words", "reverse_words") for row in kit.suites[task][:SUITE_ROWS_PER_TASK]]
    _ensure(registry, f"/v1/eval-suites/{SUITE}", "/v1/eval-suites",
            {"name": SUITE, "base_model": BASE_MODEL, "examples": rows, "metrics": SUITE_METRICS,
             "generation": {"max_tokens": 16}})
    # One router on one machine: the demo's operator trusts it to decide canaries alone.
    _ensure(registry, f"/v1/pools/{POOL}", "/v1/pools",
            {"name": POOL, "base_model": BASE_MODEL, "required_suites": [SUITE], "canary_min_routers": 1,
             **POOL_LIMITS})
    pool = checked(registry.get(f"/v1/pools/{POOL}"))
    if pool.get("canary_min_routers") != 1:  # a folder seeded before the setting existed
        checked(registry.patch(f"/v1/pools/{POOL}", json={"canary_min_routers": 1}))
    checked(registry.put(f"/v1/pools/{POOL}/nodes/{NODE_ID}/address", json={"vllm_url": node_url}))
    tokens = {name: _token(registry, name, saved.tokens.get(name) if saved else None) for name in TOKENS}
    return DemoSetup(registry_url=registry_url, router_url=router_url, kit_dir=str(kit.root), tokens=tokens)


def _ensure(registry: httpx.Client, path: str, create_path: str, body: dict) -> None:
    found = registry.get(path)
    if found.status_code == 404:
        checked(registry.post(create_path, json=body))
    else:
        checked(found)


def _token(registry: httpx.Client, name: str, saved: str | None) -> str:
    """The saved token while it is accepted and still bound as this demo needs (a token from
    before node and router tokens were bound to their id is replaced)."""
    if saved:
        who = registry.get("/v1/whoami", headers={"Authorization": f"Bearer {saved}"})
        if who.status_code == 200 and who.json().get("instance_id") == TOKENS[name].get("instance_id"):
            return saved
    return checked(registry.post("/v1/tokens", json=TOKENS[name]))["token"]
