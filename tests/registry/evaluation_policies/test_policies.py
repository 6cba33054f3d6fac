"""An adapter's evaluation policy: its own suites, required beside the pool's, and the margins a
challenger is held to against the version it would replace. Outcomes are recorded here as a
worker records them (the real engine's side is tests/workers/test_challenger.py)."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from devkit.pipeline_steps import evaluations_of, finish_evaluation, request_promotion
from registry.evaluations import claims
from registry.tables import Adapter, AuditEvent, Evaluation, Promotion
from tests.registry.conftest import PROMO_BASE
from tests.registry.requalification.support import dashboard
from tests.support.asserts import assert_refused
from devkit.units_of_work import unit_of_work

TASK_SUITE = "acme/promo-task"
ROWS = [{"prompt": "1 2 =>", "reference": "one two"}]


@pytest.fixture(scope="module")
def task_suites(promo_pools, client_for, base_model) -> dict[str, str]:
    """acme's own suite for promo-base, globex's, and acme's for another base."""
    made = {}
    for key, client, tenant, name, base in (
            ("acme", "acme_uploader", "acme", "promo-task", PROMO_BASE),
            ("globex", "globex_uploader", "globex", "secret-task", PROMO_BASE),
            ("other_base", "acme_uploader", "acme", "llama-task", "tiny-llama")):
        body = {"name": name, "tenant": tenant, "base_model": base, "examples": ROWS,
                "metrics": {"exact_match": {"min": 0.5}}}
        response = client_for(client).post("/v1/eval-suites", json=body)
        assert response.status_code == 201, response.text
        made[key] = response.json()["name"]
    return made


def policy_path(adapter: str) -> str:
    return f"/v1/adapters/{adapter}/evaluation-policy"


def set_policy(client, adapter: str, suites: list[str], *, approver=None, **challenger) -> dict:
    """Set a policy; one that weakens the policy in force is proposed, and `approver` (a second
    person) puts it in force."""
    response = client.put(policy_path(adapter), json={"required_suites": suites, "challenger": challenger})
    if approver is not None:
        assert response.status_code == 202, response.text
        response = approver.post(policy_path(adapter) + "/approve",
                                 json={"sha256": response.json()["proposed"]["sha256"]})
    assert response.status_code == 200, response.text
    return response.json()


def policy_and_events(engine, tenant_adapter: str) -> tuple[dict | None, int]:
    tenant, name = tenant_adapter.split("/")
    with Session(engine) as session:
        policy = session.scalar(select(Adapter.evaluation_policy).where(Adapter.name == name))
        events = session.scalar(select(func.count()).select_from(AuditEvent)
                                .where(AuditEvent.action == "adapter.evaluation_policy"))
    return policy, events


def test_the_tenant_sets_its_adapter_policy_and_every_reader_sees_it(
        client_for, make_ready, task_suites, engine):
    make_ready("policy-read", evaluate=False)
    set_by = client_for("acme_uploader")

    body = set_policy(set_by, "acme/policy-read", [task_suites["acme"]], margins={"exact_match": 0.05},
                      require_improvement=["contains"])

    assert body["required_suites"] == [TASK_SUITE]
    assert body["challenger"] == {"margins": {"exact_match": 0.05}, "require_improvement": ["contains"]}
    assert body["effective_margins"] == {"exact_match": 0.05, "contains": 0.0, "reference_loglik": 0.1}
    assert client_for("acme_reviewer").get(policy_path("acme/policy-read")).json() == body
    with Session(engine) as session:
        event = session.scalars(select(AuditEvent).where(AuditEvent.action == "adapter.evaluation_policy",
                                                         AuditEvent.subject == "acme/policy-read")).one()
    assert event.actor.startswith("acme_uploader") and event.after["policy"]["required_suites"] == [TASK_SUITE]


@pytest.fixture(scope="module")
def refused_adapter(client_for, make_ready, task_suites) -> None:
    make_ready("policy-refused", evaluate=False)
    set_policy(client_for("acme_uploader"), "acme/policy-refused", [TASK_SUITE])


@pytest.mark.parametrize(("who", "body", "status", "code", "message"), [
    ("acme_reviewer", {"required_suites": []}, 403, "forbidden", "role 'reviewer' may not do this"),
    ("globex_uploader", {"required_suites": []}, 403, "forbidden", "belongs to tenant 'globex', not 'acme'"),
    ("serving_node", {"required_suites": []}, 403, "forbidden", "role 'node' may not do this"),
    ("acme_uploader", {"required_suites": ["globex/secret-task"]}, 404, "suite_not_found",
     "eval suite 'globex/secret-task' does not exist"),
    ("global_admin", {"required_suites": ["globex/secret-task"]}, 404, "suite_not_found",
     "eval suite 'globex/secret-task' does not exist"),
    ("acme_uploader", {"required_suites": ["no-such-suite"]}, 404, "suite_not_found", "'no-such-suite'"),
    ("acme_uploader", {"required_suites": ["acme/llama-task"]}, 422, "suite_base_mismatch",
     "eval suite 'acme/llama-task' is for another base model than acme/policy-refused"),
    ("acme_uploader", {"required_suites": [TASK_SUITE, TASK_SUITE]}, 422, "invalid_request",
     "required_suites names a suite twice"),
    ("acme_uploader", {"required_suites": [f"s{i}" for i in range(17)]}, 422, "invalid_request",
     "required_suites"),
    ("acme_uploader", {"challenger": {"margins": {"parity": 0.1}}}, 422, "invalid_request", "margins"),
    ("acme_uploader", {"challenger": {"margins": {"exact_match": 1.5}}}, 422, "invalid_request",
     "the margin of exact_match must be between 0 and 1, not 1.5"),
    ("acme_uploader", {"challenger": {"require_improvement": ["bleu"]}}, 422, "invalid_request",
     "require_improvement"),
    ("acme_uploader", {"required_suites": [], "owner": "me"}, 422, "invalid_request", "owner"),
])
def test_a_bad_policy_is_refused_and_nothing_changes(who, body, status, code, message, client_for,
                                                     refused_adapter, engine):
    before = policy_and_events(engine, "acme/policy-refused")

    response = client_for(who).put(policy_path("acme/policy-refused"), json=body)

    assert_refused(response, status, code, message)
    assert policy_and_events(engine, "acme/policy-refused") == before


def test_another_tenants_adapter_policy_is_not_readable(client_for, make_ready, task_suites):
    make_ready("policy-private", evaluate=False)
    response = client_for("globex_admin").get(policy_path("acme/policy-private"))
    assert_refused(response, 403, "forbidden", "belongs to tenant 'globex', not 'acme'")
    missing = client_for("acme_admin").get(policy_path("acme/no-such-adapter"))
    assert_refused(missing, 404, "adapter_not_found", "acme/no-such-adapter")


def test_an_adapter_suite_is_evaluated_at_upload_and_blocks_promotion_until_it_passes(
        client_for, make_ready, task_suites, promo_pools, engine):
    uploader, admin = client_for("acme_uploader"), client_for("acme_admin")
    make_ready("task-gated", evaluate=False)
    set_policy(uploader, "acme/task-gated", [TASK_SUITE])
    version = make_ready("task-gated", evaluate=False)
    queued = {e["suite"]: e for e in evaluations_of(admin, version)}
    assert set(queued) == {"promo-suite", TASK_SUITE}  # the pool's and the adapter's own
    finish_evaluation(engine, queued["promo-suite"]["id"])
    promotions = promotion_count(engine)

    blocked = request_promotion(uploader, promo_pools["gated"], version)

    assert_refused(blocked, 422, "gate_blocked", "[adapter_suites] acme/task-gated's evaluation policy "
                   f"requires suites that have not passed on acme/task-gated@2: {TASK_SUITE} (still queued)")
    assert {d["name"] for d in blocked.json()["error"]["details"]} == {"adapter_suites"}
    assert promotion_count(engine) == promotions

    finish_evaluation(engine, queued[TASK_SUITE]["id"], passed=False)
    failed = request_promotion(uploader, promo_pools["gated"], version)
    assert_refused(failed, 422, "gate_blocked", f"{TASK_SUITE} (failed: exact_match)")
    assert promotion_count(engine) == promotions

    again = uploader.post(f"/v1/adapters/acme/task-gated/versions/2/evaluations", json={"suite": TASK_SUITE})
    assert again.status_code == 202, again.text
    finish_evaluation(engine, again.json()["id"])
    created = request_promotion(uploader, promo_pools["gated"], version)
    assert created.status_code == 201, created.text
    gates = {g["name"]: g for g in created.json()["gates"]}
    assert gates["adapter_suites"]["message"] == f"every suite of acme/task-gated's own task passed ({TASK_SUITE})"
    assert gates["required_suites"]["message"] == "every suite pool 'promo-gated' requires passed (promo-suite)"


def promotion_count(engine) -> int:
    with Session(engine) as session:
        return session.scalar(select(func.count()).select_from(Promotion))


@pytest.fixture(scope="module")
def champion(client_for, make_ready, task_suites, promo_pools, second_reviewer, engine) -> dict:
    """acme/champ@1 in production in promo-open, with a policy of its own suite, margin 0.1."""
    uploader = client_for("acme_uploader")
    version = make_ready("champ")  # every evaluation it has passes
    set_policy(uploader, "acme/champ", [TASK_SUITE], margins={"exact_match": 0.1})
    own = uploader.post("/v1/adapters/acme/champ/versions/1/evaluations", json={"suite": TASK_SUITE})
    finish_evaluation(engine, own.json()["id"])
    created = request_promotion(uploader, promo_pools["open"], version)
    assert created.status_code == 201, created.text
    assert second_reviewer.post(f"/v1/promotions/{created.json()['id']}/approve",
                                json={"comment": "first"}).status_code == 200
    return version


def upload_challenger(make_ready, client_for, engine) -> tuple[dict, dict]:
    """A new version of acme/champ: (version, its paired evaluation on the task suite)."""
    version = make_ready("champ", evaluate=False)
    evaluations = evaluations_of(client_for("acme_admin"), version)
    paired = [e for e in evaluations if e["suite"] == TASK_SUITE]
    assert len(paired) == 1 and paired[0]["pair"]["role"] == "challenger", paired
    assert paired[0]["pair"]["other_served_name"] == "acme/champ@1"
    # The global suite the base's pools require: its parity is the one the gate counts.
    for evaluation in evaluations:
        if evaluation["suite"] != TASK_SUITE:
            finish_evaluation(engine, evaluation["id"])
    return version, paired[0]


def finish_pair(engine, challenger: dict, mine: float, theirs: float) -> None:
    """Record both halves (here one at a time; a worker records them from one batch)."""
    finish_evaluation(engine, challenger["pair"]["other_evaluation_id"], exact_match=theirs)
    finish_evaluation(engine, challenger["id"], exact_match=mine)


def test_a_challenger_worse_than_the_margin_is_blocked_with_both_scores(
        champion, make_ready, client_for, promo_pools, engine):
    version, paired = upload_challenger(make_ready, client_for, engine)
    finish_pair(engine, paired, mine=0.7, theirs=0.9)
    promotions = promotion_count(engine)

    response = request_promotion(client_for("acme_uploader"), promo_pools["open"], version)

    assert_refused(response, 422, "gate_blocked",
                   f"[challenger] acme/champ@{version['number']} against acme/champ@1, which it would "
                   f"replace: {TASK_SUITE}: exact_match 0.7 vs 0.9 for acme/champ@1, worse by more than "
                   "the margin 0.1")
    assert {d["name"] for d in response.json()["error"]["details"]} == {"challenger"}
    assert promotion_count(engine) == promotions


def test_halves_evaluated_on_two_engines_are_not_compared(champion, make_ready, client_for, promo_pools, engine):
    """A half evaluated again alone (its worker died between the two records) may run on another
    engine: the challenger is not judged on that comparison, even a better one."""
    version, paired = upload_challenger(make_ready, client_for, engine)
    one = {"url": "http://eval-a:8000", "vllm_version": "0.32.0", "dtype": "float32", "flags": {}}
    finish_evaluation(engine, paired["pair"]["other_evaluation_id"], exact_match=0.5, engine_record=one)
    finish_evaluation(engine, paired["id"], exact_match=1.0, engine_record={**one, "url": "http://eval-b:8000"})
    promotions = promotion_count(engine)

    response = request_promotion(client_for("acme_uploader"), promo_pools["open"], version)

    assert_refused(response, 422, "gate_blocked",
                   f"{TASK_SUITE}: the two versions were evaluated on different engines (vLLM 0.32.0 at "
                   "http://eval-b:8000 and vLLM 0.32.0 at http://eval-a:8000)")
    assert promotion_count(engine) == promotions


def test_a_challenger_within_the_margin_passes_unless_improvement_is_required(
        champion, make_ready, client_for, promo_pools, engine, second_reviewer):
    uploader = client_for("acme_uploader")
    version, paired = upload_challenger(make_ready, client_for, engine)
    finish_pair(engine, paired, mine=0.85, theirs=0.9)
    set_policy(uploader, "acme/champ", [TASK_SUITE], margins={"exact_match": 0.1},
               require_improvement=["exact_match"])
    promotions = promotion_count(engine)

    demanding = request_promotion(uploader, promo_pools["open"], version)

    assert_refused(demanding, 422, "gate_blocked", "exact_match 0.85 vs 0.9 for acme/champ@1, and the "
                   "policy requires it to be better")
    assert promotion_count(engine) == promotions
    set_policy(uploader, "acme/champ", [TASK_SUITE], margins={"exact_match": 0.1}, approver=second_reviewer)
    created = request_promotion(uploader, promo_pools["open"], version)
    assert created.status_code == 201, created.text
    gate = {g["name"]: g for g in created.json()["gates"]}["challenger"]
    assert gate == {"name": "challenger", "passed": True, "hint": "",
                    "message": f"not worse than acme/champ@1: {TASK_SUITE}: exact_match 0.85 vs 0.9"}
    rejected = second_reviewer.post(f"/v1/promotions/{created.json()['id']}/reject",
                                    json={"comment": "the alias stays free for the next test"})
    assert rejected.status_code == 200, rejected.text


def test_a_version_not_yet_compared_is_blocked_until_a_pair_is_requested(
        champion, make_ready, client_for, promo_pools, engine, second_reviewer, registry, tokens):
    uploader = client_for("acme_uploader")
    # uploaded without a policy: no pair is queued
    set_policy(uploader, "acme/champ", [], approver=second_reviewer)
    version = make_ready("champ")
    set_policy(uploader, "acme/champ", [TASK_SUITE], margins={"exact_match": 0.1})
    number = version["number"]
    evaluations = f"/v1/adapters/acme/champ/versions/{number}/evaluations"
    own = uploader.post(evaluations, json={"suite": TASK_SUITE})
    finish_evaluation(engine, own.json()["id"])

    response = request_promotion(uploader, promo_pools["open"], version)

    assert_refused(response, 422, "gate_blocked", f"{TASK_SUITE}: not compared yet")
    assert f"loraplane eval run acme/champ@{number} --suite SUITE --against 1" in response.json()["error"]["hint"]

    requested = uploader.post(evaluations, json={"suite": TASK_SUITE, "against": 1})
    assert requested.status_code == 202, requested.text
    pair = requested.json()["pair"]
    assert (pair["role"], pair["other_served_name"], pair["other_state"]) == ("challenger", "acme/champ@1", "queued")
    repeated = uploader.post(evaluations, json={"suite": TASK_SUITE, "against": 1})
    assert repeated.status_code == 200 and repeated.json()["id"] == requested.json()["id"]
    incumbent = uploader.get(f"/v1/evaluations/{pair['other_evaluation_id']}").json()
    assert incumbent["pair"]["role"] == "incumbent" and incumbent["pair"]["other_evaluation_id"] == requested.json()["id"]

    finish_pair(engine, requested.json(), mine=1.0, theirs=0.9)
    # The margin raised since production's promotion, by the uploader and a second person: the
    # reviewer of this promotion sees it, on the API and on the promotion's page.
    set_policy(uploader, "acme/champ", [TASK_SUITE], margins={"exact_match": 0.2}, approver=second_reviewer)
    created = request_promotion(uploader, promo_pools["open"], version)
    assert created.status_code == 201, created.text
    changed = ["weakens: the challenger's margin on exact_match raised from 0.1 to 0.2"]
    assert created.json()["policy_changes"] == changed
    browser = dashboard(registry.url, tokens["acme_reviewer"])
    try:
        page = browser.get(f"/ui/promotions/{created.json()['id']}").text
    finally:
        browser.close()
    section = page.split('id="policy-h"')[1].split("</section>")[0]
    assert '<li class="fail">weakens: the challenger&#39;s margin on exact_match raised from 0.1 to 0.2</li>' in section
    second_reviewer.post(f"/v1/promotions/{created.json()['id']}/reject", json={"comment": "seen"})
    set_policy(uploader, "acme/champ", [TASK_SUITE], margins={"exact_match": 0.1})  # stricter: at once


@pytest.mark.parametrize(("against", "status", "code", "message"), [
    ("self", 422, "same_version", "cannot be compared with itself"),
    (999, 404, "version_not_found", "999"),
])
def test_a_pair_against_no_other_version_is_refused(against, status, code, message, champion, client_for,
                                                    engine):
    uploader = client_for("acme_uploader")
    number = champion["number"]
    with Session(engine) as session:
        before = session.scalar(select(func.count()).select_from(Evaluation))
    response = uploader.post(f"/v1/adapters/acme/champ/versions/{number}/evaluations",
                             json={"suite": TASK_SUITE, "against": number if against == "self" else against})
    assert_refused(response, status, code, message)
    with Session(engine) as session:
        assert session.scalar(select(func.count()).select_from(Evaluation)) == before


def test_the_two_halves_of_a_pair_are_always_claimed_together(champion, make_ready, client_for, engine):
    version, paired = upload_challenger(make_ready, client_for, engine)
    incumbent_id = paired["pair"]["other_evaluation_id"]
    for lead in (incumbent_id, paired["id"]):
        with unit_of_work(engine) as session:
            claim = claims.claim_batch(session, lead, max_versions=1, lease_s=60)
            claimed = {e.id for e in claim.evaluations}
            claims.release(session, claim.token, list(claimed), reason="looked only")
        assert {incumbent_id, paired["id"]} <= claimed


@pytest.fixture
def weakened(client_for, make_ready, task_suites, engine, second_reviewer) -> str:
    """acme/policy-weak, held to acme's task suite with a margin of 0.05 (approved by a second
    person where an earlier test left it stricter), with no proposal waiting."""
    if not client_for("acme_admin").get(policy_path("acme/policy-weak")).status_code == 200:
        make_ready("policy-weak", evaluate=False)
    uploader = client_for("acme_uploader")
    uploader.delete(policy_path("acme/policy-weak") + "/proposed")
    body = {"required_suites": [TASK_SUITE], "challenger": {"margins": {"exact_match": 0.05}}}
    response = uploader.put(policy_path("acme/policy-weak"), json=body)
    if response.status_code == 202:
        response = second_reviewer.post(policy_path("acme/policy-weak") + "/approve",
                                        json={"sha256": response.json()["proposed"]["sha256"]})
    assert response.status_code == 200, response.text
    return "acme/policy-weak"


def test_a_policy_that_weakens_waits_for_a_second_person(weakened, client_for, second_reviewer, engine):
    uploader = client_for("acme_uploader")
    before = policy_and_events(engine, weakened)

    proposed = uploader.put(policy_path(weakened), json={"challenger": {"margins": {"exact_match": 0.3}}})

    assert proposed.status_code == 202, proposed.text
    body = proposed.json()
    assert body["required_suites"] == [TASK_SUITE] and body["effective_margins"]["exact_match"] == 0.05
    assert body["proposed"]["weakens"] == [f"no longer requires suite {TASK_SUITE!r}",
                                           "the challenger's margin on exact_match raised from 0.05 to 0.3"]
    assert body["proposed"]["proposed_by"].startswith("acme_uploader")
    assert policy_and_events(engine, weakened) == before  # the policy in force is unchanged
    with Session(engine) as session:
        (event,) = session.scalars(select(AuditEvent).where(
            AuditEvent.action == "adapter.evaluation_policy.proposed", AuditEvent.subject == weakened)
            .order_by(AuditEvent.id.desc()).limit(1))
    assert event.after["weakens"] == body["proposed"]["weakens"]

    for who, status, code, message in (
            ("acme_uploader", 403, "forbidden", "role 'uploader' may not do this"),
            ("globex_admin", 403, "forbidden", "belongs to tenant 'globex', not 'acme'"),
            ("serving_node", 403, "forbidden", "role 'node' may not do this")):
        assert_refused(client_for(who).post(policy_path(weakened) + "/approve",
                                            json={"sha256": body["proposed"]["sha256"]}), status, code, message)
    assert policy_and_events(engine, weakened) == before

    approved = second_reviewer.post(policy_path(weakened) + "/approve", json={"sha256": body["proposed"]["sha256"]})
    assert approved.status_code == 200, approved.text
    assert approved.json()["required_suites"] == [] and approved.json()["proposed"] is None
    with Session(engine) as session:
        (applied,) = session.scalars(select(AuditEvent).where(
            AuditEvent.action == "adapter.evaluation_policy", AuditEvent.subject == weakened)
            .order_by(AuditEvent.id.desc()).limit(1))
    assert applied.after["proposed_by"].startswith("acme_uploader") and applied.after["policy"]["required_suites"] == []
    assert_refused(second_reviewer.post(policy_path(weakened) + "/approve", json={"sha256": "0" * 64}),
                   409, "no_proposed_policy",
                   f"{weakened} has no proposed evaluation policy to approve")


def test_its_proposer_cannot_approve_a_weakening(weakened, client_for, engine):
    admin = client_for("acme_admin")
    assert admin.put(policy_path(weakened), json={"required_suites": []}).status_code == 202
    before = policy_and_events(engine, weakened)
    proposal = admin.get(policy_path(weakened)).json()["proposed"]
    assert_refused(admin.post(policy_path(weakened) + "/approve", json={"sha256": proposal["sha256"]}), 403, "four_eyes",
                   "proposed this policy and may not approve it")
    assert policy_and_events(engine, weakened) == before
    withdrawn = client_for("acme_uploader").delete(policy_path(weakened) + "/proposed")
    assert withdrawn.status_code == 200 and withdrawn.json()["proposed"] is None


def test_a_stricter_policy_applies_at_once_and_replaces_a_proposal(weakened, client_for, engine):
    uploader = client_for("acme_uploader")
    assert uploader.put(policy_path(weakened), json={"required_suites": []}).status_code == 202
    stricter = set_policy(uploader, weakened, [TASK_SUITE], margins={"exact_match": 0.0},
                          require_improvement=["exact_match"])
    assert stricter["effective_margins"]["exact_match"] == 0.0 and stricter["proposed"] is None


def test_a_proposal_replaced_after_the_approver_read_it_is_not_approved(weakened, client_for, second_reviewer, engine):
    uploader = client_for("acme_uploader")
    read = uploader.put(policy_path(weakened), json={"required_suites": [TASK_SUITE],
                                                      "challenger": {"margins": {"exact_match": 0.06}}})
    assert read.status_code == 202, read.text
    seen = read.json()["proposed"]["sha256"]
    # The proposer swaps in a much weaker one between the reviewer's read and approval.
    assert uploader.put(policy_path(weakened), json={"required_suites": []}).status_code == 202
    before = policy_and_events(engine, weakened)

    refused = second_reviewer.post(policy_path(weakened) + "/approve", json={"sha256": seen})

    assert_refused(refused, 409, "proposal_changed", f"the proposed policy of {weakened} is not the one you read")
    assert policy_and_events(engine, weakened) == before
    client_for("acme_uploader").delete(policy_path(weakened) + "/proposed")
