"""Request, approve, reject and roll back promotions. Approval and rollback change the pool's
active set in the same transaction as the promotion's state, and bump its generation."""

from __future__ import annotations

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from registry.active_set import repository as active_set_rows
from registry.active_set import signed_set

from registry.active_set.writing import changes
from registry.active_set.writing.change import ActiveSetChange
from registry.pool_lookup import CANARY, PRODUCTION, pool_by_name
from registry.adapters import repository as adapter_rows
from registry.adapters import rules as lifecycle
from registry.adapters import service as adapters
from registry.attestations import evaluated
from registry.auth.principal import Principal, Role
from registry.errors import Conflict, Forbidden, NotFound, Unprocessable
from registry.evaluation_policies import service as policies
from registry.promotions import activation, canary_actions, gates, repository, rules
from registry.promotions.schemas import AliasOut, ApprovalCheck, GateOut, PromotionCreate, PromotionOut
from registry.tables import Adapter, AdapterVersion, Pool, Promotion, Tenant
from registry.rows import existing

REQUESTERS = {Role.ADMIN, Role.UPLOADER, Role.REVIEWER}
DECIDERS = {Role.ADMIN, Role.REVIEWER}
READERS = REQUESTERS


def request(session: Session, principal: Principal, pool_name: str, spec: PromotionCreate) -> PromotionOut:
    tenant, name = spec.adapter.split("/")
    principal.require(REQUESTERS, tenant)
    pool = pool_by_name(session, pool_name)
    version = _promotable(session, adapters.find_version(session, tenant, name, spec.version))
    target = _target(session, pool, version, spec.alias, spec.weight)
    results = gates.check(session, target)
    _refuse_if_blocked(gates.blocking(results), f"{target.served_name} cannot be promoted to "
                       f"{pool.name}:{spec.alias}")
    promotion = Promotion(
        pool_id=pool.id, adapter_id=target.adapter.id, version_id=target.version.id,
        alias=spec.alias, weight=spec.weight, kind=rules.PROMOTE, state=rules.REQUESTED,
        gates=[g.as_dict() for g in results], requested_by=principal.label,
        requested_by_subject=principal.subject, requested_by_identity_id=principal.identity_id or None,
        comment=spec.comment, analysis=spec.analysis.model_dump(mode="json") if spec.analysis else None)
    session.add(promotion)
    session.flush()
    rules.transition(promotion, rules.AWAITING)
    busy = _alias_busy(pool.name, spec.alias)  # built now: a failed flush expires every row
    try:
        session.flush()
    except IntegrityError:
        raise busy from None
    activation.record(session, promotion, "promotion.requested", principal.label)
    return to_out(session, promotion, principal)


def approve(session: Session, principal: Principal, promotion_id: int, comment: str,
            seen_digest: str | None = None) -> PromotionOut:
    """`seen_digest`: the version digest the reviewer was shown; the approval is refused if the
    version no longer has it. Activation checks the bytes against the sealed evidence too."""
    promotion = _visible(session, principal, promotion_id)
    principal.require(DECIDERS, _tenant_of(session, promotion))
    change = ActiveSetChange.begin(session, promotion.pool_id)  # pool lock first, always
    promotion = _locked(session, promotion_id)
    rules.transition(promotion, rules.APPROVED)  # refuses anything but awaiting_approval
    four_eyes = gates.four_eyes(session, promotion, principal)
    _refuse_if_blocked(gates.blocking([four_eyes]),
                       f"promotion {promotion.id} cannot be approved by {principal.subject}", status=403)
    pool = existing(session, Pool, promotion.pool_id)
    version = _promotable(session, existing(session, AdapterVersion, promotion.version_id))
    evaluated.check_seen(version, adapters.version_out(session, version).served_name, seen_digest)
    target = _target(session, pool, version, promotion.alias, promotion.weight)
    results = gates.check(session, target)
    _refuse_if_blocked(gates.blocking(results), f"promotion {promotion.id} no longer passes its gates")
    promotion.gates = [g.as_dict() for g in [*results, four_eyes]]
    promotion.decided_by, promotion.decision_comment = principal.label, comment
    promotion.decided_by_identity_id = principal.identity_id or None
    promotion.decided_at = activation.now()
    activation.record(session, promotion, "promotion.approved", principal.label, comment=comment)
    activation.activate(session, promotion, change, principal.label)
    if promotion.analysis is not None:
        canary_actions.start(session, promotion)
    change.finish()
    return to_out(session, promotion, principal)


def may_decide(principal: Principal, tenant: str) -> bool:
    """Whether `principal` may approve or reject a promotion of `tenant`'s (approving also needs
    four-eyes: `to_out`'s `can_approve` says whether it passes)."""
    try:
        principal.require(DECIDERS, tenant)
    except Forbidden:
        return False
    return True


def reject(session: Session, principal: Principal, promotion_id: int, comment: str) -> PromotionOut:
    promotion = _visible(session, principal, promotion_id)
    principal.require(DECIDERS, _tenant_of(session, promotion))
    promotion = _locked(session, promotion_id)
    rules.transition(promotion, rules.REJECTED)
    promotion.decided_by, promotion.decision_comment = principal.label, comment
    promotion.decided_by_identity_id = principal.identity_id or None
    promotion.decided_at = promotion.ended_at = activation.now()
    activation.record(session, promotion, "promotion.rejected", principal.label, comment=comment)
    return to_out(session, promotion, principal)


def rollback(session: Session, principal: Principal, pool_name: str, tenant: str, name: str,
             alias: str, comment: str) -> PromotionOut:
    """Point the alias back at the version before the current one, at once: that version was
    approved before. The current version stays loaded until traffic has moved."""
    principal.require(DECIDERS, tenant)
    pool = pool_by_name(session, pool_name)
    adapter = adapters.find_adapter(session, tenant, name)
    change = ActiveSetChange.begin(session, pool.id)
    after = _roll_back(session, principal, pool, adapter, tenant, alias, comment, change)
    change.finish()
    return to_out(session, after, principal)


def _roll_back(session: Session, principal: Principal, pool: Pool, adapter: Adapter, tenant: str,
               alias: str, comment: str, change: ActiveSetChange) -> Promotion:
    """The promotion the alias points at afterwards; for a first canary, the one rolled back."""
    name = adapter.name
    current = repository.active_promotion_for_update(session, pool.id, adapter.id, alias)
    if current is None:
        raise NotFound(f"{tenant}/{name} has no active {alias!r} alias in pool {pool.name!r}",
                       code="alias_not_found", hint=f"List aliases with GET /v1/pools/{pool.name}/aliases.")
    previous = session.get(Promotion, current.previous_id) if current.previous_id else None
    served_here = previous is not None and previous.activated_at is not None and \
        (previous.pool_id, previous.adapter_id, previous.alias) == (pool.id, adapter.id, alias)
    if previous is not None and not served_here:
        # Only what this alias served before: a row pointing anywhere else is never restored.
        raise Conflict(f"the promotion before {alias!r} of {tenant}/{name} in pool {pool.name!r} is "
                       f"not one this alias served", code="nothing_to_roll_back",
                       hint="Promote the version you want instead, and check the database's audit trail.")
    if previous is None and alias != CANARY:
        raise Conflict(f"{alias!r} of {tenant}/{name} in pool {pool.name!r} has no earlier version to "
                       "restore", code="nothing_to_roll_back",
                       hint="Promote the version you want instead.")
    if previous is not None:
        _promotable(session, existing(session, AdapterVersion, previous.version_id))
    rules.transition(current, rules.ROLLED_BACK)
    current.ended_at = activation.now()
    activation.record(session, current, "promotion.rolled_back", principal.label, comment=comment)
    if previous is None:  # a first canary: rolling it back means no canary
        changes.drop_alias(session, change, adapter_id=adapter.id, alias=alias)
        return current
    restored = Promotion(
        pool_id=pool.id, adapter_id=adapter.id, version_id=previous.version_id, alias=alias,
        weight=previous.weight, kind=rules.ROLLBACK, state=rules.REQUESTED, gates=[],
        previous_id=previous.previous_id, requested_by=principal.label,
        requested_by_subject=principal.subject, requested_by_identity_id=principal.identity_id or None,
        comment=comment, decided_by=principal.label, decided_by_identity_id=principal.identity_id or None,
        decision_comment=comment, decided_at=activation.now())
    session.add(restored)
    session.flush()
    activation.point(session, restored, change, restoring=True)
    return restored


def get(session: Session, principal: Principal, promotion_id: int) -> PromotionOut:
    return to_out(session, _visible(session, principal, promotion_id), principal)


def list_page(session: Session, principal: Principal, *, pool: str | None, state: str | None,
              tenant: str | None, limit: int, cursor: str | None):
    principal.require(READERS, tenant)
    pool_id = pool_by_name(session, pool).id if pool is not None else None
    rows, next_cursor = repository.promotion_page(session, tenant=tenant or principal.tenant,
                                                  pool_id=pool_id, state=state, limit=limit,
                                                  cursor=cursor)
    return [to_out(session, row, principal) for row in rows], next_cursor


def list_aliases(session: Session, principal: Principal, pool_name: str) -> list[AliasOut]:
    principal.require(READERS)
    pool = pool_by_name(session, pool_name)
    aliases = sorted(signed_set.load(pool).aliases.values(), key=lambda a: (a.promotion_id or 0, a.alias))
    owned = active_set_rows.versions_with_owners(session, [a.version_id for a in aliases])  # one query
    out = []
    for row in aliases:
        if row.version_id not in owned:
            existing(session, AdapterVersion, row.version_id)  # NotFound, naming the row
        version, adapter, tenant = owned[row.version_id]
        if principal.tenant is not None and tenant != principal.tenant:
            continue
        out.append(AliasOut(pool=pool.name, tenant=tenant, adapter=adapter, alias=row.alias,
                            served_name=f"{tenant}/{adapter}@{version.number}", version=version.number,
                            weight=row.weight, promotion_id=row.promotion_id))
    return out


def to_out(session: Session, row: Promotion, viewer: Principal | None = None) -> PromotionOut:
    version = adapters.version_out(session, existing(session, AdapterVersion, row.version_id))
    out = PromotionOut(
        id=row.id, pool=existing(session, Pool, row.pool_id).name, served_name=version.served_name,
        tenant=version.tenant, adapter=version.adapter, version=version.number,
        digest=version.digest, alias=row.alias, weight=row.weight, kind=row.kind, state=row.state,
        gates=[GateOut(**g) for g in row.gates], previous_id=row.previous_id,
        requested_by=row.requested_by, comment=row.comment, decided_by=row.decided_by,
        decision_comment=row.decision_comment, created_at=row.created_at,
        decided_at=row.decided_at, activated_at=row.activated_at, ended_at=row.ended_at,
        analysis=row.analysis, canary_state=(row.analysis_state or {}).get("state"))
    if row.state == rules.AWAITING:
        out.policy_changes = _policy_changes(session, row)
        if viewer is not None:
            out.can_approve = _approval_check(session, row, viewer, version.tenant)
    return out


def _policy_changes(session: Session, row: Promotion) -> list[str] | None:
    """How the adapter's evaluation policy changed since the production version it would
    replace (or beside which a canary runs) went active; None when nothing serves yet."""
    incumbent = repository.active_promotion(session, row.pool_id, row.adapter_id, PRODUCTION)
    if incumbent is None:
        return None
    if incumbent.evaluation_policy is None:
        return ["unknown: the incumbent went active before promotions kept their policy"]
    return policies.changes_since(incumbent.evaluation_policy, existing(session, Adapter, row.adapter_id))


def _approval_check(session: Session, row: Promotion, viewer: Principal, tenant: str) -> ApprovalCheck:
    if not viewer.is_global_admin and (viewer.role not in DECIDERS or viewer.tenant != tenant):
        return ApprovalCheck(allowed=False, reason=f"role '{viewer.role}' may not approve; a reviewer must")
    gate = gates.four_eyes(session, row, viewer)
    return ApprovalCheck(allowed=gate.passed, reason="" if gate.passed else gate.message)


def _target(session: Session, pool: Pool, version: AdapterVersion, alias: str,
            weight: int | None) -> gates.Target:
    served = adapters.version_out(session, version).served_name
    return gates.Target(pool=pool, adapter=existing(session, Adapter, version.adapter_id), version=version,
                        served_name=served, alias=alias, weight=weight)


def _promotable(session: Session, version: AdapterVersion) -> AdapterVersion:
    """The version under a shared lock, once it is neither retired nor deleted: retiring takes
    the lock exclusively and refuses while a promotion names the version (registry/lifecycle)."""
    (locked,) = adapter_rows.lock_versions(session, [version.id], shared=True)
    lifecycle.require_live(locked, adapters.version_out(session, locked).served_name, "promoted")
    return locked


def _refuse_if_blocked(blocked: list[gates.Gate], headline: str, *, status: int = 422) -> None:
    if not blocked:
        return
    message = headline + ": " + "; ".join(f"[{g.name}] {g.message}" for g in blocked)
    hint = " ".join(g.hint for g in blocked if g.hint)
    details = [g.as_dict() for g in blocked]
    if status == 403:
        raise Forbidden(message, code="four_eyes", hint=hint, details=details)
    raise Unprocessable(message, code="gate_blocked", hint=hint, details=details)


def _alias_busy(pool: str, alias: str) -> Conflict:
    return Conflict(f"another promotion of {alias!r} for this adapter in pool {pool!r} is "
                    "already awaiting approval", code="alias_busy",
                    hint="Approve or reject that one first (GET /v1/promotions?state=awaiting_approval).")


def _visible(session: Session, principal: Principal, promotion_id: int) -> Promotion:
    row = session.get(Promotion, promotion_id)
    if row is None or not (principal.is_global_admin or (
            principal.role in READERS and _tenant_of(session, row) == principal.tenant)):
        raise NotFound(f"promotion {promotion_id} does not exist", code="promotion_not_found",
                       hint="List promotions with GET /v1/promotions.")
    return row


def _locked(session: Session, promotion_id: int) -> Promotion:
    """The promotion under its lock: one this transaction has read before, so it exists."""
    promotion = repository.promotion_for_update(session, promotion_id)
    if promotion is None:
        raise NotFound(f"promotion {promotion_id} does not exist", code="promotion_not_found")
    return promotion


def _tenant_of(session: Session, promotion: Promotion) -> str:
    adapter = existing(session, Adapter, promotion.adapter_id)
    return existing(session, Tenant, adapter.tenant_id).name
