"""Long tail: the suite's second serving vLLM on CPU (tests/serving/conftest.py), which carries
loraplane's resolver plugin (plugins/vllm-resolver) with runtime updating on, beside an agent
that answers it (LORAPLANE_AGENT_RESOLVER=on) and loads nothing ahead
(LORAPLANE_AGENT_LOAD_AHEAD=off), in a pool whose overflow is on_demand, with the router in
front. A version vLLM does not hold is served on its first request, fetched once through the
verified cache; anything that is not an approved version of the pool's set gets vLLM's 404, and
so does an approved one that cannot be fetched now, which the agent records as unavailable and
the router answers with a 503 and Retry-After.

The node's registry presigns its download URLs through a link the tests can cut (a store that
went away), so the session's S3 stays up for every other module."""

from __future__ import annotations

import hashlib
import json
import socket
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from devkit import engine, services
from devkit.pipeline_steps import create_suite, promoter, upload_dir
from devkit.services import wait_for
from tests.support.metrics import metric_at
from tests.serving.conftest import RESOLVER_DEADLINE_S, resolver_socket
from tests.serving.router.conftest import router_metric
from tests.support.nodes import Restartable, issue_token, served_adapters
from tests.support.store_link import StoreLink

POOL = "resolver-pool"
NODE = "resolver-node"


@pytest.fixture(scope="module")
def resolver_vllm(vllm_pair) -> Restartable:
    return vllm_pair["b"]


@pytest.fixture(scope="module")
def node_token(admin, kit_base, task_kit, resolver_vllm) -> str:
    body = {"name": POOL, "base_model": kit_base, "max_loras": 2, "max_cpu_loras": 8,
            "max_lora_rank": 16, "dtype": "float32", "overflow": "on_demand", "cold_tier_bytes": 1 << 30}
    assert admin.post("/v1/pools", json=body).status_code == 201
    create_suite(admin, "resolver-parity", kit_base, task_kit.suites["digits_to_words"][:2],
                 {"parity": {"max_logprob_diff": 0.01}})
    return issue_token(admin, NODE, role="node", pool=POOL, instance_id=NODE,
                       vllm_url=resolver_vllm.url)


@pytest.fixture(scope="module")
def node(service_dir: Path, registry, s3, node_token, resolver_vllm, admin) -> Iterator[dict]:
    """The node: the shared vLLM with the plugin, its agent, the router, and the registry and
    store link they use, which tests may stop and start again."""
    installed = subprocess.run([str(engine.vllm_python()), "-c", "import loraplane_vllm_resolver"],
                               capture_output=True, text=True)
    assert installed.returncode == 0, ("loraplane's resolver plugin is not installed in vLLM's venv: run "
                                       "./dev test, whose ensure_vllm installs plugins/vllm-resolver")
    link = StoreLink(s3.url)
    env = {k: v for k, v in registry.env.items() if k.startswith("LORAPLANE_")}
    env.pop("LORAPLANE_PUBLIC_URL", None)
    env.pop("LORAPLANE_DATA_DIR", None)
    env["LORAPLANE_S3_PRESIGN_ENDPOINT_URL"] = link.url
    port = services.free_port()
    node_registry = Restartable(lambda: services.start_registry(service_dir / "resolver-registry", env, port=port))
    sock = resolver_socket(service_dir)
    running: list[services.Service] = []
    try:
        agent = services.start_agent(
            service_dir / "resolver-agent", pool=POOL, vllm_url=resolver_vllm.url, registry_url=node_registry.url,
            token=node_token, node_id=NODE, metrics_port=services.free_port(),
            settings={"LORAPLANE_AGENT_RESOLVER": "on", "LORAPLANE_AGENT_LOAD_AHEAD": "off",
                      "LORAPLANE_AGENT_RESOLVER_SOCKET": str(sock),
                      "LORAPLANE_AGENT_RESOLVER_DEADLINE_S": str(RESOLVER_DEADLINE_S // 2)})
        running.append(agent)
        router = services.start_router(
            service_dir / "resolver-router", pool=POOL, registry_url=node_registry.url,
            token=issue_token(admin, "resolver-router", role="router", pool=POOL, instance_id="resolver-router"),
            # App keys stay trusted through the registry outage below (ten seconds by default).
            settings={"LORAPLANE_ROUTER_NODES_POLL_S": "0.5", "LORAPLANE_ROUTER_RETRY_AFTER_S": "7",
                      "LORAPLANE_ROUTER_KEY_CACHE_S": "300"})
        running.append(router)
        yield {"vllm": resolver_vllm.url, "agent": agent.url, "registry": node_registry, "link": link, "socket": sock,
               "cache": service_dir / "resolver-agent" / "state" / "cache", "router": router,
               "app": issue_token(admin, "resolver-app", role="app", tenant="acme")}
    finally:
        for service in reversed(running):
            services.stop_group(service)
        node_registry.stop()
        link.close()


@pytest.fixture(scope="module")
def promote(admin, uploader, engine, node_token):
    return promoter(admin, uploader, engine, POOL, "resolver-parity")


def agent_metric(node: dict, name: str, **labels: str) -> float:
    with httpx.Client(timeout=10) as client:
        return metric_at(client, node["agent"] + "/metrics", name, **labels)


def completion(node: dict, model: str, prompt: str) -> httpx.Response:
    return httpx.post(node["vllm"] + "/v1/completions", timeout=60, json={
        "model": model, "prompt": prompt, "max_tokens": 16, "temperature": 0})


def routed(node: dict, model: str, prompt: str) -> httpx.Response:
    return httpx.post(node["router"].url + "/v1/completions", timeout=60,
                      headers={"Authorization": f"Bearer {node['app']}"},
                      json={"model": model, "prompt": prompt, "max_tokens": 16, "temperature": 0})


def answers(response: httpx.Response, reference: str) -> bool:
    assert response.status_code == 200, response.text
    return reference.strip() in response.json()["choices"][0]["text"]


def taken(node: dict, admin) -> dict:
    """The pool's active set, once the agent has applied it."""
    active = admin.get(f"/v1/pools/{POOL}/active-set").json()
    wait_for(lambda: agent_metric(node, "loraplane_agent_generation_applied") >= active["generation"],
             what="the agent to apply the set")
    return active


def rollout_node(admin) -> dict:
    nodes = admin.get(f"/v1/pools/{POOL}/rollout").json()["nodes"]
    return next((n for n in nodes if n["node_id"] == NODE), {})


def test_an_approved_version_vllm_does_not_hold_is_served_on_its_first_request(node, promote, task_kit, admin):
    promote("od-digits", task_kit.adapters["digits_to_words"])
    taken(node, admin)
    assert "acme/od-digits@1" not in served_adapters(node["vllm"])  # nothing is loaded ahead
    row = task_kit.suites["digits_to_words"][0]

    assert answers(completion(node, "acme/od-digits@1", row["prompt"]), row["reference"])

    held = served_adapters(node["vllm"])["acme/od-digits@1"]
    assert Path(held).parent == node["cache"]  # the agent's verified folder
    assert agent_metric(node, "loraplane_agent_downloads_total") == 1
    assert agent_metric(node, "loraplane_agent_resolver_answers_total", answer="resolved") == 1
    reported = wait_for(lambda: (n := rollout_node(admin)) and "acme/od-digits@1" in n.get("serving", []) and n,
                        what="the node to report it loaded")
    # Loaded on demand is no drift: any version of the set may be held besides the node's own.
    assert reported["drift"] == {"missing": [], "extra": [], "wrong_digest": []} and reported["converged"]


def test_what_is_not_an_approved_version_gets_404_and_nothing_is_fetched(node, uploader, task_kit):
    upload_dir(uploader, "acme/od-unapproved", task_kit.adapters["reverse_words"])  # uploaded, never promoted
    downloads = agent_metric(node, "loraplane_agent_downloads_total")
    unknown = agent_metric(node, "loraplane_agent_resolver_answers_total", answer="unknown")
    names = ["acme/od-unapproved@1", "acme/od-digits@9", "acme/od-digits", "../../etc", "globex/od-digits@1"]

    for name in names:
        response = completion(node, name, "1 2 3")
        assert response.status_code == 404, (name, response.text)

    assert agent_metric(node, "loraplane_agent_downloads_total") == downloads
    assert agent_metric(node, "loraplane_agent_resolver_answers_total", answer="unknown") == unknown + len(names)
    assert set(served_adapters(node["vllm"])) == {"acme/od-digits@1"}


def test_bad_questions_on_the_socket_get_a_short_refusal(node):
    for question in (b"not json\n", b'{"lora_name": 7}\n', b'{"lora_name": "' + b"x" * 8000 + b'"}\n'):
        with socket.socket(socket.AF_UNIX) as client:
            client.settimeout(10)
            client.connect(str(node["socket"]))
            client.sendall(question)
            answer = json.loads(client.makefile("rb").readline())
        assert answer["answer"] == "bad_request", question[:40]


def test_ten_first_requests_together_fetch_once(node, promote, task_kit, admin):
    promote("od-reverse", task_kit.adapters["reverse_words"])
    taken(node, admin)
    downloads = agent_metric(node, "loraplane_agent_downloads_total")
    resolved = agent_metric(node, "loraplane_agent_resolver_answers_total", answer="resolved")
    row = task_kit.suites["reverse_words"][0]

    with ThreadPoolExecutor(10) as pool:
        responses = list(pool.map(lambda _: completion(node, "acme/od-reverse@1", row["prompt"]), range(10)))

    assert all(answers(response, row["reference"]) for response in responses)
    assert agent_metric(node, "loraplane_agent_downloads_total") == downloads + 1
    assert agent_metric(node, "loraplane_agent_resolver_answers_total", answer="resolved") == resolved + 1


def test_cached_bytes_changed_on_disk_are_never_loaded_and_are_an_incident(node, promote, task_kit, admin):
    adapter = task_kit.adapters["digits_to_words_v2"]
    promote("od-tamper", adapter)
    entry = next(e for e in taken(node, admin)["entries"] if e["served_name"] == "acme/od-tamper@1")
    # A folder of the right name and files, one byte changed: what a process that wrote to the
    # node's disk could leave for the agent to hand to vLLM.
    folder = node["cache"] / entry["digest"]
    folder.mkdir()
    for spec in entry["files"]:
        data = bytearray((adapter / spec["name"]).read_bytes())
        if spec["name"].endswith(".safetensors"):
            data[-1] ^= 0xFF
        (folder / spec["name"]).write_bytes(bytes(data))
    (folder / ".complete").touch()
    downloads = agent_metric(node, "loraplane_agent_downloads_total")
    row = task_kit.suites["digits_to_words"][0]

    assert answers(completion(node, "acme/od-tamper@1", row["prompt"]), row["reference"])

    # Hashed again before it was handed over, found changed, removed, and fetched afresh.
    assert agent_metric(node, "loraplane_agent_failures_total", reason="tampered") == 1
    assert agent_metric(node, "loraplane_agent_downloads_total") == downloads + 1
    for spec in entry["files"]:
        assert hashlib.sha256((folder / spec["name"]).read_bytes()).hexdigest() == spec["sha256"]
    incidents = wait_for(lambda: rollout_node(admin).get("incidents"), what="the incident in the report")
    assert [(i["served_name"], i["kind"]) for i in incidents] == [("acme/od-tamper@1", "tampered")]


def test_a_rolled_back_version_is_unloaded_and_never_resolved_again(node, promote, task_kit, admin):
    promote("od-digits", task_kit.adapters["digits_to_words_v2"])
    taken(node, admin)
    row = task_kit.suites["digits_to_words"][0]
    assert answers(completion(node, "acme/od-digits@2", row["prompt"]), row["reference"])

    restored = admin.post(f"/v1/pools/{POOL}/aliases/acme/od-digits/production/rollback",
                          json={"comment": "worse on the long tail"})
    assert restored.status_code == 200, restored.text

    wait_for(lambda: "acme/od-digits@2" not in served_adapters(node["vllm"]), timeout_s=30,
             what="v2 unloaded once it left the set")
    assert completion(node, "acme/od-digits@2", row["prompt"]).status_code == 404
    assert "acme/od-digits@2" not in served_adapters(node["vllm"])
    # v1 is production again: served on demand once more, from its cached, re-verified folder.
    assert answers(completion(node, "acme/od-digits@1", row["prompt"]), row["reference"])


def test_with_the_registry_and_store_away_resident_versions_answer_and_cold_ones_do_not(
        node, promote, task_kit, admin):
    promote("od-cold", task_kit.adapters["digits_to_words_noisy"])
    taken(node, admin)
    reverse = task_kit.suites["reverse_words"][0]
    assert "acme/od-reverse@1" in served_adapters(node["vllm"])

    wait_for(lambda: routed(node, "acme/od-reverse", reverse["prompt"]).status_code == 200,
             what="the router to know the pool's set")
    answered_before = router_metric(node["router"], "loraplane_router_requests_total", served_name="acme/od-cold@1")

    node["registry"].stop()
    node["link"].cut()
    try:
        assert answers(completion(node, "acme/od-reverse@1", reverse["prompt"]), reverse["reference"])
        assert answers(routed(node, "acme/od-reverse", reverse["prompt"]), reverse["reference"])
        # Through the router: approved, so neither a 404 nor another adapter's or the base's answer.
        refused = routed(node, "acme/od-cold", "1 2 3")
        assert refused.status_code == 503, refused.text
        assert refused.headers["Retry-After"] == "7"
        error = refused.json()["error"]
        assert error["code"] == "adapter_unavailable"
        assert error["message"].startswith(f"acme/od-cold@1 is approved but no node could load it on demand now: {NODE} (not_resolved)")
        assert router_metric(node["router"], "loraplane_router_cold_requests_total", outcome="not_resolved") >= 1
        assert router_metric(node["router"], "loraplane_router_requests_total", served_name="acme/od-cold@1") == answered_before
        response = completion(node, "acme/od-cold@1", "1 2 3")
        assert response.status_code == 404, response.text
        assert agent_metric(node, "loraplane_agent_resolver_answers_total", answer="unavailable") >= 1
        assert "acme/od-cold@1" not in served_adapters(node["vllm"])
    finally:
        node["link"].restore()
        node["registry"].restart()

    # The node's report says why: approved, but not to be had when it was asked for.
    failures = wait_for(lambda: [f for f in rollout_node(admin).get("failures", [])
                                 if f["served_name"] == "acme/od-cold@1"], what="the report")
    assert failures[0]["reason"].startswith("approved but unavailable: ")
    response = completion(node, "acme/od-cold@1", "1 2 3")  # the store is back: served
    assert response.status_code == 200, response.text


def test_through_the_router_a_cold_version_goes_to_a_node_that_loads_it_and_is_counted_cold(node, promote, task_kit, admin):
    promote("od-routed", task_kit.adapters["reverse_words"])
    taken(node, admin)
    row = task_kit.suites["reverse_words"][0]
    wait_for(lambda: "acme/od-routed" in {m["id"] for m in httpx.get(
        node["router"].url + "/v1/models", headers={"Authorization": f"Bearer {node['app']}"}).json()["data"]},
        what="the router to follow the new set")
    assert "acme/od-routed@1" not in served_adapters(node["vllm"])
    cold = router_metric(node["router"], "loraplane_router_residency_ttft_seconds_count", residency="cold")
    resolved = agent_metric(node, "loraplane_agent_resolver_answers_total", answer="resolved")

    first = routed(node, "acme/od-routed", row["prompt"])

    assert answers(first, row["reference"])
    assert (first.headers["x-loraplane-served-name"], first.headers["x-loraplane-node"],
            first.headers["x-loraplane-residency"]) == ("acme/od-routed@1", NODE, "cold")
    assert router_metric(node["router"], "loraplane_router_residency_ttft_seconds_count", residency="cold") == cold + 1
    assert router_metric(node["router"], "loraplane_router_cold_requests_total", node=NODE, outcome="answered") >= 1
    # Once its agent reports it loaded and its engine confirms it, the next one is resident.
    wait_for(lambda: "acme/od-routed@1" in rollout_node(admin).get("serving", []), what="the report")
    resident = router_metric(node["router"], "loraplane_router_residency_ttft_seconds_count", residency="resident")
    later = wait_for(lambda: (r := routed(node, "acme/od-routed", row["prompt"])) and
                     router_metric(node["router"], "loraplane_router_residency_ttft_seconds_count",
                                   residency="resident") > resident and r, what="a resident answer")
    assert answers(later, row["reference"]) and later.headers["x-loraplane-residency"] == "resident"
    # Requests sent before the router confirmed the node's report went cold too, but vLLM held
    # the version by then: the agent resolved it once.
    assert agent_metric(node, "loraplane_agent_resolver_answers_total", answer="resolved") == resolved + 1
