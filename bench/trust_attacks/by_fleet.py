"""What a leaked node token, router token or app key attempts."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from bench.trust_attacks.attack import Attack, Outcome
from bench.trust_attacks.world import CODE, LIMITS, OTHER_POOL, POOL, World, prompts_reach_impostor
from registry.canaries import service as canaries
from registry.clock import aware
from registry.tables import Pool, Promotion, Requalification
from registry.traffic_windows.schemas import WINDOW_BUCKETS
from devkit.units_of_work import unit_of_work


def _report(world: World, node_id: str = "node-1", **extra):
    active = world.client("global_admin").get(f"/v1/pools/{POOL}/active-set").json()
    return world.client("node").put(f"/v1/pools/{POOL}/nodes/{node_id}/status", json={
        "generation": active["generation"], "limits": LIMITS,
        "loaded": [{"served_name": e["served_name"], "digest": e["digest"]} for e in active["entries"]], **extra})


def node_report_steers_prompts(world: World) -> Outcome:
    _report(world, vllm_url=world.impostor.url)
    reached = prompts_reach_impostor(world)
    return Outcome(reached, "a report naming the impostor's URL; prompts reached it" if reached
                   else "the report's URL is ignored: no prompt reached the impostor")


def node_reports_as_another_node(world: World) -> Outcome:
    status = _report(world, node_id="node-2").status_code
    return Outcome(200 <= status < 300, f"a report as node-2 answered {status}")


def node_reads_another_pool(world: World) -> Outcome:
    status = world.client("node").get(f"/v1/pools/{OTHER_POOL}/active-set").status_code
    return Outcome(status == 200, f"another pool's active set answered {status}")


def node_made_up_engine_marks_versions(world: World) -> Outcome:
    before = len(world.client("global_admin").get(f"/v1/pools/{POOL}/active-set").json()["entries"])
    for version in ("9.9.1", "9.9.2"):
        _report(world, engine={"vllm_version": version, "dtype": "float32", "flags": {}})
    after = len(world.client("global_admin").get(f"/v1/pools/{POOL}/active-set").json()["entries"])
    with Session(world.engine) as session:
        marks = session.scalars(select(Requalification.id).join(Pool).where(Pool.name == POOL)).all()
    return Outcome(bool(marks) or after < before,
                   f"{len(marks)} re-qualification marks, active set {before} -> {after} entries")


def node_reads_promotions_and_suites(world: World) -> Outcome:
    statuses = [world.client("node").get(path).status_code
                for path in ("/v1/promotions", "/v1/eval-suites", f"/v1/pools/{POOL}/sizing")]
    return Outcome(any(s == 200 for s in statuses), f"promotions, suites, sizing answered {statuses}")


def windows_of(canary: str, production: str, *, canary_errors: int = 0) -> list[dict]:
    def window(name: str, alias: str, errors: int) -> dict:
        answered = [0] * (len(WINDOW_BUCKETS) + 1)
        answered[3] = 5000 - errors
        return {"served_name": name, "alias": alias, "requests": 5000,
                "errors": {"server_error": errors} if errors else {}, "completion_tokens": 80000,
                "busy_s": 400.0, "ttft_buckets": answered, "latency_buckets": answered}
    return [window(canary, "canary", canary_errors), window(production, "production", 0)]


def _canary_after_check(world: World, router_client, router_id: str, windows: list[dict]) -> tuple[int | None, str]:
    router_client.put(f"/v1/pools/{POOL}/routers/{router_id}/traffic",
                      json={"requests_per_s": {}, "report_id": str(uuid.uuid4()), "windows": windows})
    return judge_canary(world)


def judge_canary(world: World) -> tuple[int | None, str]:
    """The housekeeper's check, as if the step's window were over: the canary's weight and state."""
    with unit_of_work(world.engine) as session:
        state = session.get(Promotion, world.canary_id).analysis_state
        began = aware(datetime.fromisoformat(state["step_started_at"]))
        canaries.check(session, world.canary_id, now=began + timedelta(seconds=61))
    with Session(world.engine) as session:
        promotion = session.get(Promotion, world.canary_id)
        return promotion.weight if promotion.state == "active" else None, promotion.state


def _served(world: World, key: str) -> str:
    return world.versions[key]["served_name"]


def router_forged_windows_step_a_canary(world: World) -> Outcome:
    weight, state = _canary_after_check(world, world.client("router"), "router-1",
                                        windows_of(_served(world, "chat@2"), _served(world, "chat@1")))
    moved = state != "active" or weight != 10
    return Outcome(moved, f"5,000 forged requests a side from one router: canary {state} at {weight}%")


def router_forged_errors_roll_a_canary_back(world: World) -> Outcome:
    weight, state = _canary_after_check(world, world.client("router"), "router-1",
                                        windows_of(_served(world, "chat@2"), _served(world, "chat@1"), canary_errors=4500))
    moved = state != "active" or weight != 10
    return Outcome(moved, f"90% forged errors from one router: canary {state} at {weight}%")


def router_downloads_weights(world: World) -> Outcome:
    body = world.client("router").get(f"/v1/pools/{POOL}/active-set").json()
    leaked = [e["served_name"] for e in body.get("entries", []) if e.get("files") or e.get("attestation")]
    return Outcome(bool(leaked), f"entries with file URLs or attestations: {leaked}")


def router_reports_as_another_router(world: World) -> Outcome:
    status = world.client("router").put(f"/v1/pools/{POOL}/routers/router-2/traffic", json={
        "requests_per_s": {}, "report_id": str(uuid.uuid4()), "windows": []}).status_code
    return Outcome(200 <= status < 300, f"a traffic report as router-2 answered {status}")


def app_reads_the_registry(world: World) -> Outcome:
    statuses = [world.client("app").get(path).status_code
                for path in ("/v1/adapters?tenant=acme", f"/v1/pools/{POOL}/active-set", "/v1/promotions")]
    return Outcome(any(s == 200 for s in statuses), f"adapters, active set, promotions answered {statuses}")


def app_calls_another_tenants_adapter(world: World) -> Outcome:
    status = world.ask_router("app", CODE).status_code
    return Outcome(status != 404, f"globex's adapter through the router answered {status}")


def app_reaches_the_base_model(world: World) -> Outcome:
    status = world.ask_router("app", "trust-base").status_code
    return Outcome(status != 404, f"the base model through the router answered {status}")


ATTACKS = [
    Attack("node", "report_steers_prompts_to_its_server", node_report_steers_prompts),
    Attack("node", "reports_as_another_node", node_reports_as_another_node),
    Attack("node", "reads_another_pools_active_set", node_reads_another_pool),
    Attack("node", "made_up_engine_marks_or_empties_the_pool", node_made_up_engine_marks_versions),
    Attack("node", "reads_promotions_suites_and_sizing", node_reads_promotions_and_suites),
    Attack("router", "forged_windows_step_a_canary", router_forged_windows_step_a_canary),
    Attack("router", "forged_errors_roll_a_canary_back", router_forged_errors_roll_a_canary_back),
    Attack("router", "downloads_weights_or_attestations", router_downloads_weights),
    Attack("router", "reports_as_another_router", router_reports_as_another_router),
    Attack("app", "reads_the_registry", app_reads_the_registry),
    Attack("app", "calls_another_tenants_adapter", app_calls_another_tenants_adapter),
    Attack("app", "reaches_the_base_model", app_reaches_the_base_model),
]
