"""A whole serving pool for the router benchmarks: Postgres, S3, one registry, N real vLLMs on CPU
each with its agent, adapters promoted into the pool, and the router in front.

    with serving_pool(work, nodes=2, max_cpu_loras=3, adapters=5) as pool:
        pool.router.url, pool.app_key, pool.vllms[0].url, pool.served_names

Evaluations are recorded as passed, not run: what the benchmarks time is serving, not evaluation.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from devkit import services
from devkit.pipeline_steps import create_suite, promoter
from devkit.services import wait_for
from devkit.task_kit import TaskKit, build_task_kit
from devkit.tiny_model import build_adapter
from registry.auth.principal import Role
from registry.db import make_engine
from registry.tokens import issuing as tokens
from devkit.units_of_work import unit_of_work

REPO = Path(__file__).resolve().parents[1]
BUCKET, BASE, POOL, TENANT = "bench", "tiny-task-llama", "bench-serving", "acme"
PROMPT = "digits: 4 7 1 =>"


def adapter_name(index: int) -> str:
    """The index-th bench adapter's name; every name of one length, so that a set's size grows
    with its count alone (not with the digits of its last index)."""
    return f"{TENANT}/bench-{index:04d}"


@dataclass
class ServingPool:
    kit: TaskKit
    registry: services.Service
    vllms: list[services.Service]
    agents: list[services.Service]
    router: services.Service
    app_key: str
    node_tokens: dict[str, str]  # node id -> its own token
    router_token: str
    served_names: list[str] = field(default_factory=list)  # tenant/name@N, one per adapter
    admin_token: str = ""
    uploader_token: str = ""
    database_url: str = ""

    @property
    def adapter_names(self) -> list[str]:
        return [name.split("@")[0] for name in self.served_names]

    def agent_cache(self, index: int) -> Path:
        return Path(self.agents[index].env["LORAPLANE_AGENT_STATE_DIR"]) / "cache"

    def restart_agent(self, index: int) -> None:
        """Start node `index`'s agent again (after `agents[index].stop()`), as it was."""
        folder = Path(self.agents[index].env["LORAPLANE_AGENT_STATE_DIR"]).parent
        self.agents[index] = services.start_agent(
            folder, pool=POOL, vllm_url=self.vllms[index].url, registry_url=self.registry.url,
            token=self.node_tokens[f"node-{index}"], node_id=f"node-{index}",
            metrics_port=services.free_port())


@contextlib.contextmanager
def serving_pool(work: Path, *, nodes: int, max_cpu_loras: int, adapters: int,
                 router_settings: dict[str, str] | None = None, folders: list[Path] | None = None,
                 resolver: bool = False) -> Iterator[ServingPool]:
    """`folders`: promote these adapters rather than `adapters` random ones. `resolver`: each vLLM
    loads loraplane's resolver plugin and its agent answers it (loading ahead as usual)."""
    kit = build_task_kit(REPO / ".cache" / "task-kit", base_model_name=BASE)
    work.chmod(0o755)  # the postgres user must reach its data folder
    running: list[services.Service] = []
    agents: list[services.Service] = []
    try:
        database_url, s3 = services.start_database_and_store(work, running, BUCKET)
        registry = services.start_registry(work / "registry", services.registry_env(database_url, s3, BUCKET),
                                           "--no-access-log")
        running.append(registry)
        engine = make_engine(database_url)
        plain = _tokens(engine)
        admin = _client(registry, plain["admin"])
        uploader = _client(registry, plain["uploader"])
        scoped = _set_up_pool(admin, kit, max_cpu_loras, nodes)
        vllms = []
        for index in range(nodes):
            folder = work / f"node-{index}"
            socket = folder / "resolver.sock"
            vllm = services.start_vllm(folder, services.kit_engine(kit, BASE, max_cpu_loras=max_cpu_loras),
                                       env={"LORAPLANE_RESOLVER_SOCKET": str(socket)} if resolver else None)
            running.append(vllm)
            admin.put(f"/v1/pools/{POOL}/nodes/node-{index}/address",
                      json={"vllm_url": vllm.url}).raise_for_status()
            agent = services.start_agent(folder / "agent", pool=POOL, vllm_url=vllm.url,
                                         registry_url=registry.url, token=scoped[f"node-{index}"],
                                         node_id=f"node-{index}", metrics_port=services.free_port(),
                                         settings={"LORAPLANE_AGENT_RESOLVER": "on",
                                                   "LORAPLANE_AGENT_RESOLVER_SOCKET": str(socket)}
                                         if resolver else None)
            running.append(agent)
            vllms.append(vllm)
            agents.append(agent)
        _wait_until_live(admin, nodes)
        promote = promoter(admin, uploader, engine, POOL, "bench-parity")
        served = []
        if folders is None:
            folders = [build_adapter(kit.base_dir, work / f"adapter-{index}", seed=100 + index,
                                     base_model_name=BASE) for index in range(adapters)]
        for index, folder in enumerate(folders):
            version = promote(adapter_name(index), folder)
            served.append(version["served_name"])
        _wait_until_served(admin, set(served), nodes)
        router = services.start_router(work / "router", pool=POOL, registry_url=registry.url,
                                       token=scoped["router"], settings=router_settings)
        running.append(router)
        admin.close()
        uploader.close()
        engine.dispose()
        node_tokens = {f"node-{index}": scoped[f"node-{index}"] for index in range(nodes)}
        yield ServingPool(kit, registry, vllms, agents, router, scoped["app"], node_tokens,
                          scoped["router"], served, plain["admin"], plain["uploader"], database_url)
    finally:
        for agent in agents:  # the pool's list, with any restarted agent in it
            agent.stop()
        for service in reversed(running):
            service.stop()


def _tokens(engine) -> dict[str, str]:
    plain = {}
    with unit_of_work(engine) as session:
        for name, role, tenant in (("admin", Role.ADMIN, None), ("uploader", Role.UPLOADER, TENANT)):
            _, plain[name] = tokens.create_token(session, subject=f"bench-{name}", role=role,
                                                 tenant=tenant, actor="bench")
    return plain


def _client(registry: services.Service, token: str) -> httpx.Client:
    return httpx.Client(base_url=registry.url, timeout=60, headers={"Authorization": f"Bearer {token}"})


def _set_up_pool(admin: httpx.Client, kit: TaskKit, max_cpu_loras: int, nodes: int) -> dict[str, str]:
    """The base model, a parity suite, the pool, and its node, router and app tokens."""
    config = httpx.Response(200, content=(kit.base_dir / "config.json").read_bytes()).json()
    admin.post("/v1/base-models", json={"name": BASE, "config": config}).raise_for_status()
    create_suite(admin, "bench-parity", BASE, kit.suites["digits_to_words"][:2],
                 {"parity": {"max_logprob_diff": 0.01}})
    admin.post("/v1/pools", json={"name": POOL, "base_model": BASE, "max_loras": 2,
                                  "max_cpu_loras": max_cpu_loras, "max_lora_rank": 16,
                                  "dtype": "float32"}).raise_for_status()
    # One token per node, each bound to its node id, as a real fleet holds them.
    # Each node's address is bound again once its vLLM is up (its port is known only then).
    scopes = {**{f"node-{index}": {"role": "node", "pool": POOL, "instance_id": f"node-{index}",
                                   "vllm_url": "http://127.0.0.1:9"}
                 for index in range(nodes)},
              "router": {"role": "router", "pool": POOL, "instance_id": "bench-router"},
              "app": {"role": "app", "tenant": TENANT}}
    plain = {}
    for name, scope in scopes.items():
        response = admin.post("/v1/tokens", json={"subject": f"bench-{name}", **scope})
        response.raise_for_status()
        plain[name] = response.json()["token"]
    return plain


def _rollout(admin: httpx.Client) -> list[dict]:
    return admin.get(f"/v1/pools/{POOL}/rollout").json()["nodes"]


def _wait_until_live(admin: httpx.Client, nodes: int) -> None:
    """Every agent has reported, so the capacity gate counts every node's slots."""
    wait_for(lambda: sum(not n["stale"] for n in _rollout(admin)) == nodes, timeout_s=60,
             what=f"{nodes} live nodes")


def _wait_until_served(admin: httpx.Client, names: set[str], nodes: int) -> None:
    """Every node holds its part of the placement (all of it, while the set fits on one)."""
    def done() -> bool:
        rollout = _rollout(admin)
        serving = set().union(*(n["serving"] for n in rollout))
        return names <= serving and sum(n["converged"] for n in rollout) == nodes

    wait_for(done, timeout_s=300, what=f"{len(names)} adapters placed on {nodes} nodes")
