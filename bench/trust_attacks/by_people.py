"""What a tenant admin, an uploader or a reviewer of acme attempts alone."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from bench.trust_attacks.attack import Attack, Outcome
from bench.trust_attacks.world import CODE, POOL, World, upload
from devkit.pipeline_steps import request_promotion
from registry.tables import Promotion

POLICY_ADAPTER = "acme/trust-policy"
# What refuses a person acting alone; any other refusal means the attack was not judged at all.
ALONE = {"four_eyes", "forbidden"}


def _pending(world: World, requester: str, key: str = "chat@3"):
    """A promotion of `key` requested by `requester` (an earlier one is rejected first)."""
    response = request_promotion(world.client(requester), POOL, world.versions[key])
    if response.status_code == 409:  # the alias is busy with an earlier attack's request
        with Session(world.engine) as session:
            earlier = session.scalar(select(Promotion.id).where(Promotion.state == "awaiting_approval",
                                                                Promotion.alias == "production"))
        world.client("global_admin").post(f"/v1/promotions/{earlier}/reject", json={"comment": "next attack"})
        response = request_promotion(world.client(requester), POOL, world.versions[key])
    response.raise_for_status()
    return response.json()["id"]


def _approved(world: World, who: str, promotion_id: int) -> Outcome:
    response = world.client(who).post(f"/v1/promotions/{promotion_id}/approve", json={"comment": "mine"})
    approved = response.status_code == 200
    if not approved:
        refused_as = response.json()["error"]["code"]
        if refused_as not in ALONE:
            raise AssertionError(f"the approval was refused as {refused_as!r}, not as one person acting "
                                 f"alone: the attack was not judged ({response.text[:300]})")
        world.client("global_admin").post(f"/v1/promotions/{promotion_id}/reject", json={"comment": "refused"})
    return Outcome(approved, f"approval answered {response.status_code}")


def tenant_admin_issues_another_tenants_token(world: World) -> Outcome:
    response = world.client("tenant_admin").post("/v1/tokens", json={
        "subject": "mole", "role": "admin", "tenant": "globex"})
    return Outcome(response.status_code == 201, f"a globex admin token answered {response.status_code}")


def tenant_admin_approves_through_a_reviewer_it_mints(world: World) -> Outcome:
    promotion_id = _pending(world, "tenant_admin")
    minted = world.client("tenant_admin").post("/v1/tokens", json={
        "subject": "bob", "role": "reviewer", "tenant": "acme"})
    minted.raise_for_status()
    world.tokens["minted_reviewer"] = minted.json()["token"]
    return _approved(world, "minted_reviewer", promotion_id)


def tenant_admin_reads_another_tenant(world: World) -> Outcome:
    statuses = [world.client("tenant_admin").get(path).status_code
                for path in (f"/v1/adapters/{CODE}", f"/v1/adapters/{CODE}/versions/1", "/v1/adapters?tenant=globex")]
    return Outcome(any(s == 200 for s in statuses), f"globex's adapter, version, listing answered {statuses}")


def uploader_approves_its_own(world: World) -> Outcome:
    return _approved(world, "uploader", _pending(world, "uploader"))


def uploader_weakens_its_policy_alone(world: World) -> Outcome:
    """On an adapter of its own: the policy would hold the world's other versions to a challenger."""
    upload(world.client("uploader"), POLICY_ADAPTER, 9)
    path = f"/v1/adapters/{POLICY_ADAPTER}/evaluation-policy"
    uploader = world.client("uploader")
    uploader.put(path, json={"required_suites": ["trust-suite"]}).raise_for_status()
    response = uploader.put(path, json={"required_suites": []})
    in_force = world.client("reviewer").get(path).json()["required_suites"]
    return Outcome(in_force == [], f"dropping its suite answered {response.status_code}; in force: {in_force}")


def reviewer_approves_what_it_requested(world: World) -> Outcome:
    return _approved(world, "reviewer", _pending(world, "reviewer"))


def reviewer_confirms_its_own_canary(world: World) -> Outcome:
    """The reviewer requested the canary: confirming a verdict is a second person's act."""
    response = world.client("reviewer").post(f"/v1/promotions/{world.canary_id}/canary/resume")
    if response.status_code != 200 and response.json()["error"]["code"] not in ALONE:
        raise AssertionError(f"the confirmation was refused for another reason: {response.text[:300]}")
    return Outcome(response.status_code == 200, f"its own canary's confirmation answered {response.status_code}")


def uploader_reads_another_tenants_weights(world: World) -> Outcome:
    statuses = [world.client("uploader").get(path).status_code for path in (
        f"/v1/adapters/{CODE}/versions/1/download", f"/v1/adapters/{CODE}/versions/1")]
    return Outcome(any(s == 200 for s in statuses), f"globex's download, version answered {statuses}")


ATTACKS = [
    Attack("tenant_admin", "issues_a_token_of_another_tenant", tenant_admin_issues_another_tenants_token),
    Attack("tenant_admin", "approves_through_a_reviewer_it_mints", tenant_admin_approves_through_a_reviewer_it_mints),
    Attack("tenant_admin", "reads_another_tenant", tenant_admin_reads_another_tenant),
    Attack("uploader", "approves_its_own_version", uploader_approves_its_own),
    Attack("uploader", "weakens_its_evaluation_policy_alone", uploader_weakens_its_policy_alone),
    Attack("uploader", "reads_another_tenants_weights", uploader_reads_another_tenants_weights),
    Attack("reviewer", "approves_what_it_requested", reviewer_approves_what_it_requested),
    Attack("reviewer", "confirms_its_own_canarys_verdict", reviewer_confirms_its_own_canary),
]
