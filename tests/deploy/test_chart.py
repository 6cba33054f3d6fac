"""The Helm chart renders with the real Helm engine for each profile, lints strictly, and every
object it renders is valid Kubernetes for the oldest and newest versions it supports. Then the
facts a cluster would hold it to: probes where the processes answer, locked-down containers, the
migration as a hook, secrets only referenced, and per pool the vLLM, agent, Service, identity and
policy that the registry and router expect."""

from __future__ import annotations

import json
import re

import helm_python
import kubernetes_validate
import pytest

from tests.deploy.chart import (CHART, NAMESPACE, NEWEST_KUBERNETES, OLDEST_KUBERNETES, PROFILES,
                                SERVICE_MONITOR_API, by_kind, container, containers, env_of, name,
                                objects, one, pod_spec, render, workloads)

pytestmark = pytest.mark.fast

VERSIONS = (OLDEST_KUBERNETES, NEWEST_KUBERNETES)
REGISTRY_SIDE = ("registry", "migrate", "worker", "housekeeper")


@pytest.fixture(scope="module", params=sorted(PROFILES))
def profile(request) -> tuple[str, list[dict]]:
    return request.param, objects(PROFILES[request.param], api_versions=(SERVICE_MONITOR_API,))


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("profile_name", sorted(PROFILES))
def test_each_profile_lints_strictly(profile_name, version):
    report = helm_python.lint(CHART, PROFILES[profile_name], strict=True, namespace=NAMESPACE,
                              kube_version=f"v{version}")
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert report["errors"] == [] and problems == [], report


@pytest.mark.parametrize("version", VERSIONS)
def test_every_object_is_valid_kubernetes(profile, version):
    """Strict: an unknown field anywhere (a misplaced restartPolicy, a typo) fails too. Only the
    ServiceMonitor, a CRD of the Prometheus operator, has no schema in kubernetes-validate."""
    _, items = profile
    unvalidated = set()
    for item in items:
        try:
            kubernetes_validate.validate(item, version, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            unvalidated.add(item["kind"])
        except kubernetes_validate.ValidationError as error:
            path = ".".join(str(part) for part in error.path)
            pytest.fail(f"{item['kind']} {item['metadata']['name']} at {path}: {error.message}")
    assert unvalidated <= {"ServiceMonitor"}


def test_the_chart_refuses_a_kubernetes_without_native_sidecars():
    with pytest.raises(helm_python.HelmError, match="has no native sidecars"):
        render(kube_version="v1.28.9")
    assert render(kube_version=f"v{OLDEST_KUBERNETES}")


def test_a_service_monitor_only_where_its_crd_is_served():
    enabled = PROFILES["service-monitor"]
    assert by_kind(objects(enabled), "ServiceMonitor") == {}
    monitors = by_kind(objects(enabled, api_versions=(SERVICE_MONITOR_API,)), "ServiceMonitor")
    assert set(monitors) == {name("registry-metrics"), name("router-metrics")}
    registry = monitors[name("registry-metrics")]["spec"]
    assert registry["selector"]["matchLabels"]["loraplane.dev/job"] == "loraplane-registry"
    assert registry["endpoints"][0]["port"] == "http"
    credentials = registry["endpoints"][0]["authorization"]["credentials"]
    assert credentials == {"name": "loraplane-metrics", "key": "metrics-token"}
    assert monitors[name("router-metrics")]["spec"]["endpoints"][0]["port"] == "metrics"
    assert by_kind(objects({}, api_versions=(SERVICE_MONITOR_API,)), "ServiceMonitor") == {}  # off by default


def test_every_service_monitor_selects_a_service_port(profile):
    _, items = profile
    services = [s for s in by_kind(items, "Service").values()]
    for monitor in by_kind(items, "ServiceMonitor").values():
        wanted = monitor["spec"]["selector"]["matchLabels"]
        selected = [s for s in services if wanted.items() <= s["metadata"]["labels"].items()]
        assert selected, f"{monitor['metadata']['name']} selects no Service"
        for service in selected:
            assert monitor["spec"]["endpoints"][0]["port"] in {p["name"] for p in service["spec"]["ports"]}


# --- probes: where each process answers ---------------------------------------------------------


def _port(item: dict, c: dict, port: str | int) -> int:
    if isinstance(port, int):
        return port
    named = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
    assert port in named, f"{item['metadata']['name']}/{c['name']} probes port {port!r}, which it does not name"
    return named[port]


def _arg(c: dict, flag: str) -> str:
    arguments = c.get("args", [])
    assert flag in arguments, f"{c['name']} has no {flag}"
    return arguments[arguments.index(flag) + 1]


def test_probes_ask_each_process_where_it_answers(profile):
    _, items = profile
    registry = container(one(items, "Deployment", name("registry")), "registry")
    assert registry["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert registry["livenessProbe"]["httpGet"]["path"] == "/healthz"
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert _port({"metadata": {"name": "registry"}}, registry, registry[probe]["httpGet"]["port"]) \
            == int(_arg(registry, "--port"))

    for pool in by_kind(items, "StatefulSet").values():
        vllm, agent = container(pool, "vllm"), container(pool, "agent")
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert vllm[probe]["httpGet"]["path"] == "/health"
            assert _port(pool, vllm, vllm[probe]["httpGet"]["port"]) == int(_arg(vllm, "--port"))
        agent_port = int(env_of(agent)["LORAPLANE_AGENT_METRICS_PORT"]["value"])
        assert agent["readinessProbe"]["httpGet"]["path"] == "/healthz"
        assert _port(pool, agent, agent["readinessProbe"]["httpGet"]["port"]) == agent_port
        assert _port(pool, agent, agent["livenessProbe"]["tcpSocket"]["port"]) == agent_port
        assert "startupProbe" not in agent  # it would hold vLLM back, and the agent waits for vLLM

    for router in (d for n, d in by_kind(items, "Deployment").items() if n.startswith(name("router-"))):
        c = container(router, "router")
        for probe in ("readinessProbe", "livenessProbe"):
            assert c[probe]["httpGet"]["path"] == "/healthz"
            assert _port(router, c, c[probe]["httpGet"]["port"]) == int(_arg(c, "--port"))

    for component in ("worker", "housekeeper"):
        deployments = by_kind(items, "Deployment")
        if name(component) not in deployments:
            continue
        c = container(deployments[name(component)], component)
        metrics = int(env_of(c)["LORAPLANE_METRICS_PORT"]["value"])
        assert _port(deployments[name(component)], c, c["livenessProbe"]["tcpSocket"]["port"]) == metrics


def test_the_probed_paths_are_routes_of_the_code():
    """The process test (test_chart_processes.py) asks the real processes; this keeps the paths
    tied to the code even where that test cannot run."""
    from tests.deploy.chart import ROOT

    ops = (ROOT / "registry" / "ops" / "endpoints.py").read_text()
    assert '@router.get("/healthz")' in ops and '@router.get("/readyz")' in ops
    assert 'path == "/healthz"' in (ROOT / "serving" / "router" / "app.py").read_text()
    assert 'Route("/healthz", health)' in (ROOT / "serving" / "agent" / "main.py").read_text()


# --- containers and pods ------------------------------------------------------------------------


def test_every_container_is_locked_down(profile):
    _, items = profile
    for item in workloads(items):
        spec = pod_spec(item)
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        mounted_volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for c in containers(item):
            where = f"{item['metadata']['name']}/{c['name']}"
            security = c["securityContext"]
            assert security["readOnlyRootFilesystem"] is True, where
            assert security["allowPrivilegeEscalation"] is False, where
            assert security["capabilities"] == {"drop": ["ALL"]}, where
            assert "privileged" not in security, where
            mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
            assert "/tmp" in mounts and "emptyDir" in mounted_volumes[mounts["/tmp"]], where
            assert c["resources"]["requests"], f"{where} requests nothing"


def test_the_registry_writes_only_to_its_empty_dirs():
    items = objects()
    deployment = one(items, "Deployment", name("registry"))
    registry = container(deployment, "registry")
    volumes = {v["name"]: v for v in pod_spec(deployment)["volumes"]}
    mounts = {m["mountPath"]: volumes[m["name"]] for m in registry["volumeMounts"]}
    env = env_of(registry)
    for folder in (env["LORAPLANE_DATA_DIR"]["value"], env["PROMETHEUS_MULTIPROC_DIR"]["value"], "/tmp"):
        assert "emptyDir" in mounts[folder], folder
    assert pod_spec(deployment)["automountServiceAccountToken"] is False


def test_the_registry_keeps_two_replicas_through_disruptions_and_scales():
    for values in ({}, {"registry": {"autoscaling": {"enabled": False}}}):
        items = objects(values)
        deployment = one(items, "Deployment", name("registry"))
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        budget = one(items, "PodDisruptionBudget", name("registry"))["spec"]
        assert budget["minAvailable"] >= 1 and budget["selector"]["matchLabels"].items() <= labels.items()
        scalers = by_kind(items, "HorizontalPodAutoscaler")
        if values:
            assert scalers == {} and deployment["spec"]["replicas"] >= 2
        else:
            hpa = scalers[name("registry")]["spec"]
            assert "replicas" not in deployment["spec"]  # the autoscaler owns it
            assert hpa["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": name("registry")}
            assert hpa["minReplicas"] >= 2 and hpa["metrics"][0]["resource"]["name"] == "cpu"


def test_the_migration_is_a_hook_before_install_and_upgrade():
    items = objects()
    jobs = by_kind(items, "Job")
    assert set(jobs) == {name("migrate")}
    job = jobs[name("migrate")]
    annotations = job["metadata"]["annotations"]
    assert annotations["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert "before-hook-creation" in annotations["helm.sh/hook-delete-policy"]
    migrate = container(job, "migrate")
    assert migrate["command"] == ["loraplane", "db", "upgrade"] and "args" not in migrate
    assert pod_spec(job)["restartPolicy"] == "Never"
    # A hook runs before the release's own objects exist: it may not name its service accounts.
    assert "serviceAccountName" not in pod_spec(job)
    hooked = [i for i in items if "helm.sh/hook" in i["metadata"].get("annotations", {})]
    assert hooked == [job]
    for database, key in (({"migrationUrlKey": "owner-url"}, "owner-url"),
                          # behind PgBouncer, straight to Postgres: DDL and locks need a session
                          ({"pgbouncer": True, "listenUrlKey": "direct-url"}, "direct-url"),
                          ({"pgbouncer": False, "listenUrlKey": "direct-url"}, "database-url")):
        migrate = container(one(objects({"database": database}), "Job", name("migrate")), "migrate")
        assert env_of(migrate)["LORAPLANE_DATABASE_URL"]["valueFrom"]["secretKeyRef"]["key"] == key


def test_registry_side_processes_share_one_deployment_s_settings(profile):
    """Every process that writes audit events or signs holds the same secret, keys, database,
    broker and bucket (docs/operations.md, "Which process needs which secret")."""
    _, items = profile
    shared = ("LORAPLANE_DATABASE_URL", "LORAPLANE_BROKER_URL", "LORAPLANE_SECRET_KEY", "LORAPLANE_STORAGE",
              "LORAPLANE_S3_BUCKET", "LORAPLANE_S3_SSE")
    seen = {}
    for item in workloads(items):
        for c in containers(item):
            if c["name"] not in REGISTRY_SIDE:
                continue
            env = env_of(c)
            keyed = ("LORAPLANE_ATTESTATION_KEYRING" in env) != ("LORAPLANE_ATTESTATION_PRIVATE_KEY" in env)
            assert keyed, f"{c['name']} must sign with the attestation key or the keyring, one of them"
            for variable in shared + ("LORAPLANE_ATTESTATION_PRIVATE_KEY", "LORAPLANE_ATTESTATION_KEYRING"):
                if variable == "LORAPLANE_DATABASE_URL" and c["name"] == "migrate":
                    continue
                seen.setdefault(variable, set()).add(json.dumps(env.get(variable), sort_keys=True))
    assert all(len(values) == 1 for values in seen.values()), seen


# --- secrets ------------------------------------------------------------------------------------

SECRET_VARIABLES = re.compile(r"URL$|SECRET|TOKEN$|PRIVATE_KEY|PASSWORD")
PLAIN_ALLOWED = {"LORAPLANE_PUBLIC_URL", "LORAPLANE_ENGINE_URL", "LORAPLANE_S3_ENDPOINT_URL",
                 "LORAPLANE_S3_PRESIGN_ENDPOINT_URL", "LORAPLANE_K8S_JWKS_URL"}


def test_secrets_are_only_referenced(profile):
    profile_name, items = profile
    values = helm_python.Chart.load(CHART).merge_values(PROFILES[profile_name])
    named = {values[part]["existingSecret"] for part in ("database", "redis", "s3", "secretKey", "attestation",
                                                         "sso", "router")} - {""}
    named |= {values["attestation"]["keyringEnvSecret"], values["serviceMonitor"]["tokenSecret"]["name"]} - {""}
    assert by_kind(items, "Secret") == {}
    referenced = set()
    for item in workloads(items):
        for c in containers(item):
            for variable, entry in env_of(c).items():
                if "valueFrom" in entry and "secretKeyRef" in entry["valueFrom"]:
                    referenced.add(entry["valueFrom"]["secretKeyRef"]["name"])
                elif SECRET_VARIABLES.search(variable) and variable not in PLAIN_ALLOWED:
                    pytest.fail(f"{c['name']} sets {variable} in plain text")
            referenced |= {source["secretRef"]["name"] for source in c.get("envFrom", [])}
        assert not [v for v in pod_spec(item).get("volumes", []) if "secret" in v], "secrets go in env only"
    for monitor in by_kind(items, "ServiceMonitor").values():
        for endpoint in monitor["spec"]["endpoints"]:
            if "authorization" in endpoint:
                referenced.add(endpoint["authorization"]["credentials"]["name"])
    assert referenced <= named, referenced - named
    assert {values["database"]["existingSecret"], values["secretKey"]["existingSecret"]} <= referenced


# --- pools: vLLM, the agent beside it, identity, discovery and policy ------------------------------


def _pool_objects(items: list[dict], pool: str) -> dict[str, dict]:
    component = name(f"pool-{pool}")
    return {kind: one(items, kind, component)
            for kind in ("StatefulSet", "Service", "ServiceAccount", "PodDisruptionBudget")}


@pytest.mark.parametrize("profile_name", ["default", "cpu-laptop", "gpu-8b", "two-pools"])
def test_each_pool_runs_vllm_with_its_limits_and_the_agent_beside_it(profile_name):
    values = helm_python.Chart.load(CHART).merge_values(PROFILES[profile_name])
    items = objects(PROFILES[profile_name])
    assert len(by_kind(items, "StatefulSet")) == len(values["pools"])
    for pool in values["pools"]:
        parts = _pool_objects(items, pool["name"])
        statefulset, service = parts["StatefulSet"], parts["Service"]
        assert statefulset["spec"]["replicas"] == pool["replicas"]
        assert statefulset["spec"]["serviceName"] == service["metadata"]["name"]
        spec = pod_spec(statefulset)
        vllm, agent = container(statefulset, "vllm"), container(statefulset, "agent")
        assert [c["name"] for c in spec["containers"]] == ["vllm"]
        # A pool serving its long tail copies the resolver plugin first (test_chart_on_demand.py).
        assert [c["name"] for c in spec["initContainers"]] == ["vllm-plugin"] * bool(pool.get("onDemand")) + ["agent"]
        assert agent["restartPolicy"] == "Always"  # a native sidecar

        limits = {flag: _arg(vllm, flag) for flag in ("--max-loras", "--max-cpu-loras", "--max-lora-rank", "--dtype")}
        assert limits == {"--max-loras": str(pool["maxLoras"]), "--max-cpu-loras": str(pool["maxCpuLoras"]),
                          "--max-lora-rank": str(pool["maxLoraRank"]), "--dtype": pool["dtype"]}
        assert "--enable-lora" in vllm["args"] and _arg(vllm, "--served-model-name") == values["baseModel"]["name"]
        assert env_of(vllm)["VLLM_ALLOW_RUNTIME_LORA_UPDATING"]["value"] == "True"
        gpu = vllm["resources"].get("limits", {}).get("nvidia.com/gpu")
        if values["profile"] == "gpu" and pool.get("gpus", 1):
            assert gpu == pool["gpus"] == vllm["resources"]["requests"]["nvidia.com/gpu"]
            assert vllm["image"] == "vllm/vllm-openai:v0.32.0"
        else:
            assert gpu is None and vllm["image"].startswith("public.ecr.aws/q9t5s3a7/vllm-cpu-release-repo:")
            assert env_of(vllm)["VLLM_CPU_KVCACHE_SPACE"]["value"] == str(values["vllm"]["cpuKvCacheGiB"])

        # The agent reaches its own vLLM on the pod's loopback, and shares its adapter cache.
        assert _arg(agent, "--vllm-url") == f"http://127.0.0.1:{_arg(vllm, '--port')}"
        assert _arg(agent, "--pool") == pool["name"]
        agent_mounts = {m["name"]: m for m in agent["volumeMounts"]}
        vllm_mounts = {m["name"]: m for m in vllm["volumeMounts"]}
        state_dir = env_of(agent)["LORAPLANE_AGENT_STATE_DIR"]["value"]
        assert agent_mounts["adapter-cache"]["mountPath"] == vllm_mounts["adapter-cache"]["mountPath"] == state_dir
        assert vllm_mounts["adapter-cache"].get("readOnly") is True
        assert not agent_mounts["adapter-cache"].get("readOnly")

        # Its identity: the pod's name, and a projected token for the registry only.
        env = env_of(agent)
        assert env["LORAPLANE_AGENT_NODE_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
        token_file = env["LORAPLANE_AGENT_TOKEN_FILE"]["value"]
        mount = next(m for m in agent["volumeMounts"] if token_file.startswith(m["mountPath"] + "/"))
        volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
        projected = volume["projected"]["sources"][0]["serviceAccountToken"]
        assert projected == {"audience": "loraplane", "expirationSeconds": 600,
                             "path": token_file.removeprefix(mount["mountPath"] + "/")}
        assert "LORAPLANE_AGENT_NODE_TOKEN" not in env
        assert spec["serviceAccountName"] == parts["ServiceAccount"]["metadata"]["name"]
        assert spec["automountServiceAccountToken"] is False
        assert parts["ServiceAccount"]["automountServiceAccountToken"] is False

        # The headless Service the router watches, with the port named vllm.
        assert service["spec"]["clusterIP"] == "None"
        assert [(p["name"], p["targetPort"]) for p in service["spec"]["ports"]] == [("vllm", "vllm")]
        assert service["spec"]["selector"].items() <= statefulset["spec"]["template"]["metadata"]["labels"].items()
        assert parts["PodDisruptionBudget"]["spec"]["maxUnavailable"] == 1

    registry_env = env_of(container(one(items, "Deployment", name("registry")), "registry"))
    accounts = json.loads(registry_env["LORAPLANE_K8S_SERVICE_ACCOUNTS"]["value"])
    assert accounts == {f"{NAMESPACE}/{name('pool-' + p['name'])}": p["name"] for p in values["pools"]}
    assert registry_env["LORAPLANE_K8S_AUDIENCE"]["value"] == "loraplane"


def test_vllm_s_port_admits_only_its_pool_s_router():
    items = objects(PROFILES["two-pools"])
    routers = {n: d for n, d in by_kind(items, "Deployment").items() if n.startswith(name("router-"))}
    for pool in ("chat", "code"):
        policy = one(items, "NetworkPolicy", name(f"pool-{pool}"))["spec"]
        pods = one(items, "StatefulSet", name(f"pool-{pool}"))["spec"]["template"]["metadata"]["labels"]
        assert policy["podSelector"]["matchLabels"].items() <= pods.items()
        assert policy["policyTypes"] == ["Ingress"]
        [rule] = policy["ingress"]
        assert rule["ports"] == [{"port": "vllm", "protocol": "TCP"}]
        [peer] = rule["from"]
        wanted = peer["podSelector"]["matchLabels"].items()
        admitted = [n for n, d in routers.items() if wanted <= d["spec"]["template"]["metadata"]["labels"].items()]
        assert admitted == [name(f"router-{pool}")]

    closed = one(objects(PROFILES["router-disabled"]), "NetworkPolicy", name("pool-default"))["spec"]
    assert closed["ingress"] == []  # no router, no gateway: nothing outside the pod calls vLLM
    opened = one(objects(PROFILES["gateway-keyring-sso"]), "NetworkPolicy", name("pool-default"))["spec"]
    peers = {json.dumps(r["from"], sort_keys=True): r["ports"] for r in opened["ingress"]}
    gateway, metrics = (json.dumps(PROFILES["gateway-keyring-sso"][part][key], sort_keys=True)
                        for part, key in (("gateway", "from"), ("networkPolicy", "metricsFrom")))
    assert peers[gateway] == [{"port": "vllm", "protocol": "TCP"}]
    assert peers[metrics] == [{"port": "agent-metrics", "protocol": "TCP"}]  # the agent's port, not vLLM's


def test_the_eval_engine_listens_on_its_pod_s_loopback_only(profile):
    _, items = profile
    worker_deployment = by_kind(items, "Deployment").get(name("worker"))
    if worker_deployment is None:
        return
    vllm, worker = container(worker_deployment, "vllm"), container(worker_deployment, "worker")
    assert vllm["restartPolicy"] == "Always" and "startupProbe" in vllm  # the worker starts after it
    assert _arg(vllm, "--host") == "127.0.0.1"
    assert env_of(worker)["LORAPLANE_ENGINE_URL"]["value"] == f"http://127.0.0.1:{_arg(vllm, '--port')}"
    assert env_of(worker)["LORAPLANE_ENGINE_BASE_MODEL"]["value"] == _arg(vllm, "--served-model-name")
    assert env_of(worker)["LORAPLANE_ENGINE_MAX_LORAS"]["value"] == _arg(vllm, "--max-loras")
    assert env_of(worker)["LORAPLANE_ENGINE_DTYPE"]["value"] == _arg(vllm, "--dtype")
    cache = env_of(worker)["LORAPLANE_ARTIFACT_CACHE_DIR"]["value"]
    assert cache in {m["mountPath"] for m in vllm["volumeMounts"]}  # vLLM reads what the worker unpacked
    services = by_kind(items, "Service")
    assert not [s for s in services.values() if s["spec"]["selector"].get("app.kubernetes.io/component") == "worker"]


def test_the_router_reads_endpoint_slices_and_nothing_else():
    items = objects(PROFILES["two-pools"])
    role = one(items, "Role", name("router"))
    assert role["rules"] == [{"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
                              "verbs": ["get", "list", "watch"]}]
    binding = one(items, "RoleBinding", name("router"))
    assert binding["roleRef"]["name"] == name("router")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": name("router"), "namespace": NAMESPACE}]
    assert by_kind(items, "ClusterRole") == {} and by_kind(items, "ClusterRoleBinding") == {}
    for pool in ("chat", "code"):
        router = one(items, "Deployment", name(f"router-{pool}"))
        assert pod_spec(router)["serviceAccountName"] == name("router")
        c = container(router, "router")
        env = env_of(c)
        assert _arg(c, "--pool") == pool
        assert env["LORAPLANE_ROUTER_NODE_ADDRESSES"]["value"] == "kubernetes"
        namespace, service_name = env["LORAPLANE_ROUTER_K8S_SERVICE"]["value"].split("/")
        service = one(items, "Service", service_name)
        assert namespace == NAMESPACE and service["spec"]["clusterIP"] == "None"
        assert env["LORAPLANE_ROUTER_K8S_PORT_NAME"]["value"] in {p["name"] for p in service["spec"]["ports"]}
        assert env["LORAPLANE_ROUTER_TOKEN"]["valueFrom"]["secretKeyRef"]["key"] == f"router-token-{pool}"

    disabled = objects(PROFILES["router-disabled"])
    assert not [i for i in disabled if i["metadata"]["name"].startswith(name("router"))]


def test_managed_services_reach_every_registry_side_process():
    items = objects(PROFILES["gpu-8b"])
    for item in workloads(items):
        for c in containers(item):
            if c["name"] not in REGISTRY_SIDE:
                continue
            env = env_of(c)
            assert env["LORAPLANE_DATABASE_PGBOUNCER"]["value"] == "true"
            assert env["LORAPLANE_DATABASE_LISTEN_URL"]["valueFrom"]["secretKeyRef"] == {
                "name": "loraplane-rds", "key": "direct-url"}
            assert env["LORAPLANE_BROKER_URL"]["valueFrom"]["secretKeyRef"]["key"] == "rediss-url"
            assert env["LORAPLANE_S3_SSE"]["value"] == "aws:kms"
            assert env["LORAPLANE_S3_SSE_KMS_KEY_ID"]["value"].startswith("arn:aws:kms:")
            assert env["LORAPLANE_S3_ADDRESSING_STYLE"]["value"] == "virtual"
            assert "AWS_SECRET_ACCESS_KEY" not in env  # S3 through the service account's role
    account = one(items, "ServiceAccount", name("registry"))
    assert "eks.amazonaws.com/role-arn" in account["metadata"]["annotations"]


def test_the_gateway_reconciler_writes_its_kinds_and_selects_the_pools_pods(monkeypatch):
    """gateway.reconcile: a Role for the three kinds in the release's namespace, bound to the
    account the housekeeper runs as, whose pods alone mount its token; and the housekeeper's
    settings make InferencePools that select exactly each pool's vLLM pods on vLLM's port."""
    from registry.gateway.objects import GatewaySpec, pool_objects
    from registry.settings import RegistrySettings

    items = objects({**PROFILES["two-pools"], "gateway": {"enabled": True, "reconcile": True}})
    role = one(items, "Role", name("gateway-reconciler"))
    assert role["metadata"].get("namespace") in (None, NAMESPACE)
    assert role["rules"] == [
        {"apiGroups": ["inference.networking.k8s.io"], "resources": ["inferencepools"],
         "verbs": ["get", "list", "create", "patch", "delete"]},
        {"apiGroups": ["llm-d.ai"], "resources": ["inferencemodelrewrites", "inferenceobjectives"],
         "verbs": ["get", "list", "create", "patch", "delete"]}]
    binding = one(items, "RoleBinding", name("gateway-reconciler"))
    assert binding["roleRef"]["name"] == name("gateway-reconciler")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": name("registry"), "namespace": NAMESPACE}]
    housekeeper = one(items, "Deployment", name("housekeeper"))
    assert pod_spec(housekeeper)["serviceAccountName"] == name("registry")
    assert pod_spec(housekeeper)["automountServiceAccountToken"] is True
    assert pod_spec(one(items, "Deployment", name("registry")))["automountServiceAccountToken"] is False

    for variable, entry in env_of(container(housekeeper, "housekeeper")).items():
        if variable.startswith("LORAPLANE_GATEWAY_"):
            monkeypatch.setenv(variable, entry["value"])
    spec = GatewaySpec.from_settings(RegistrySettings())
    assert spec.namespace == NAMESPACE
    pods = [item for item in items if item["kind"] in ("Deployment", "StatefulSet")]
    for pool in ("chat", "code"):
        inference_pool = pool_objects(spec, pool, [])[0]["spec"]
        selected = [item["metadata"]["name"] for item in pods if inference_pool["selector"]["matchLabels"].items()
                    <= item["spec"]["template"]["metadata"]["labels"].items()]
        assert selected == [name(f"pool-{pool}")]
        vllm = container(one(items, "StatefulSet", name(f"pool-{pool}")), "vllm")
        assert inference_pool["targetPorts"] == [{"number": vllm["ports"][0]["containerPort"]}]

    # The gateway on, its reconciler off: the settings are there for `loraplane k8s render`, no more.
    rendered_only = objects({**PROFILES["two-pools"], "gateway": {"enabled": True}})
    housekeeper = one(rendered_only, "Deployment", name("housekeeper"))
    assert env_of(container(housekeeper, "housekeeper"))["LORAPLANE_GATEWAY_RECONCILE"]["value"] == "false"
    assert "LORAPLANE_GATEWAY_POD_LABELS" in env_of(container(housekeeper, "housekeeper"))
    assert pod_spec(housekeeper)["automountServiceAccountToken"] is False
    assert name("gateway-reconciler") not in by_kind(rendered_only, "Role")

    off = objects(PROFILES["two-pools"])
    assert name("gateway-reconciler") not in by_kind(off, "Role")
    assert pod_spec(one(off, "Deployment", name("housekeeper")))["automountServiceAccountToken"] is False
    assert not [v for v in env_of(container(one(off, "Deployment", name("housekeeper")), "housekeeper"))
                if v.startswith("LORAPLANE_GATEWAY_")]
