"""The router end to end: the official openai client, alias forms and canary splits, an alias
swapped under traffic, a node killed under traffic, tenant isolation, every refusal, and what a
leaked node token, a lying node or a database writer can make it do with tenants' prompts."""

from __future__ import annotations

import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest
from sqlalchemy import select, update

from devkit import services
from devkit.services import wait_for
from registry.tables import NodeAddress, Pool
from tests.serving.router.conftest import POOL, router_metric, wait_until_served
from bench.trust_attacks.impostor import Impostor
from tests.support.nodes import complete, issue_token
from devkit.units_of_work import unit_of_work

BATCH_INFLIGHT = re.compile(r'^loraplane_router_inflight\{tier="batch"\} (\S+)$', re.M)


def client(router, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=router.url + "/v1", api_key=key, max_retries=0, timeout=60)


def ask(router, key: str, model: str, prompt: str, **extra) -> httpx.Response:
    return httpx.post(router.url + "/v1/completions", timeout=60, headers={"Authorization": f"Bearer {key}"},
                      json={"model": model, "prompt": prompt, "max_tokens": 16, "temperature": 0, **extra})


def forwarded(router) -> float:
    return router_metric(router, "loraplane_router_requests_total")


def test_the_openai_client_works_streaming_included(router, served, tokens, nodes):
    app, prompt, answers = client(router, tokens["acme_app"]), served["prompt"], served["answers"]

    plain = app.completions.create(model="acme/r-digits", prompt=prompt, max_tokens=16, temperature=0)
    streamed = app.completions.create(model="acme/r-digits", prompt=prompt, max_tokens=16,
                                      temperature=0, stream=True)

    assert plain.model == "acme/r-digits@1" and plain.choices[0].text == answers["acme/r-digits@1"]
    assert "".join(chunk.choices[0].text for chunk in streamed if chunk.choices) == answers["acme/r-digits@1"]
    messages = [{"role": "user", "content": prompt}]
    direct = httpx.post(nodes["node-a"].url + "/v1/chat/completions", timeout=60, json={
        "model": "acme/r-reverse@1", "messages": messages, "max_tokens": 16, "temperature": 0}).json()
    chat = app.chat.completions.create(model="acme/r-reverse", messages=messages, max_tokens=16,
                                       temperature=0, stream=True)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chat if chunk.choices)
    assert text == direct["choices"][0]["message"]["content"] and text


def test_every_form_of_a_name_resolves_to_exactly_one_version(router, served, tokens):
    app, prompt, answers = client(router, tokens["acme_app"]), served["prompt"], served["answers"]
    for model in ("acme/r-reverse", "acme/r-reverse:production", "acme/r-reverse@1"):
        answer = app.completions.create(model=model, prompt=prompt, max_tokens=16, temperature=0)
        assert (answer.model, answer.choices[0].text) == ("acme/r-reverse@1", answers["acme/r-reverse@1"])


def test_models_lists_only_the_callers_names(router, served, tokens, router_pool):
    acme = {m.id for m in client(router, tokens["acme_app"]).models.list()}
    globex = {m.id for m in client(router, router_pool["globex_app"]).models.list()}

    assert {"acme/r-digits", "acme/r-digits:production", "acme/r-digits@1", "acme/r-reverse@1"} <= acme
    assert not any(name.startswith("globex/") for name in acme)
    assert globex == {"globex/r-private", "globex/r-private:production", "globex/r-private@1"}


def test_a_tenant_never_reaches_another_tenants_adapters(router, served, tokens, router_pool):
    before = forwarded(router)
    for key, model, mine in ((tokens["acme_app"], "globex/r-private@1", "acme/"),
                             (router_pool["globex_app"], "acme/r-digits", "globex/")):
        refused = ask(router, key, model, served["prompt"])
        assert refused.status_code == 404, refused.text
        error = refused.json()["error"]
        assert error["code"] == "model_not_found" and error["type"] == "not_found_error"
        assert f"model '{model}' is not served in pool '{POOL}'" in error["message"]
        assert error["available"] and all(name.startswith(mine) for name in error["available"])
    assert forwarded(router) == before


LARGE = "x" * (1024 * 1024 + 1)


@pytest.mark.parametrize(("auth", "body", "headers", "status", "code", "message"), [
    (None, {"model": "acme/r-digits"}, {}, 401, "missing_api_key", "missing or malformed API key"),
    ("lpt_not-a-key", {"model": "acme/r-digits"}, {}, 401, "missing_api_key", "missing or malformed API key"),
    ("lpt_" + "x" * 43, {"model": "acme/r-digits"}, {}, 401, "invalid_api_key", "invalid or revoked API key"),
    ("uploader", {"model": "acme/r-digits"}, {}, 403, "not_an_app_key", "a uploader token cannot call the router"),
    ("app", b"{not json", {}, 400, "invalid_json", "the body is not valid JSON"),
    ("app", b"[1, 2]", {}, 400, "invalid_json", "the body must be a JSON object"),
    ("app", {"model": "acme/r-digits", "prompt": LARGE}, {}, 413, "body_too_large", "larger than 1048576 bytes"),
    ("app", {"prompt": "hi"}, {}, 400, "invalid_model", "'model' must be a string"),
    ("app", {"model": "acme/nothing-here"}, {}, 404, "model_not_found", "'acme/nothing-here' is not served"),
    ("app", {"model": "tiny-task-llama"}, {}, 404, "model_not_found", "'tiny-task-llama' is not served"),
    ("app", {"model": "acme/r-digits"}, {"X-Loraplane-Tier": "urgent"}, 400, "invalid_tier", "unknown tier 'urgent'"),
    ("batch", {"model": "acme/r-digits"}, {"X-Loraplane-Tier": "interactive"}, 403, "tier_not_allowed",
     "this app key is limited to the batch tier"),
])
def test_refusals_say_what_was_wrong_and_forward_nothing(router, served, tokens, router_pool, auth,
                                                        body, headers, status, code, message):
    key = {"app": tokens["acme_app"], "batch": router_pool["acme_batch"], "uploader": tokens["acme_uploader"]}.get(auth, auth)
    if key:
        headers = {**headers, "Authorization": f"Bearer {key}"}
    content = body if isinstance(body, bytes) else httpx.Request("POST", "/", json=body).content
    before = forwarded(router)

    response = httpx.post(router.url + "/v1/completions", content=content, timeout=30,
                          headers={"Content-Type": "application/json", **headers})

    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code and message in error["message"] and error["hint"]
    assert forwarded(router) == before


def test_wrong_routes_and_methods(router, tokens):
    auth = {"Authorization": f"Bearer {tokens['acme_app']}"}
    wrong_method = httpx.get(router.url + "/v1/completions", headers=auth)
    no_route = httpx.post(router.url + "/v1/embeddings", headers=auth, json={})
    assert (wrong_method.status_code, wrong_method.json()["error"]["code"]) == (405, "method_not_allowed")
    assert (no_route.status_code, no_route.json()["error"]["code"]) == (404, "no_such_route")
    assert "POST /v1/completions" in no_route.json()["error"]["hint"]


def test_a_name_loaded_nowhere_gets_503_with_retry_after_never_another_adapter(router, served, promote,
                                                                              tokens, task_kit, tmp_path):
    from devkit.tiny_model import build_adapter
    from tests.conftest import KIT_BASE

    # Rank 32: the pool allows it, the nodes' vLLMs (max rank 16) refuse it.
    promote("r-too-wide", build_adapter(task_kit.base_dir, tmp_path / "wide", r=32, seed=9,
                                      base_model_name=KIT_BASE))
    app = client(router, tokens["acme_app"])
    deadline = time.monotonic() + 20
    while "acme/r-too-wide" not in {m.id for m in app.models.list()} and time.monotonic() < deadline:
        time.sleep(0.2)  # the poll interval
    before = forwarded(router)

    refused = ask(router, tokens["acme_app"], "acme/r-too-wide", served["prompt"])

    assert refused.status_code == 503, refused.text
    assert refused.headers["retry-after"] == "1"
    assert refused.json()["error"]["code"] == "adapter_not_loaded"
    assert "acme/r-too-wide@1 is approved but not loaded on any node yet" in refused.json()["error"]["message"]
    assert forwarded(router) == before


def test_a_canary_split_follows_its_weight(router, served, promote, tokens, task_kit, admin, nodes):
    promote("r-digits", task_kit.adapters["digits_to_words_v2"], alias="canary", weight=50)
    wait_until_served(admin, {"acme/r-digits@2"})
    answers = {**served["answers"], "acme/r-digits@2": complete(nodes["node-a"].url, "acme/r-digits@2", served["prompt"])}
    app = client(router, tokens["acme_app"])
    # The router follows the canary's generation, and reads the nodes' reports again with it.
    generation = admin.get(f"/v1/pools/{POOL}/active-set").json()["generation"]
    wait_for(lambda: httpx.get(router.url + "/healthz").json()["generation"] >= generation,
             what="the router to follow the canary")

    picks = [app.completions.create(model="acme/r-digits", prompt=served["prompt"], max_tokens=16,
                                    temperature=0) for _ in range(40)]
    canary = [app.completions.create(model="acme/r-digits:canary", prompt=served["prompt"],
                                     max_tokens=16, temperature=0) for _ in range(3)]

    assert all(p.choices[0].text == answers[p.model] for p in picks + canary)
    counts = {name: sum(p.model == name for p in picks) for name in ("acme/r-digits@1", "acme/r-digits@2")}
    assert sum(counts.values()) == 40 and min(counts.values()) >= 8, counts  # 50/50, not 0/100
    assert {c.model for c in canary} == {"acme/r-digits@2"}


def send_traffic(router, key: str, models: list[str], prompt: str, stop: threading.Event,
                 workers: int = 4, stream_every: int = 2) -> list[tuple[int, str, str, float]]:
    """(status, served name, text, when it was sent) of every request sent until `stop`."""
    results: list[tuple[int, str, str, float]] = []

    def worker(index: int) -> None:
        n = 0
        with httpx.Client(timeout=60, headers={"Authorization": f"Bearer {key}"}) as http:
            while not stop.is_set():
                n += 1
                model = models[(index + n) % len(models)]
                stream = n % stream_every == 0
                body = {"model": model, "prompt": prompt, "max_tokens": 16, "temperature": 0, "stream": stream}
                sent = time.monotonic()
                with http.stream("POST", router.url + "/v1/completions", json=body) as response:
                    results.append((response.status_code, response.headers.get("x-loraplane-served-name", ""),
                                    _text(response, stream), sent))

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(worker, range(workers)))
    return results


def _text(response: httpx.Response, stream: bool) -> str:
    import json

    response.read()
    if response.status_code != 200:
        return response.text
    if not stream:
        return response.json()["choices"][0]["text"]
    events = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
    return "".join(json.loads(e)["choices"][0]["text"] for e in events if e != "[DONE]" and json.loads(e)["choices"])


def test_swapping_an_alias_under_traffic_never_answers_with_the_wrong_version(
        router, served, promote, tokens, task_kit, admin, nodes):
    prompt = served["prompt"]
    promote("r-swap", task_kit.adapters["digits_to_words"])
    wait_until_served(admin, {"acme/r-swap@1"})
    answers = {"acme/r-swap@1": complete(nodes["node-a"].url, "acme/r-swap@1", prompt)}
    stop, results = threading.Event(), []
    traffic = threading.Thread(target=lambda: results.extend(
        send_traffic(router, tokens["acme_app"], ["acme/r-swap"], prompt, stop)))
    traffic.start()
    try:  # a wait that fails must not leave the traffic running
        wait_for(lambda: router_metric(router, "loraplane_router_requests_total",
                                       served_name="acme/r-swap@1") >= 8,
                 timeout_s=60, what="traffic on version 1")

        promote("r-swap", task_kit.adapters["reverse_words"])  # version 2 takes production
        generation = admin.get(f"/v1/pools/{POOL}/active-set").json()["generation"]
        wait_for(lambda: httpx.get(router.url + "/healthz").json()["generation"] >= generation,
                 what="the router to follow the swap")
        switched = time.monotonic()
        on_v2 = router_metric(router, "loraplane_router_requests_total", served_name="acme/r-swap@2")
        wait_until_served(admin, {"acme/r-swap@2"})
        answers["acme/r-swap@2"] = complete(nodes["node-a"].url, "acme/r-swap@2", prompt)
        # Traffic after the switch: of 8 more answers, at most the 4 workers' in-flight ones
        # predate it.
        wait_for(lambda: router_metric(router, "loraplane_router_requests_total",
                                       served_name="acme/r-swap@2") >= on_v2 + 8,
                 timeout_s=60, what="traffic on version 2")
    finally:
        stop.set()
        traffic.join()

    assert answers["acme/r-swap@1"] != answers["acme/r-swap@2"]  # outputs that can be told apart
    assert results and all(r[0] == 200 for r in results), {r[0] for r in results}
    wrong = [(name, text) for _, name, text, _ in results if text != answers.get(name)]
    assert not wrong, wrong[:3]
    assert results[0][1] == "acme/r-swap@1"
    after = {name for _, name, _, sent in results if sent > switched}
    assert after == {"acme/r-swap@2"}  # once the router follows the swap, only version 2


def test_a_node_killed_under_traffic_costs_no_request(router, served, tokens, nodes, admin):
    prompt, answers = served["prompt"], served["answers"]
    retries_before = router_metric(router, "loraplane_router_retries_total")
    answered = forwarded(router)
    stop, results = threading.Event(), []
    traffic = threading.Thread(target=lambda: results.extend(send_traffic(
        router, tokens["acme_app"], ["acme/r-digits@1", "acme/r-reverse@1"], prompt, stop, stream_every=10**6)))
    traffic.start()
    try:  # a wait that fails must not leave the traffic running
        wait_for(lambda: forwarded(router) >= answered + 8, timeout_s=60, what="traffic before the kill")

        services.stop_group(nodes["node-b"].service, sig=9)  # SIGKILL: no goodbye to anyone
        # Time itself: traffic goes on past the router's cooldown of the dead node (2 s here),
        # after which it is tried again; and at least one request met the dead node and was retried.
        time.sleep(3)
        wait_for(lambda: router_metric(router, "loraplane_router_retries_total") > retries_before,
                 timeout_s=60, what="a request retried on the other node")
    finally:
        stop.set()
        traffic.join()

    assert results and all(r[0] == 200 for r in results), [r for r in results if r[0] != 200][:3]
    assert all(text == answers[name] for _, name, text, _ in results)
    assert router_metric(router, "loraplane_router_retries_total") > retries_before
    nodes["node-b"].restart()  # and it comes back: its agent reloads the set
    wait_until_served(admin, {"acme/r-digits@1", "acme/r-reverse@1"}, timeout_s=90)


def test_prompt_logprob_requests_are_sent_to_a_node_one_at_a_time(router, served, tokens, nodes):
    # vLLM 0.32 on CPU kills its engine core when one step holds two such requests.
    body = {"echo": True, "logprobs": 1, "max_tokens": 1}
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda m: ask(router, tokens["acme_app"], m, served["prompt"], **body),
                                ["acme/r-digits@1", "acme/r-reverse@1"] * 2))
    assert [a.status_code for a in answers] == [200] * 4, [a.text for a in answers]
    assert all(a.json()["choices"][0]["logprobs"]["token_logprobs"] for a in answers)
    for node in nodes.values():
        assert httpx.get(node.url + "/health").status_code == 200


def test_batch_traffic_is_capped_and_metrics_are_kept_per_version(router, served, router_pool, tokens):
    batch_key = router_pool["acme_batch"]
    peak = 0.0
    with ThreadPoolExecutor(6) as pool, httpx.Client() as scraper:
        pending = [pool.submit(ask, router, batch_key, "acme/r-digits@1", served["prompt"], max_tokens=48,
                               ignore_eos=True)  # long enough to be seen in flight
                   for _ in range(6)]
        while not all(p.done() for p in pending):
            # The one gauge, read off the text: parsing every metric this often would take a core
            # from the engines serving the requests.
            text = scraper.get(router.env["METRICS_URL"]).text
            peak = max([peak, *map(float, BATCH_INFLIGHT.findall(text))])
            time.sleep(0.05)  # well within a request's time in flight
        interactive = ask(router, tokens["acme_app"], "acme/r-digits@1", served["prompt"])
    assert all(p.result().status_code == 200 for p in pending) and interactive.status_code == 200
    assert 1 <= peak <= 2  # LORAPLANE_ROUTER_BATCH_MAX_INFLIGHT
    assert router_metric(router, "loraplane_router_queue_seconds_count", tier="batch") >= 6

    labels = {"served_name": "acme/r-digits@1", "alias": "pinned"}
    assert router_metric(router, "loraplane_router_requests_total", **labels, status="200") >= 7
    assert router_metric(router, "loraplane_router_ttft_seconds_count", **labels) >= 7
    assert router_metric(router, "loraplane_router_tokens_total", **labels, kind="completion") > 0
    assert router_metric(router, "loraplane_router_misses_total", served_name="acme/r-digits@1") >= 1
    not_found = router_metric(router, "loraplane_router_errors_total", code="model_not_found")
    assert ask(router, tokens["acme_app"], "acme/nothing-here", served["prompt"]).status_code == 404
    assert router_metric(router, "loraplane_router_errors_total", code="model_not_found") == not_found + 1


def test_a_revoked_app_key_stops_working_within_the_key_cache_time(router, served, admin, engine):

    from registry.tokens import issuing as token_service

    created = admin.post("/v1/tokens", json={"subject": "short-lived-app", "role": "app", "tenant": "acme"})
    key, prompt = created.json()["token"], served["prompt"]
    assert ask(router, key, "acme/r-digits@1", prompt).status_code == 200
    time.sleep(0.6)  # past half the key cache (1 s): the next request also checks in the background
    assert ask(router, key, "acme/r-digits@1", prompt).status_code == 200
    with unit_of_work(engine) as session:
        token_service.revoke_token(session, created.json()["id"], actor="tests")
    before = forwarded(router)

    deadline = time.monotonic() + 5  # LORAPLANE_ROUTER_KEY_CACHE_S is 1 here
    while (answer := ask(router, key, "acme/r-digits@1", prompt)).status_code == 200:
        assert time.monotonic() < deadline, "the revoked key still works"
        before += 1
        time.sleep(0.2)  # the poll interval, well under the key cache time

    assert answer.status_code == 401 and answer.json()["error"]["code"] == "invalid_api_key"
    assert forwarded(router) == before  # the refused request reached no node


# The fleet's word: each test below fails on a router that routes by what nodes report.

def answers_through_router(router, key: str, model: str, prompt: str, count: int) -> list[tuple[str, str]]:
    """(node, text) of `count` requests, one after another."""
    results = []
    for _ in range(count):
        response = ask(router, key, model, prompt)
        assert response.status_code == 200, response.text
        results.append((response.headers["x-loraplane-node"], response.json()["choices"][0]["text"]))
    return results


def digests(admin) -> dict[str, str]:
    return {e["served_name"]: e["digest"] for e in admin.get(f"/v1/pools/{POOL}/active-set").json()["entries"]}


def test_a_leaked_node_token_cannot_point_the_router_at_another_server(router, served, tokens, router_pool, admin):
    prompt, answers = served["prompt"], served["answers"]
    with Impostor({name: f"/cache/{digest}" for name, digest in digests(admin).items()}) as impostor:
        node_a = httpx.Client(base_url=admin.base_url, headers={
            "Authorization": f"Bearer {router_pool['node_tokens']['node-a']}"})
        loaded = [{"served_name": name, "digest": digest} for name, digest in digests(admin).items()]
        forged = node_a.put(f"/v1/pools/{POOL}/nodes/node-a/status", json={
            "generation": admin.get(f"/v1/pools/{POOL}/active-set").json()["generation"],
            "loaded": loaded, "vllm_url": impostor.url,
            "limits": {"max_loras": 2, "max_cpu_loras": 8, "max_lora_rank": 16}})
        assert forged.status_code == 200, forged.text

        results = answers_through_router(router, tokens["acme_app"], "acme/r-digits", prompt, 8)

        assert impostor.prompts == []
        assert all(text == answers["acme/r-digits@1"] for _, text in results)
        assert {n["node_id"]: n["vllm_url"] for n in admin.get(f"/v1/pools/{POOL}/rollout").json()["nodes"]
                if n["node_id"] == "node-a"} == {"node-a": router_pool["node_urls"]["node-a"]}


def test_a_node_whose_engine_does_not_hold_what_it_reports_gets_no_prompt(router, served, tokens, admin):
    """An admin-bound node whose engine is not what its agent claims (listed from other bytes):
    the router asks the engine, and sends it nothing."""
    prompt, answers = served["prompt"], served["answers"]
    wrong = {name: f"/cache/{'0' * 64}" for name in digests(admin)}
    with Impostor(wrong) as impostor:
        token = issue_token(admin, "node-liar", role="node", pool=POOL, instance_id="node-liar",
                            vllm_url=impostor.url)
        liar = httpx.Client(base_url=admin.base_url, headers={"Authorization": f"Bearer {token}"})
        active = admin.get(f"/v1/pools/{POOL}/active-set").json()
        claimed = liar.put(f"/v1/pools/{POOL}/nodes/node-liar/status", json={
            "generation": active["generation"], "loaded": [
                {"served_name": e["served_name"], "digest": e["digest"]} for e in active["entries"]],
            "limits": {"max_loras": 2, "max_cpu_loras": 8, "max_lora_rank": 16}})
        assert claimed.status_code == 200 and "acme/r-digits@1" in claimed.json()["serving"]
        wait_for(lambda: router_metric(router, "loraplane_router_engine_checks_total",
                                       node="node-liar", outcome="refuted") >= 1,
                 timeout_s=30, what="the router asking node-liar's engine")

        results = answers_through_router(router, tokens["acme_app"], "acme/r-digits", prompt, 12)

        assert impostor.prompts == []
        assert {node for node, _ in results} <= {"node-a", "node-b"}
        assert all(text == answers["acme/r-digits@1"] for _, text in results)
        admin.post(f"/v1/tokens/{liar.get('/v1/whoami').json()['token_id']}/revoke").raise_for_status()


def test_a_database_writer_cannot_move_a_node_to_another_address(router, served, tokens, admin, engine):
    prompt, answers = served["prompt"], served["answers"]
    nodes_before = router_metric(router, "loraplane_router_nodes")
    with Impostor({name: f"/cache/{digest}" for name, digest in digests(admin).items()}) as impostor:
        with unit_of_work(engine) as session:
            row = session.scalars(select(NodeAddress).join(Pool).where(
                Pool.name == POOL, NodeAddress.node_id == "node-b")).one()
            original = row.vllm_url
            row.vllm_url = impostor.url  # no audit record, and no key to seal it with
        try:
            assert {n["node_id"]: n["address"] for n in admin.get(f"/v1/pools/{POOL}/rollout").json()["nodes"]
                    }["node-b"] == "seal_broken"
            wait_for(lambda: router_metric(router, "loraplane_router_nodes") == nodes_before - 1,
                     timeout_s=30, what="the router dropping node-b")

            results = answers_through_router(router, tokens["acme_app"], "acme/r-digits", prompt, 8)

            assert impostor.prompts == []
            assert {node for node, _ in results} == {"node-a"}
            assert all(text == answers["acme/r-digits@1"] for _, text in results)
        finally:
            with unit_of_work(engine) as session:
                session.execute(update(NodeAddress).where(NodeAddress.node_id == "node-b",
                                                          NodeAddress.vllm_url == impostor.url)
                                .values(vllm_url=original))
