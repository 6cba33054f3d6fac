"""Progressive delivery: canaries decided on live evidence, and the cost of judging a challenger
beside its incumbent. One run measures both, on one registry (Postgres, S3, Redis).

Run: ./dev bench delivery    (or: python -m bench.delivery --good-runs 20 --bad-runs 3)

Canaries: one real vLLM on CPU behind a proxy that can fail chosen served names on purpose, its
agent, the router (traffic reports every 0.5 s) and the housekeeper (it judges every 0.5 s). A
client sends requests for the adapter one after another throughout.
- good: --good-runs canaries of a version exactly as good as production (the kit's two digits
  adapters, by turns), steps [50%], a 5 s window, 8 requests at least. Each must become
  production; good_canary_false_rollbacks counts those rolled back instead.
- bad: --bad-runs canaries whose requests the proxy answers with 500s, steps [10%], a 30 s window,
  5 requests at least. bad_canary_detect_s runs from sending the first request the canary failed
  to the rollback's audit event; bad_canary_requests_served counts the canary's answers until then.
  Medians over the runs.

Challenger: a real Celery worker on a vLLM eval engine evaluates the noisy digits adapter on the
kit's 32-prompt digits suite, alone and as a pair with its incumbent (the good digits adapter) in
one batch, alternating over --rounds after a warm-up. Time: the first claim to the last outcome.
challenger_eval_overhead_ratio is the median pair time over the median time alone, for a task
suite of exact match and parity; the `_with_loglik` figures add the reference log-likelihood,
whose prompt-logprob requests vLLM's CPU build takes one at a time (workers/evaluation/runner.py),
so each version in the batch adds its own serial scoring.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

import httpx

from bench import report
from devkit import services
from devkit.fault_proxy import FaultProxy
from devkit.pipeline_steps import create_suite, evaluations_of, finish_evaluation, upload_dir
from devkit.services import wait_for
from devkit.task_kit import build_task_kit
from registry.auth.principal import Role
from registry.db import make_engine
from registry.tokens import issuing as tokens
from devkit.units_of_work import unit_of_work

REPO = Path(__file__).resolve().parent.parent
BUCKET, BASE, POOL, ADAPTER = "bench", "tiny-task-llama", "delivery", "acme/digits"
GOOD = {"steps": [{"weight": 50}], "window_s": 5, "min_requests": 8, "max_error_rate": 0.05,
        "max_ttft_p95_ratio": 3.0, "max_latency_p95_ratio": 3.0}
BAD = {"steps": [{"weight": 10}], "window_s": 30, "min_requests": 5, "max_error_rate": 0.05}
# A task suite as tenants write them (exact match and parity), and the same with the reference
# log-likelihood, whose prompt-logprob requests vLLM's CPU build must take one at a time.
SUITE_METRICS = {"exact_match": {"min": 0.0}, "parity": {"max_logprob_diff": 1e-3}}
LOGLIK_METRICS = {**SUITE_METRICS, "reference_loglik": {"min_margin": -100}}


class Traffic:
    """Requests for the adapter one after another: (sent, received, status, served name)."""

    def __init__(self, url: str, key: str, prompt: str) -> None:
        self.url, self.key, self.prompt = url, key, prompt
        self.answers: list[tuple[float, float, int, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def _run(self) -> None:
        with httpx.Client(timeout=60, headers={"Authorization": f"Bearer {self.key}"}) as client:
            while not self._stop.is_set():
                sent = time.time()
                response = client.post(self.url + "/v1/completions", json={
                    "model": ADAPTER, "prompt": self.prompt, "max_tokens": 8, "temperature": 0})
                self.answers.append((sent, time.time(), response.status_code,
                                     response.headers.get("x-loraplane-served-name", "")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--good-runs", type=int, default=20)
    parser.add_argument("--bad-runs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=9, help="Challenger rounds, after a warm-up.")
    args = parser.parse_args()
    kit = build_task_kit(REPO / ".cache" / "task-kit", base_model_name=BASE)
    work = Path(tempfile.mkdtemp(prefix="loraplane-bench-delivery-"))
    work.chmod(0o755)
    running: list[services.Service] = []
    try:
        database_url, s3 = services.start_database_and_store(work, running, BUCKET)
        redis = services.start_redis(work / "redis")
        running.append(redis)
        common = {**services.registry_env(database_url, s3, BUCKET), "LORAPLANE_BROKER_URL": redis.url}
        registry = services.start_registry(work / "registry", common, "--no-access-log")
        running.append(registry)
        db = make_engine(database_url)
        admin, uploader = _clients(registry, db)
        config = httpx.Response(200, content=(kit.base_dir / "config.json").read_bytes()).json()
        admin.post("/v1/base-models", json={"name": BASE, "config": config}).raise_for_status()
        metrics, params = canaries(work, kit, registry, admin, uploader, db, common, running, args)
        engine_started = start_eval_stack(work, kit, common, running)
        metrics.update(challenger_overhead(kit, admin, uploader, args.rounds, SUITE_METRICS, ""))
        metrics.update(challenger_overhead(kit, admin, uploader, args.rounds, LOGLIK_METRICS, "_with_loglik"))
        params.update({"good_policy": GOOD, "bad_policy": BAD, "challenger_rounds": args.rounds,
                       "challenger_suite": {"prompts": 32, "metrics": SUITE_METRICS},
                       "challenger_suite_with_loglik": {"prompts": 32, "metrics": LOGLIK_METRICS},
                       "eval_engine": engine_started})
        report.write("delivery", metrics, params)
    finally:
        for service in reversed(running):
            service.stop()


def _clients(registry: services.Service, db) -> tuple[httpx.Client, httpx.Client]:
    plain = {}
    with unit_of_work(db) as session:
        for name, role, tenant in (("admin", Role.ADMIN, None), ("uploader", Role.UPLOADER, "acme")):
            _, plain[name] = tokens.create_token(session, subject=f"bench-{name}", role=role,
                                                 tenant=tenant, actor="bench")
    return tuple(httpx.Client(base_url=registry.url, timeout=600, headers={"Authorization": f"Bearer {plain[n]}"})
                 for n in ("admin", "uploader"))


def canaries(work: Path, kit, registry, admin, uploader, db, common: dict, running: list,
             args) -> tuple[dict, dict]:
    create_suite(admin, "delivery-parity", BASE, kit.suites["digits_to_words"][:2], {"parity": {}})
    # One router, trusted by the operator to decide alone (the default needs two).
    admin.post("/v1/pools", json={"name": POOL, "base_model": BASE, "max_loras": 2, "max_cpu_loras": 8,
                                  "max_lora_rank": 16, "dtype": "float32",
                                  "canary_min_routers": 1}).raise_for_status()
    scoped = {name: admin.post("/v1/tokens", json={"subject": f"delivery-{name}", **scope}).json()["token"]
              for name, scope in (("node", {"role": "node", "pool": POOL, "instance_id": "node-0",
                                            "vllm_url": "http://127.0.0.1:9"}),
                                  ("router", {"role": "router", "pool": POOL, "instance_id": "router-0"}),
                                  ("app", {"role": "app", "tenant": "acme"}))}
    vllm = services.start_vllm(work / "node", services.kit_engine(kit, BASE))
    running.append(vllm)
    proxy = FaultProxy(vllm.url).__enter__()
    admin.put(f"/v1/pools/{POOL}/nodes/node-0/address", json={"vllm_url": proxy.url}).raise_for_status()
    running.append(services.start_agent(work / "node" / "agent", pool=POOL, vllm_url=proxy.url,
                                        registry_url=registry.url, token=scoped["node"], node_id="node-0",
                                        metrics_port=services.free_port()))
    router = services.start_router(work / "router", pool=POOL, registry_url=registry.url, token=scoped["router"],
                                   settings={"LORAPLANE_ROUTER_TRAFFIC_REPORT_S": "0.5",
                                             "LORAPLANE_ROUTER_NODES_POLL_S": "0.5"})
    running.append(router)
    running.append(services.start_housekeeper(work / "housekeeper", {**common, "LORAPLANE_CANARY_CHECK_S": "0.5",
                                                                                  "LORAPLANE_CANARY_GRACE_S": "1.5"}))
    versions = [_ready(uploader, admin, db, kit.adapters[name])
                for name in ("digits_to_words", "digits_to_words_v2", "digits_to_words_noisy")]
    first = uploader.post(f"/v1/pools/{POOL}/promotions", json={"adapter": ADAPTER, "version": 1})
    admin.post(f"/v1/promotions/{first.json()['id']}/approve", json={"comment": "first"}).raise_for_status()
    traffic = Traffic(router.url, scoped["app"], kit.suites["digits_to_words"][0]["prompt"])
    try:
        false_rollbacks, good_s = 0, []
        for run in range(args.good_runs):
            candidate = versions[(run + 1) % 2]
            started = time.monotonic()
            outcome = _canary(admin, uploader, candidate, GOOD, timeout_s=120)
            good_s.append(time.monotonic() - started)
            false_rollbacks += outcome != "promoted"
            print(f"good canary {run + 1}: {outcome} in {good_s[-1]:.1f} s", flush=True)
        detect, served = [], []
        bad = versions[2]
        proxy.failing.add(bad["served_name"])
        for run in range(args.bad_runs):
            mark = len(traffic.answers)
            outcome = _canary(admin, uploader, bad, BAD, timeout_s=BAD["window_s"] + 60)
            rolled_at = _event_time(admin, "canary.rolled_back", bad["served_name"])
            answers = traffic.answers[mark:]
            first_bad = min(sent for sent, _, status, name in answers if name == bad["served_name"] and status == 500)
            detect.append(rolled_at - first_bad)
            served.append(sum(1 for _, got, _, name in answers if name == bad["served_name"] and got <= rolled_at))
            print(f"bad canary {run + 1}: {outcome}, detected in {detect[-1]:.2f} s after "
                  f"{served[-1]} answers", flush=True)
    finally:
        traffic.stop()
        proxy.__exit__()
    metrics = {"bad_canary_detect_s": round(statistics.median(detect), 2),
               "bad_canary_detect_s_max": round(max(detect), 2),
               "bad_canary_requests_served": statistics.median(served),
               "bad_canary_window_s": BAD["window_s"],
               "good_canary_false_rollbacks": false_rollbacks,
               "good_canary_runs": args.good_runs,
               "good_canary_decide_s_median": round(statistics.median(good_s), 2)}
    return metrics, {"good_runs": args.good_runs, "bad_runs": args.bad_runs, "canary_check_s": 0.5,
                     "router_traffic_report_s": 0.5, "canary_grace_s": 1.5}


def _ready(uploader, admin, db, folder: Path) -> dict:
    """Uploaded, with a passed parity evaluation recorded (the canaries' gates need one)."""
    version = upload_dir(uploader, ADAPTER, folder)
    path = f"/v1/adapters/{ADAPTER}/versions/{version['number']}/evaluations"
    uploader.post(path, json={"suite": "delivery-parity"}).raise_for_status()
    for evaluation in evaluations_of(admin, version):
        if evaluation["state"] == "queued":
            finish_evaluation(db, evaluation["id"])
    return version


def _canary(admin, uploader, version: dict, policy: dict, *, timeout_s: float) -> str:
    created = uploader.post(f"/v1/pools/{POOL}/promotions", json={
        "adapter": ADAPTER, "version": version["number"], "alias": "canary", "analysis": policy})
    created.raise_for_status()
    promotion_id = created.json()["id"]
    admin.post(f"/v1/promotions/{promotion_id}/approve", json={"comment": "canary"}).raise_for_status()

    def decided() -> str | None:
        state = admin.get(f"/v1/promotions/{promotion_id}").json()["canary_state"]
        return state if state in ("promoted", "rolled_back") else None

    wait_for(lambda: decided() is not None, timeout_s=timeout_s, what=f"canary {promotion_id} decided")
    return decided()


def _event_time(admin, action: str, served: str) -> float:
    events = admin.get("/v1/audit", params={"action": action, "limit": 200}).json()["items"]
    at = max(e["at"] for e in events if (e.get("after") or {}).get("served_name") == served)
    return datetime.fromisoformat(at).timestamp()


def start_eval_stack(work: Path, kit, common: dict, running: list) -> str:
    engine = services.start_vllm(work / "eval-vllm", services.kit_engine(kit, BASE, max_loras=4))
    running.append(engine)
    running.append(services.start_worker(work / "worker", {
        **common, "LORAPLANE_ENGINE_URL": engine.url, "LORAPLANE_ENGINE_BASE_MODEL": BASE,
        "LORAPLANE_ENGINE_MAX_LORAS": "4", "LORAPLANE_ENGINE_MAX_LORA_RANK": "16"}))
    return "vLLM on CPU, --max-loras 4"


def challenger_overhead(kit, admin, uploader, rounds: int, suite_metrics: dict, suffix: str) -> dict:
    adapter = f"acme/pair{suffix.replace('_', '-')}"
    incumbent = upload_dir(uploader, adapter, kit.adapters["digits_to_words"])
    challenger = upload_dir(uploader, adapter, kit.adapters["digits_to_words_noisy"])
    rows = kit.suites["digits_to_words"]
    alone, paired = [], []
    for round_ in range(rounds + 1):
        order = ("alone", "pair") if round_ % 2 == 0 else ("pair", "alone")
        for kind in order:
            name = f"round{suffix.replace('_', '-')}-{round_}-{kind}"
            uploader.post("/v1/eval-suites", json={
                "name": name, "tenant": "acme", "base_model": BASE, "examples": rows,
                "metrics": suite_metrics, "generation": {"max_tokens": 16}}).raise_for_status()
            body = {"suite": f"acme/{name}", **({"against": incumbent["number"]} if kind == "pair" else {})}
            requested = uploader.post(f"/v1/adapters/{adapter}/versions/{challenger['number']}/evaluations",
                                      json=body)
            requested.raise_for_status()
            ids = [requested.json()["id"]] + ([requested.json()["pair"]["other_evaluation_id"]]
                                               if kind == "pair" else [])
            finished = [_finished(admin, i) for i in ids]
            took = (max(datetime.fromisoformat(e["finished_at"]) for e in finished)
                    - min(datetime.fromisoformat(e["started_at"]) for e in finished)).total_seconds()
            if round_:  # the first round warms the engine and the worker's caches
                (alone if kind == "alone" else paired).append(took)
            print(f"challenger{suffix} round {round_} {kind}: {took:.2f} s", flush=True)
    return {f"challenger_eval_overhead_ratio{suffix}": round(statistics.median(paired) / statistics.median(alone), 3),
            f"challenger_alone_s_median{suffix}": round(statistics.median(alone), 2),
            f"challenger_pair_s_median{suffix}": round(statistics.median(paired), 2)}


def _finished(client: httpx.Client, evaluation_id: int) -> dict:
    found = {}

    def done() -> bool:
        found.update(client.get(f"/v1/evaluations/{evaluation_id}").json())
        return found["state"] in ("passed", "failed")

    wait_for(done, timeout_s=600, what=f"evaluation {evaluation_id}")
    return found


if __name__ == "__main__":
    main()
