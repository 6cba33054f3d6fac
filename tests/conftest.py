"""Session-wide real services: PostgreSQL, an S3 server and the registry as its own process."""

from __future__ import annotations

import os
import secrets
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from devkit import services
from migrations import runner
from registry.auth.principal import Role
from registry.db import make_engine
from registry.tables import Adapter, AdapterVersion, AuditEvent
from registry.tokens import issuing as token_service
# The evaluation stack's session fixtures, shared by every folder.
from tests.support.eval_stack import eval_engine, eval_worker  # noqa: F401
from tests.support import head_start, lanes
from tests.support.names import BUCKET, KIT_BASE
from tests.support.sso import sso_env
from devkit.units_of_work import unit_of_work

# Every process of one deployment shares LORAPLANE_SECRET_KEY (docs/operations.md): the audit chain
# and every signature are keyed with it, so the registries, workers, CLIs and this process started
# by the tests all hold the same one. This process keeps its own state (audit heads) in a
# temporary folder, not the user's ~/.loraplane.
# Each worker of a run with workers has services of its own (tests/support/lanes.py), so it takes
# folders of its own even where the run that started it set them.
os.environ.setdefault("LORAPLANE_SECRET_KEY", secrets.token_urlsafe(32))
if lanes.worker() or "LORAPLANE_DATA_DIR" not in os.environ:
    os.environ["LORAPLANE_DATA_DIR"] = tempfile.mkdtemp(prefix="loraplane-test-process-")
# Likewise one attestation key folder: the registries that share the session's database must
# sign with, and publish, the same keys (docs/security.md, "Attestation keys").
if lanes.worker() or "LORAPLANE_ATTESTATION_KEY_DIR" not in os.environ:
    os.environ["LORAPLANE_ATTESTATION_KEY_DIR"] = tempfile.mkdtemp(prefix="loraplane-test-keys-")

# The canary checks these tests call in this process judge windows they report themselves, right
# after a step begins: no router's earlier traffic to wait out.
os.environ.setdefault("LORAPLANE_CANARY_GRACE_S", "0")

MAX_UPLOAD_BYTES = 8 * 1024 * 1024
BASE_NAME = "tiny-llama"
REPO = Path(__file__).resolve().parents[1]
SERVING_POOL = "serving"
OTHER_POOL = "serving-other"  # a second pool, so every pool boundary is crossed in the matrix
# name -> (role, tenant, pool) of every test principal; "none" means no token at all. Node and
# router tokens are bound to an id named after the principal.
PRINCIPALS = {
    "global_admin": (Role.ADMIN, None, None),
    "acme_admin": (Role.ADMIN, "acme", None),
    "acme_uploader": (Role.UPLOADER, "acme", None),
    "acme_reviewer": (Role.REVIEWER, "acme", None),
    "serving_node": (Role.NODE, None, SERVING_POOL),
    "serving_router": (Role.ROUTER, None, SERVING_POOL),
    "other_pool_node": (Role.NODE, None, OTHER_POOL),
    "acme_app": (Role.APP, "acme", None),
    "scraper": (Role.METRICS, None, None),
    "globex_admin": (Role.ADMIN, "globex", None),
    "globex_uploader": (Role.UPLOADER, "globex", None),
}


@pytest.fixture(scope="session")
def service_dir() -> Iterator[Path]:
    # Not under pytest's 0700 temp root: the postgres user must reach its data folder.
    folder = Path(tempfile.mkdtemp(prefix="loraplane-tests-"))
    folder.chmod(0o755)
    yield folder
    if not os.environ.get("LORAPLANE_KEEP_TEST_SERVICES"):  # keep logs for a post-mortem
        services.remove_tree(folder)


@pytest.fixture(scope="session")
def postgres(service_dir: Path) -> Iterator[services.Service]:
    server = services.start_postgres(service_dir / "postgres")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def database_url(postgres: services.Service) -> str:
    url = services.create_database(postgres.url, "loraplane")
    runner.upgrade(url)
    return url


@pytest.fixture(scope="session")
def engine(database_url: str) -> Iterator[Engine]:
    engine = make_engine(database_url)
    yield engine
    engine.dispose()


@pytest.fixture(scope="session")
def s3(service_dir: Path) -> Iterator[services.Service]:
    server = services.start_s3(service_dir / "s3")
    services.s3_client(server.url).create_bucket(Bucket=BUCKET)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def s3_client(s3: services.Service):
    return services.s3_client(s3.url)


@pytest.fixture(scope="session")
def redis(service_dir: Path) -> Iterator[services.Service]:
    server = services.start_redis(service_dir / "redis")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def registry(service_dir: Path, database_url: str, s3: services.Service,
             redis: services.Service) -> Iterator[services.Service]:
    server = services.start_registry(service_dir / "registry", {
        "LORAPLANE_DATABASE_URL": database_url,
        "LORAPLANE_BROKER_URL": redis.url,
        "LORAPLANE_STORAGE": "s3",
        "LORAPLANE_S3_ENDPOINT_URL": s3.url,
        "LORAPLANE_S3_BUCKET": BUCKET,
        "LORAPLANE_MAX_UPLOAD_BYTES": str(MAX_UPLOAD_BYTES),
        "LORAPLANE_MAX_ARCHIVE_FILES": "16",
        **REGISTRY_TIMINGS,
    })
    yield server
    server.stop()


@pytest.fixture(scope="session")
def oidc_provider(service_dir: Path) -> Iterator[services.Service]:
    provider = services.start_oidc_provider(service_dir / "oidc-provider")
    yield provider
    provider.stop()


@pytest.fixture(scope="session")
def sso_registry(service_dir: Path, registry: services.Service, oidc_provider: services.Service,
                 tokens: dict[str, str]) -> Iterator[services.Service]:
    """Another registry of the same deployment, whose people sign on through `oidc_provider`
    (tests/support/sso.py has its role mappings)."""
    env = {key: value for key, value in registry.env.items() if key.startswith("LORAPLANE_")}
    env.pop("LORAPLANE_PUBLIC_URL", None)
    env.pop("LORAPLANE_DATA_DIR", None)
    server = services.start_registry(service_dir / "registry-sso", {**env, **sso_env(oidc_provider.url)})
    yield server
    server.stop()


@pytest.fixture(scope="session")
def second_registry(service_dir: Path, registry: services.Service) -> Iterator[services.Service]:
    """Another registry process on the same database, broker and bucket, as behind a load balancer."""
    env = {key: value for key, value in registry.env.items() if key.startswith("LORAPLANE_")}
    env.pop("LORAPLANE_PUBLIC_URL", None)
    env.pop("LORAPLANE_DATA_DIR", None)
    server = services.start_registry(service_dir / "registry-b", env)
    yield server
    server.stop()


# Short enough that tests see nodes go stale and retired versions leave within seconds.
REGISTRY_TIMINGS = {"LORAPLANE_NODE_STALE_AFTER_S": "3", "LORAPLANE_RETIRE_GRACE_S": "0.5",
                    # The tests report traffic windows themselves, right after a step begins.
                    "LORAPLANE_CANARY_GRACE_S": "0",
                    # The tests' webhook receivers listen on loopback.
                    "LORAPLANE_WEBHOOK_ALLOWED_NETWORKS": '["127.0.0.0/8"]'}


@pytest.fixture(scope="session")
def tokens(engine: Engine, tiny_base: Path) -> dict[str, str]:
    """Plain tokens of every test principal, made by the registry's own token service. The
    node token needs its pool, on a base of its own."""
    import json

    from registry.base_models import service as base_models
    from registry.base_models.schemas import BaseModelCreate
    from registry.pools import service as pools
    from registry.pools.schemas import PoolCreate

    plain = {}
    with unit_of_work(engine) as session:
        config = json.loads((tiny_base / "config.json").read_text())
        base_models.register(session, BaseModelCreate(name="serving-base", config=config), actor="tests")
        for pool_name in (SERVING_POOL, OTHER_POOL):
            pools.create(session, PoolCreate(name=pool_name, base_model="serving-base", max_loras=2,
                                             max_cpu_loras=4, max_lora_rank=16), actor="tests")
        for name, (role, tenant, pool) in PRINCIPALS.items():
            _, plain[name] = token_service.create_token(
                session, subject=name, role=role, tenant=tenant, pool=pool, actor="tests",
                instance_id=name.replace("_", "-") if pool else None,
                vllm_url=f"http://{name.replace('_', '-')}.nodes.invalid:8000" if role is Role.NODE else None)
    return plain


@pytest.fixture(scope="session")
def client_for(registry: services.Service, tokens: dict[str, str]) -> Callable[[str], httpx.Client]:
    clients: dict[str, httpx.Client] = {}

    def make(principal: str) -> httpx.Client:
        if principal not in clients:
            headers = {"Authorization": f"Bearer {tokens[principal]}"} if principal != "none" else {}
            clients[principal] = httpx.Client(base_url=registry.url, headers=headers, timeout=120)
        return clients[principal]

    yield make
    for client in clients.values():
        client.close()


@pytest.fixture(scope="session")
def admin(client_for) -> httpx.Client:
    return client_for("global_admin")


@pytest.fixture(scope="session")
def uploader(client_for) -> httpx.Client:
    return client_for("acme_uploader")


# What the fast tier (`-m fast`, ./dev test --fast) may not start: it runs on a bare checkout.
SERVICE_FIXTURES = frozenset({"postgres", "database_url", "engine", "s3", "s3_client", "redis", "registry",
                              "second_registry", "tokens", "client_for", "admin", "uploader", "task_kit",
                              "kit_base", "tiny_base", "base_model", "service_dir"})


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist names each item's lane from its mark
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        needs = SERVICE_FIXTURES.intersection(getattr(item, "fixturenames", ())) - {"service_dir"}
        if item.get_closest_marker("fast") and needs:
            raise pytest.UsageError(f"{item.nodeid} is marked fast but needs {sorted(needs)}")
    lanes.arrange(items)


def pytest_collection_finish(session: pytest.Session) -> None:
    if lanes.worker():
        lanes.check_lanes_held(session.items)


@pytest.fixture(scope="session", autouse=True)
def session_head_start(request: pytest.FixtureRequest, service_dir: Path) -> Iterator[head_start.HeadStart]:
    """Trains the kit and starts the engines its tests use: without workers, at once and at low
    priority while the modules that need no kit run; in a worker, when its lane first asks for
    the kit (only the kit's lane does)."""
    alone = lanes.worker() is None
    started = head_start.HeadStart(REPO / ".cache" / "task-kit", service_dir,
                                   lanes.lane_fixtures(request.session.items), begin_now=alone,
                                   niceness=head_start.BACKGROUND_NICENESS if alone else 0)
    yield started
    started.close()


@pytest.fixture(scope="session")
def task_kit(session_head_start: head_start.HeadStart):
    """A trained base and adapters (about a minute to build), cached in the checkout's .cache."""
    return session_head_start.kit()


def register_base(admin: httpx.Client, name: str, base_dir: Path) -> str:
    import json

    config = json.loads((base_dir / "config.json").read_text())
    response = admin.post("/v1/base-models", json={"name": name, "config": config})
    assert response.status_code == 201, response.text
    return name


@pytest.fixture(scope="session")
def kit_base(admin, task_kit) -> str:
    return register_base(admin, KIT_BASE, task_kit.base_dir)


@pytest.fixture(scope="session")
def tiny_base(tmp_path_factory) -> Path:
    from devkit.tiny_model import build_base_model

    return build_base_model(tmp_path_factory.mktemp("models") / "tiny-llama")


@pytest.fixture(scope="session")
def base_model(admin: httpx.Client, tiny_base: Path) -> str:
    import json

    config = json.loads((tiny_base / "config.json").read_text())
    response = admin.post("/v1/base-models", json={"name": BASE_NAME, "config": config,
                                                   "aliases": [str(tiny_base)]})
    assert response.status_code == 201, response.text
    return BASE_NAME


@pytest.fixture(scope="session")
def make_adapter(tiny_base: Path, tmp_path_factory) -> Callable[..., Path]:
    """Build (once per parameter set) a real PEFT adapter for the tiny base."""
    from devkit.tiny_model import build_adapter

    root = tmp_path_factory.mktemp("adapters")
    built: dict[tuple, Path] = {}

    def make(*, seed: int = 1, r: int = 8, lora_alpha: int = 16,
             target_modules: tuple[str, ...] = ("q_proj", "v_proj")) -> Path:
        key = (seed, r, lora_alpha, target_modules)
        if key not in built:
            out = root / f"s{seed}-r{r}-a{lora_alpha}-{'-'.join(target_modules)}"
            built[key] = build_adapter(tiny_base, out, r=r, lora_alpha=lora_alpha,
                                       target_modules=target_modules, seed=seed,
                                       base_model_name=BASE_NAME)
        return built[key]

    return make


@pytest.fixture
def stored_state(engine: Engine, s3_client) -> Callable[[], dict]:
    """What an upload could leave behind: rows in the database and objects in S3."""

    def snapshot() -> dict:
        with Session(engine) as session:
            counts = {table.__tablename__: session.scalar(select(func.count()).select_from(table))
                      for table in (Adapter, AdapterVersion, AuditEvent)}
        listing = s3_client.list_objects_v2(Bucket=BUCKET)
        return {**counts, "s3_keys": sorted(obj["Key"] for obj in listing.get("Contents", []))}

    return snapshot
