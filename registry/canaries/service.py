"""Run each canary's analysis: judge it on the traffic since its step began, then wait, step up,
stop at a manual gate, promote, or roll back. The housekeeper calls `check` for every analysed
canary on a schedule; several housekeepers may, since every change is made under the pool's lock
after reading the canary afresh.

A verdict is acted on only when enough routers each reached it on their own traffic (the pool's
`canary_min_routers`, two by default): forged windows from one leaked router token neither step,
promote nor roll back a canary. Short of them the canary awaits corroboration, at its weight,
and a reviewer may confirm the step's verdict as its second source.

A reviewer may pause a canary (its analysis stops, its weight stays) and resume it (the current
step starts over), and resumes a canary waiting at a manual gate or for corroboration: a second
person, as approval needs, never its uploader or requester."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any, TypeGuard

from sqlalchemy.orm import Session

from registry.active_set import signed_set
from registry.active_set.writing.change import ActiveSetChange
from registry.pool_lookup import CANARY, PRODUCTION
from registry.adapters import service as adapters
from registry.auth.principal import Principal, Role
from registry.canaries import analysis
from registry.canaries.schemas import CanaryStatus
from registry.clock import aware
from registry.errors import Conflict, Forbidden, NotFound
from registry.promotions import activation, analysis_seals, canary_actions, gates, rules
from registry.promotions import repository as promotions
from registry.promotions.analysis_policy import CanaryAnalysis
from registry.rows import existing
from registry.settings import get_settings
from registry.tables import Adapter, AdapterVersion, Pool, Promotion, Tenant
from registry.traffic_windows import repository as windows
from registry.traffic_windows import service as traffic

DECIDERS = {Role.ADMIN, Role.REVIEWER}
READERS = {Role.ADMIN, Role.REVIEWER, Role.UPLOADER}
ANALYSING, WAITING, PAUSED, AT_GATE = (canary_actions.ANALYSING, "waiting_for_traffic", "paused",
                                       "awaiting_gate")
UNCORROBORATED = "awaiting_corroboration"
PROMOTED, ROLLED_BACK, HELD = "promoted", "rolled_back", "held"
UNSEALED = "unsealed"  # its policy or state was written outside the registry: not judged
log = logging.getLogger(__name__)


def check(session: Session, promotion_id: int, *, now: datetime | None = None) -> str | None:
    """Judge one canary and act on the verdict; returns what happened (None: nothing to judge)."""
    now = now or windows.database_now(session)
    # Judged unlocked; acted on under the locks only if the state is still the one judged, so a
    # pause or a resume that came meanwhile is never overwritten.
    promotion = session.get(Promotion, promotion_id)
    judged = _analysis_state(promotion)
    if promotion is None or judged is None:
        return None
    if not analysis_seals.holds(promotion):
        log.error("canary %d is not judged: its analysis policy or state was changed outside the "
                  "registry (its seal does not hold); roll it back", promotion_id)
        return UNSEALED
    policy, state = CanaryAnalysis.model_validate(promotion.analysis), dict(judged)
    status = _status(session, promotion, policy, state, now)
    step = state["step"]
    evidence = {"policy": promotion.analysis, "step": step, "status": status.model_dump(mode="json"),
                "decided_by": _deciders(status, state)}
    uncorroborated = status.verdict != analysis.WAIT and not evidence["decided_by"]
    gate = status.verdict == analysis.PASS and policy.steps[step].manual_gate and not state.get("gate_opened")
    if status.verdict == analysis.WAIT or uncorroborated or gate:
        locked = promotions.promotion_for_update(session, promotion_id)
        if not _sealed_as_judged(locked, state):
            return "changed meanwhile"  # a pause, a resume or another check: judged afresh next time
        if uncorroborated:
            if state["state"] != UNCORROBORATED:  # audited once, not at every check
                activation.record(session, locked, "canary.awaiting_corroboration",
                                  canary_actions.AUTOMATIC, evidence=evidence)
            _save(locked, state, status, UNCORROBORATED)
            return UNCORROBORATED
        if gate:
            _save(locked, state, status, AT_GATE)
            activation.record(session, locked, "canary.awaiting_gate", canary_actions.AUTOMATIC,
                              evidence=evidence)
            return AT_GATE
        unjudged = any(c.passed is None for c in status.checks)
        label = WAITING if unjudged else ANALYSING
        _save(locked, state, status, label)
        return label
    return _act(session, promotion, policy, state, status, evidence)


def _act(session: Session, promotion: Promotion, policy: CanaryAnalysis, state: dict, status: CanaryStatus,
         evidence: dict) -> str:
    """A verdict that changes the active set, under the pool's lock (taken before the canary's,
    as every change takes them), reading the canary again."""
    change = ActiveSetChange.begin(session, promotion.pool_id)
    outcome = _act_in(session, change, promotion.id, policy, state, status, evidence)
    change.finish()  # when nothing moved, nodes find the same set at the new generation
    return outcome


def _act_in(session: Session, change: ActiveSetChange, promotion_id: int, policy: CanaryAnalysis,
            state: dict, status: CanaryStatus, evidence: dict) -> str:
    step = state["step"]
    locked = promotions.promotion_for_update(session, promotion_id)
    if not _sealed_as_judged(locked, state):
        return "changed meanwhile"
    promotion = locked
    if status.verdict == analysis.FAIL:
        _save(promotion, state, status, ROLLED_BACK)
        canary_actions.roll_back(session, promotion, change, evidence)
        return ROLLED_BACK
    if step + 1 < len(policy.steps):
        weight = policy.steps[step + 1].weight
        state.update(step=step + 1, gate_opened=False, **canary_actions.step_start(session))
        state.pop("confirmed_by", None)
        _save(promotion, state, status, ANALYSING)
        canary_actions.step(session, promotion, weight, change, evidence)
        return f"step {step + 1}: {weight}%"
    why_not = canary_actions.promote(session, promotion, change, evidence)
    if why_not is None:
        _save(promotion, state, status, PROMOTED)
        return PROMOTED
    _hold(session, promotion.id, why_not, evidence)
    return HELD


def _deciders(status: CanaryStatus, state: dict) -> list[str]:
    """Who the verdict rests on: enough routers that each reached it on their own traffic (and,
    for a pass, none that failed the canary on its own), or the reviewer who confirmed this very
    verdict of this step; [] when no single source may decide alone. A router's vote is its own
    verdict, never the sum, so one token's volume cannot tip the others' votes."""
    agreeing = [f"router {router}" for router, verdict in status.sources.items() if verdict == status.verdict]
    dissent = status.verdict == analysis.PASS and analysis.FAIL in status.sources.values()
    if len(agreeing) >= status.sources_needed and not dissent:
        return agreeing
    confirmed = state.get("confirmed_by")
    if confirmed and (confirmed.get("step"), confirmed.get("verdict")) == (state["step"], status.verdict):
        return [*agreeing, f"reviewer {confirmed['by']}"]
    return []


def _hold(session: Session, promotion_id: int, reason: str, evidence: dict) -> None:
    """The analysis passed but the version cannot be promoted: pause, and say why."""
    promotion = _locked(session, promotion_id)
    analysis_seals.put(promotion, {**_state_of(promotion), "state": PAUSED, "held_because": reason})
    activation.record(session, promotion, "canary.held", canary_actions.AUTOMATIC,
                      comment=reason, evidence=evidence)


def pause(session: Session, principal: Principal, promotion_id: int) -> CanaryStatus:
    promotion = _decidable(session, principal, promotion_id)
    state = dict(_state_of(promotion))
    if state["state"] in (PAUSED,):
        raise Conflict(f"canary {promotion_id} is already paused", code="already_paused",
                       hint=f"Resume it with POST /v1/promotions/{promotion_id}/canary/resume.")
    state["state"] = PAUSED
    analysis_seals.put(promotion, state)
    activation.record(session, promotion, "canary.paused", principal.label)
    return status_of(session, principal, promotion_id)


def resume(session: Session, principal: Principal, promotion_id: int) -> CanaryStatus:
    """Go on from a pause (the step's window starts over) or through a manual gate (the next step,
    or production after the last, follows at the next check)."""
    promotion = _decidable(session, principal, promotion_id)
    state = dict(_state_of(promotion))
    if state["state"] not in (PAUSED, AT_GATE, UNCORROBORATED):
        raise Conflict(f"canary {promotion_id} is {state['state']}, neither paused, at a gate nor "
                       "awaiting corroboration", code="not_paused",
                       hint="Only a paused canary, one at a manual gate, or one awaiting "
                            "corroboration resumes.")
    if state["state"] == AT_GATE:
        _require_second_person(session, principal, promotion)
        state["gate_opened"] = True
    elif state["state"] == UNCORROBORATED:  # the reviewer is the second source of this verdict
        _require_second_person(session, principal, promotion)
        state["confirmed_by"] = {"step": state["step"], "by": principal.label,
                                 "verdict": (state.get("last") or {}).get("verdict")}
    else:
        state.update(canary_actions.step_start(session))
        state.pop("confirmed_by", None)  # a fresh window: a verdict confirmed before does not carry
    state["state"] = ANALYSING
    state.pop("held_because", None)
    analysis_seals.put(promotion, state)
    activation.record(session, promotion, "canary.resumed", principal.label)
    return status_of(session, principal, promotion_id)


def _require_second_person(session: Session, principal: Principal, promotion: Promotion) -> None:
    """Opening a manual gate is an approval of the next step: four eyes, as for the promotion."""
    gate = gates.four_eyes(session, promotion, principal)
    if not gate.passed:
        raise Forbidden(f"the gate of canary {promotion.id} cannot be opened by {principal.subject}: "
                        f"{gate.message}", code="four_eyes", hint=gate.hint)


def statuses_of(session: Session, principal: Principal, promotion_ids: list[int]) -> dict[int, CanaryStatus]:
    """The status of each of these promotions that is a canary under analysis (a pool's page)."""
    principal.require(READERS)
    return {promotion_id: status_of(session, principal, promotion_id) for promotion_id in promotion_ids
            if (row := session.get(Promotion, promotion_id)) is not None and row.analysis is not None}


def status_of(session: Session, principal: Principal, promotion_id: int) -> CanaryStatus:
    principal.require(READERS)  # the role first: a node token learns nothing, not even a 404
    promotion = session.get(Promotion, promotion_id)
    if promotion is None or promotion.analysis is None or not _may_read(session, principal, promotion):
        raise NotFound(f"promotion {promotion_id} has no canary analysis", code="canary_not_found",
                       hint="Request a canary with an `analysis` policy (POST /v1/pools/{pool}/promotions).")
    state = promotion.analysis_state or {}
    sealed = promotion.analysis_state is None or analysis_seals.holds(promotion)
    last = state.get("last")
    if last is not None:
        return CanaryStatus.model_validate({**last, "state": state["state"], "step": state["step"],
                                            "step_started_at": state["step_started_at"],
                                            "analysis_sealed": sealed})
    return CanaryStatus(promotion_id=promotion.id, step=state.get("step", 0), weight=promotion.weight or 0,
                        state=state.get("state", "requested"),
                        step_started_at=state.get("step_started_at") or promotion.created_at,
                        analysis_sealed=sealed)


def _status(session: Session, promotion: Promotion, policy: CanaryAnalysis, state: dict,
            now: datetime) -> CanaryStatus:
    since = aware(datetime.fromisoformat(state["step_started_at"]))
    canary_name = _served(session, promotion.version_id)
    pool = existing(session, Pool, promotion.pool_id)
    production_id = signed_set.version_at(pool, promotion.adapter_id, PRODUCTION)
    production_name = _served(session, production_id) if production_id else ""
    counted_from = since + timedelta(seconds=get_settings().canary_grace_s)
    rows, unsealed = traffic.sealed_since(session, promotion.pool_id, [canary_name, production_name], counted_from)
    canary = analysis.side(canary_name, CANARY, rows)
    production = analysis.side(production_name, PRODUCTION, rows)
    elapsed_s = (now - counted_from).total_seconds()  # a step's window is what it observed
    checks, verdict = analysis.judge(policy, canary, production, elapsed_s)
    return CanaryStatus(promotion_id=promotion.id, step=state["step"], weight=promotion.weight or 0,
                        state=state["state"], step_started_at=since, checked_at=now, canary=canary,
                        production=production, checks=checks, verdict=verdict,
                        sources=analysis.by_router(policy, canary_name, production_name, rows, elapsed_s),
                        sources_needed=signed_set.load(pool).canary_min_routers,
                        unsealed_windows=unsealed)


def _save(promotion: Promotion, state: dict, status: CanaryStatus, label: str) -> None:
    state["state"] = label
    state["last"] = status.model_dump(mode="json")
    analysis_seals.put(promotion, state)


def _sealed_as_judged(promotion: Promotion | None, state: dict) -> TypeGuard[Promotion]:
    """Still under analysis, in the state that was judged, and sealed: read again under its lock."""
    return (promotion is not None and _analysis_state(promotion) == state
            and analysis_seals.holds(promotion))


def _analysis_state(promotion: Promotion | None) -> dict[str, Any] | None:
    """The analysis state of a canary under analysis; None for any other promotion."""
    if (promotion is not None and promotion.state == rules.ACTIVE and promotion.analysis is not None
            and promotion.analysis_state is not None
            and promotion.analysis_state.get("state") in (ANALYSING, WAITING, UNCORROBORATED)):
        return promotion.analysis_state
    return None


def _state_of(promotion: Promotion) -> dict[str, Any]:
    """The analysis state of a canary whose analysis began (the caller checked it has one)."""
    if promotion.analysis_state is None:
        raise Conflict(f"canary {promotion.id} is not under analysis", code="canary_not_active",
                       hint="Only an active canary is paused, resumed or held.")
    return promotion.analysis_state


def _locked(session: Session, promotion_id: int) -> Promotion:
    """The promotion under its lock: one this transaction has read before, so it exists."""
    promotion = promotions.promotion_for_update(session, promotion_id)
    if promotion is None:
        raise NotFound(f"promotion {promotion_id} does not exist", code="promotion_not_found")
    return promotion


def _decidable(session: Session, principal: Principal, promotion_id: int) -> Promotion:
    principal.require(DECIDERS)
    status_of(session, principal, promotion_id)  # 404 unless the caller may see it
    promotion = _locked(session, promotion_id)
    principal.require(DECIDERS, _tenant_of(session, promotion))
    if promotion.state != rules.ACTIVE or promotion.analysis_state is None:
        raise Conflict(f"canary {promotion_id} is {promotion.state}, not under analysis",
                       code="canary_not_active", hint="Only an active canary is paused or resumed.")
    if not analysis_seals.holds(promotion):  # a pause or resume would seal what was written
        raise Conflict(f"canary {promotion_id}'s analysis policy or state was changed outside the "
                       "registry: its seal does not hold", code="canary_unsealed",
                       hint="Roll the canary back (POST /v1/pools/{pool}/aliases/{tenant}/{name}/canary/"
                            "rollback) and check who wrote the promotions table.")
    return promotion


def _may_read(session: Session, principal: Principal, promotion: Promotion) -> bool:
    return principal.is_global_admin or (principal.role in READERS
                                         and _tenant_of(session, promotion) == principal.tenant)


def _tenant_of(session: Session, promotion: Promotion) -> str:
    return existing(session, Tenant, existing(session, Adapter, promotion.adapter_id).tenant_id).name


def _served(session: Session, version_id: int) -> str:
    return adapters.version_out(session, existing(session, AdapterVersion, version_id)).served_name
