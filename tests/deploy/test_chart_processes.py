"""The chart's pods run as processes: the migration Job, the registry, the housekeeper, a worker,
a serving pool's pod (vLLM on CPU with the agent as its sidecar) and the router, each container
with the exact command, args and env the chart renders (tests/deploy/kubelet.py says what is
translated: images to the local virtual environments, pods to loopback addresses, volumes to
folders, Services' names to their pods). Every probe must answer, and a promotion approved
through the registry must be loaded into the pod's vLLM and answered through the router. A wrong
flag, variable, port or probe path in the chart fails here.

What the cluster would do is done by the test: the projected service-account token is signed
with an issuer key made here (its JWKS is the ConfigMap the chart mounts into the registry), and
the pool's EndpointSlice is served by kmock's Kubernetes API emulator, written once the pod is
ready, as the EndpointSlice controller would. Postgres, Redis and S3 are the suite's servers, as
the external services the chart expects. One vLLM runs: the pool's. The worker's own engine is
not started (the suite runs at most a few engines at once), so the worker is checked to start and
answer its probe, and the evaluation a promotion needs is recorded as a worker records one."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from devkit import services
from devkit.pipeline_steps import create_suite, evaluations_of, finish_evaluation, request_promotion, upload_dir
from devkit.units_of_work import unit_of_work
from registry.auth.principal import Role
from registry.db import make_engine
from registry.tokens import issuing
from tests.conftest import BASE_NAME
from tests.deploy.chart import example, name, objects
from tests.deploy.kubelet import Cluster, Pod
from tests.serving.router.kube_api import NAMESPACE, ApiInThread, endpoint, endpoint_slice
from tests.support.k8s_issuer import jwks, mint, pod_claims, rsa_key

pytestmark = pytest.mark.own_engine

BUCKET, POOL = "chart-artifacts", "laptop"
ISSUER = "https://kubernetes.default.svc.cluster.local"  # the chart's default


def chart_values(s3_url: str) -> dict:
    """The laptop profile as a user installs it, with the test's base and S3 server."""
    values = example("cpu-laptop")
    values["baseModel"] = {**values["baseModel"], "name": BASE_NAME}
    values["s3"] = {**values["s3"], "endpointUrl": s3_url, "bucket": BUCKET}
    return values


def attestation_key() -> str:
    return Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()


def client(pod: Pod, port: int, token: str) -> httpx.Client:
    return httpx.Client(base_url=f"http://{pod.address}:{port}", headers={"Authorization": f"Bearer {token}"},
                        timeout=60)


@pytest.fixture(scope="module")
def deployment(service_dir: Path, postgres, redis, s3, s3_client, tiny_base: Path) -> Iterator[dict]:
    values = chart_values(s3.url)
    items = objects(values, namespace=NAMESPACE)
    workloads = {i["metadata"]["name"]: i for i in items if i["kind"] in ("Deployment", "StatefulSet", "Job")}
    database = services.create_database(postgres.url, "chart")
    s3_client.create_bucket(Bucket=BUCKET)
    issuer_key = rsa_key("chart-issuer")
    cluster = Cluster(service_dir / "chart", NAMESPACE, items, secrets={
        "loraplane-database": {"database-url": database},
        # a queue of its own: the suite's workers and housekeepers must not take this one's tasks
        "loraplane-redis": {"redis-url": redis.url.rsplit("/", 1)[0] + "/6"},
        "loraplane-secret-key": {"secret-key": os.environ["LORAPLANE_SECRET_KEY"]},
        "loraplane-attestation": {"attestation-private-key": attestation_key()},
        "loraplane-s3": {"access-key-id": "test", "secret-access-key": "test"},
        "loraplane-router-tokens": {},
    }, config_maps={"loraplane-k8s-jwks": {"jwks.json": json.dumps(jwks(issuer_key))}},
        volumes={"base-model": tiny_base})
    api = ApiInThread().__enter__()
    kube = api.api
    try:
        # The Job first, as the pre-install hook: the registry starts on the schema it made.
        job = cluster.pod(workloads[name("migrate")], f"{name('migrate')}-x7k2p")
        assert job.run_to_completion("migrate", timeout_s=300) == 0, job.log("migrate")

        registry = cluster.pod(workloads[name("registry")], f"{name('registry')}-6d9f7c-q4x8z")
        registry.start("registry")
        # The pool's pod is scheduled meanwhile: its vLLM loads the model (the slowest start here)
        # while the rest comes up; the agent beside it starts once its pool exists.
        statefulset = workloads[name(f"pool-{POOL}")]
        node = cluster.pod(statefulset, f"{statefulset['metadata']['name']}-0")
        node.start("vllm")
        registry.wait_for_probe("registry", "startupProbe")
        registry.wait_for_probe("registry", "readinessProbe", timeout_s=30)

        engine = make_engine(database)
        plain: dict[str, str] = {}

        def issue(principal: str, role: Role, tenant: str | None = None, pool: str | None = None) -> None:
            with unit_of_work(engine) as session:  # an operator's `loraplane token create`
                _, plain[principal] = issuing.create_token(
                    session, subject=f"chart-{principal}", role=role, tenant=tenant, pool=pool, actor="tests",
                    instance_id="router-1" if role is Role.ROUTER else None)

        issue("admin", Role.ADMIN)
        issue("uploader", Role.UPLOADER, "acme")
        issue("app", Role.APP, "acme")
        registry_port = int(registry.container("registry")["ports"][0]["containerPort"])
        admin = client(registry, registry_port, plain["admin"])
        config = json.loads((tiny_base / "config.json").read_text())
        assert admin.post("/v1/base-models", json={"name": BASE_NAME, "config": config}).status_code == 201
        pool = values["pools"][0]
        created = admin.post("/v1/pools", json={"name": POOL, "base_model": BASE_NAME, "max_loras": pool["maxLoras"],
                                                "max_cpu_loras": pool["maxCpuLoras"],
                                                "max_lora_rank": pool["maxLoraRank"], "dtype": pool["dtype"]})
        assert created.status_code == 201, created.text
        issue("router", Role.ROUTER, pool=POOL)
        cluster.secrets["loraplane-router-tokens"][f"router-token-{POOL}"] = plain["router"]

        housekeeper = cluster.pod(workloads[name("housekeeper")], f"{name('housekeeper')}-7b5d9-m2n4k")
        housekeeper.start("housekeeper")
        worker = cluster.pod(workloads[name("worker")], f"{name('worker')}-5c8b6-t9w3r")
        worker.start("worker")
        # The router starts meanwhile too; it learns of the pool's pod from the EndpointSlice.
        router = cluster.pod(workloads[name(f"router-{POOL}")], f"{name(f'router-{POOL}')}-84f6d-z5c2v")
        # Outside a pod there is no in-cluster API: the emulator's address stands for it.
        router.start("router", extra_env={"LORAPLANE_ROUTER_K8S_API_URL": kube.url})

        # The kubelet writes the pod's projected token and starts the agent.
        projected = next(v for v in node.spec["volumes"] if "projected" in v)
        source = projected["projected"]["sources"][0]["serviceAccountToken"]
        claims = pod_claims(ISSUER, namespace=NAMESPACE, service_account=node.spec["serviceAccountName"],
                            pod=node.name, audience=source["audience"], lifetime_s=source["expirationSeconds"])
        (node.folders[projected["name"]] / source["path"]).write_text(mint(issuer_key, claims))
        node.start("agent")
        node.wait_for_probe("vllm", "startupProbe")
        node.wait_for_probe("agent", "readinessProbe", timeout_s=60)

        # Ready: the EndpointSlice controller lists the pod under the headless Service.
        service_name = statefulset["spec"]["serviceName"]
        service = next(i for i in items if i["kind"] == "Service" and i["metadata"]["name"] == service_name)
        [port] = service["spec"]["ports"]
        container_port = next(p["containerPort"] for p in node.container("vllm")["ports"]
                              if p["name"] == port["targetPort"])
        api.call(kube.create(endpoint_slice(f"{service_name}-abcde", endpoint(node.name, node.address),
                                            port=container_port, port_name=port["name"], service=service_name)))

        router.wait_for_probe("router", "readinessProbe", timeout_s=60)
        for pod, container in ((housekeeper, "housekeeper"), (worker, "worker")):
            pod.wait_for_probe(container, "livenessProbe", timeout_s=60)

        yield {"cluster": cluster, "registry": registry, "node": node, "router": router, "worker": worker,
               "housekeeper": housekeeper, "engine": engine, "plain": plain, "admin": admin,
               "registry_port": registry_port}
        admin.close()
        engine.dispose()
    finally:
        cluster.stop()
        api.__exit__(None, None, None)


def test_every_container_runs_and_answers_its_probes(deployment):
    cluster: Cluster = deployment["cluster"]
    answers = {f"{pod.name}/{container}": pod.probes(container)
               for pod in cluster.pods.values() for container in pod.running}
    assert {"registry", "housekeeper", "worker", "agent", "vllm", "router"} == {
        key.rsplit("/", 1)[1] for key in answers}
    failing = {key: probes for key, probes in answers.items() if not all(probes.values())}
    assert failing == {}
    assert all(answers.values())  # each container has a probe the kubelet asks


def test_the_pool_s_pod_is_its_node_by_the_pod_s_name(deployment):
    node, admin = deployment["node"], deployment["admin"]
    rollout = services.wait_for(lambda: (r := admin.get(f"/v1/pools/{POOL}/rollout").json())["nodes"] and r,
                                timeout_s=60, what="the node's first report")
    assert [n["node_id"] for n in rollout["nodes"]] == [node.name]
    assert rollout["nodes"][0]["limits"]["max_cpu_loras"] == 4


def test_an_approved_promotion_is_loaded_by_the_pod_and_answered_through_the_router(deployment, make_adapter):
    registry, node, router = deployment["registry"], deployment["node"], deployment["router"]
    plain, admin = deployment["plain"], deployment["admin"]
    # With no engine of its own here, the worker would claim the evaluation and fail it.
    deployment["worker"].stop()
    uploader = client(registry, deployment["registry_port"], plain["uploader"])
    version = upload_dir(uploader, "acme/chat", make_adapter(seed=7))
    create_suite(admin, "chart-parity", BASE_NAME, [{"prompt": "1 2 =>", "reference": "one two"}],
                 {"parity": {"max_logprob_diff": 0.01}})
    path = f"/v1/adapters/acme/chat/versions/{version['number']}/evaluations"
    assert admin.post(path, json={"suite": "chart-parity"}).status_code in (200, 202)
    for evaluation in evaluations_of(admin, version):
        finish_evaluation(deployment["engine"], evaluation["id"])
    requested = request_promotion(uploader, POOL, version)
    assert requested.status_code == 201, requested.text
    approved = admin.post(f"/v1/promotions/{requested.json()['id']}/approve", json={"comment": "ok"})
    assert approved.status_code == 200, approved.text
    served = f"acme/chat@{version['number']}"

    vllm_port = node.container("vllm")["ports"][0]["containerPort"]
    services.wait_for(lambda: served in {m["id"] for m in httpx.get(
        f"http://{node.address}:{vllm_port}/v1/models", timeout=10).json()["data"]},
        timeout_s=120, what=f"{served} loaded in the pod's vLLM")

    router_port = router.container("router")["ports"][0]["containerPort"]
    with client(router, router_port, plain["app"]) as app:
        def answered() -> dict | None:
            answer = app.post("/v1/completions", json={"model": "acme/chat", "prompt": "1 2 =>", "max_tokens": 4})
            return answer.json() if answer.status_code == 200 else None

        answer = services.wait_for(answered, timeout_s=90, what="the router to answer for acme/chat")
    assert answer["model"] == served and answer["choices"][0]["text"]
    assert all(node.probes("vllm").values()) and all(node.probes("agent").values())
    uploader.close()


def test_nothing_is_written_outside_the_mounted_volumes(deployment):
    """Every container's root filesystem is read-only: a process that writes to its home or
    working folder (a cache, a Celery schedule) would fail in the cluster."""
    cluster: Cluster = deployment["cluster"]
    assert {pod.name: writes for pod in cluster.pods.values() if (writes := pod.unmounted_writes())} == {}
