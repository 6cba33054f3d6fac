"""Retire and delete adapters and versions that nothing still needs.

Retiring keeps everything: the version is never promoted, rolled back to or evaluated again.
Deleting also releases its blobs (the manifest, the upload it was derived from, the model card
and the signature record are cleared); the row, its digest and the audit trail stay, and the
housekeeper collects the blobs nothing else names after the grace period (registry/blob_gc).

Both are refused (409) while anything holds the version: a pool's active set (its aliases, a
retirement still draining, or its signed set), a promotion not yet decided or activated; and,
for deleting only, an unfinished evaluation or an attestation that still verifies (it names the
files deleting would release). Retire, the refusal's hint says, where deleting is refused.

Locks: the adapter's row, then its versions' rows in id order, exclusively. Promoting and
evaluating take the versions' rows shared (adapters/repository.py), so a promotion requested
at the same moment either sees the version retired, or is seen here and refused."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.orm import Session

from registry import audit
from registry.adapters import repository as adapters_repository
from registry.adapters import rules
from registry.adapters import service as adapters
from registry.adapters.schemas import AdapterOut, VersionOut
from registry.attestation_keys import bundle
from registry.attestations.reading import proof_problem
from registry.auth.principal import Principal
from registry.blob_gc.service import signed_version_ids
from registry.errors import Conflict
from registry.evaluations import rules as evaluation_rules
from registry.lifecycle import repository
from registry.promotions import rules as promotion_rules
from registry.rows import existing
from registry.tables import Adapter, AdapterVersion, Pool, Tenant
from signed_digests import provenance

# A promotion that may still point an alias at its version.
UNDECIDED = frozenset({promotion_rules.REQUESTED, promotion_rules.AWAITING, promotion_rules.APPROVED})
RETIRE, DELETE = "retire", "delete"


def retire_version(session: Session, principal: Principal, tenant: str, name: str,
                   number: int) -> VersionOut:
    return _change_version(session, principal, tenant, name, number, RETIRE)


def delete_version(session: Session, principal: Principal, tenant: str, name: str,
                   number: int) -> VersionOut:
    return _change_version(session, principal, tenant, name, number, DELETE)


def retire_adapter(session: Session, principal: Principal, tenant: str, name: str) -> AdapterOut:
    return _change_adapter(session, principal, tenant, name, RETIRE)


def delete_adapter(session: Session, principal: Principal, tenant: str, name: str) -> AdapterOut:
    return _change_adapter(session, principal, tenant, name, DELETE)


def _change_version(session: Session, principal: Principal, tenant: str, name: str, number: int,
                    action: str) -> VersionOut:
    principal.require(adapters.UPLOADERS, tenant)  # before anything says what exists
    adapter = adapters_repository.lock_adapter(session, adapters.find_adapter(session, tenant, name).id)
    (version,) = adapters_repository.lock_versions(
        session, [adapters.find_version(session, tenant, name, number).id])
    if _unchanged(version, action):
        return adapters.version_out(session, version)
    _refuse_if_held(session, [version], action)
    _apply(session, principal, adapter, version, action, datetime.now(UTC))
    return adapters.version_out(session, version)


def _change_adapter(session: Session, principal: Principal, tenant: str, name: str,
                    action: str) -> AdapterOut:
    principal.require(adapters.UPLOADERS, tenant)
    adapter = adapters_repository.lock_adapter(session, adapters.find_adapter(session, tenant, name).id)
    versions = adapters_repository.lock_versions(
        session, adapters_repository.version_ids_of(session, adapter.id))
    changing = [v for v in versions if not _unchanged(v, action)]
    _refuse_if_held(session, changing, action)
    at = datetime.now(UTC)
    before = adapter.state
    for version in changing:
        _apply(session, principal, adapter, version, action, at)
    changed = rules.retire_adapter(adapter, at) if action == RETIRE else rules.delete_adapter(adapter, at)
    if changed:
        session.flush()
        audit.record(session, actor=principal.label, action=f"adapter.{_past(action)}",
                     subject=f"{tenant}/{name}", tenant_id=adapter.tenant_id,
                     before={"state": before},
                     after={"state": adapter.state, "versions": [v.number for v in changing]})
    return adapters.adapter_out(session, adapter)


def _unchanged(version: AdapterVersion, action: str) -> bool:
    return version.state in rules.ENDED if action == RETIRE else version.state == rules.DELETED


def _apply(session: Session, principal: Principal, adapter: Adapter, version: AdapterVersion,
           action: str, at: datetime) -> None:
    before: dict[str, Any] = {"state": version.state}
    if action == RETIRE:
        rules.retire(version, at)
    else:
        before.update(files=version.files, derived_from=version.derived_from,
                      upload_signature=version.upload_signature,
                      model_card=version.model_card is not None)
        rules.delete(version, at)
        _release_blobs(version)
    session.flush()
    audit.record(session, actor=principal.label, action=f"adapter_version.{_past(action)}",
                 subject=_served_name(session, version), tenant_id=adapter.tenant_id,
                 before=before, after={"state": version.state})


def _release_blobs(version: AdapterVersion) -> None:
    """Forget every blob the row names; the digest stays, so the name is never reused."""
    version.files = []
    if version.derived_from is not None:
        version.derived_from = {**version.derived_from, "files": []}
    version.upload_signature = None
    version.model_card = None


@dataclass(frozen=True)
class Hold:
    code: str
    what: str
    hint: str


def _refuse_if_held(session: Session, versions: list[AdapterVersion], action: str) -> None:
    found = holds(session, versions, deleting=action == DELETE) if versions else []
    if found:  # the most binding kind: what to do first
        raise Conflict(f"cannot {action} {found[0].what}", code=found[0].code, hint=found[0].hint)


def holds(session: Session, versions: list[AdapterVersion], *, deleting: bool) -> list[Hold]:
    """What keeps these versions from being retired (or, `deleting`, deleted), one Hold per kind,
    most binding first; [] when nothing does."""
    ids = [v.id for v in versions]
    names = {v.id: _served_name(session, v) for v in versions}
    found = []
    serving = _in_active_sets(session, ids)
    if serving:
        listed = "; ".join(f"{names[v]} is in the active set of pool {pool!r} ({how})"
                           for v, pool, how in serving)
        found.append(Hold("held_by_active_set", listed,
                          "Promote another version to its alias (or roll the alias back), then "
                          "wait until every live node has applied that change and the pool has "
                          "retired this version (LORAPLANE_RETIRE_GRACE_S); then try again."))
    pending = repository.promotions_naming(session, ids, UNDECIDED)
    if pending:
        listed = "; ".join(f"promotion {p.id} ({existing(session, Pool, p.pool_id).name}:{p.alias}, "
                           f"{p.state}) names {names[p.version_id]}" for p in pending)
        found.append(Hold("pending_promotion", listed,
                          "Reject it first if it awaits approval (loraplane promotion reject "
                          f"{pending[0].id} --comment '...'); one approved or being rolled out "
                          "must reach the pool first, then its version is held by the active set."))
    fallbacks = repository.rollback_targets_naming(session, ids)
    if fallbacks:
        listed = "; ".join(f"{names[v]} is what alias {alias!r} of pool {pool!r} rolls back to"
                           for v, pool, alias in fallbacks)
        found.append(Hold("rollback_target", listed,
                          "Promote another version to that alias first: once a newer version "
                          "replaces the current one, this one is no longer its way back."))
    if not deleting:
        return found
    unfinished = repository.unfinished_evaluation_ids(session, ids, evaluation_rules.FINISHED)
    if unfinished:
        listed = "; ".join(f"evaluation {e} of {names[v]} has not finished" for v, e in unfinished)
        found.append(Hold("evaluations_unfinished", listed,
                          "Wait until they finish, or retire the version instead: retiring keeps "
                          "its blobs."))
    attested = _verifying_attestations(session, versions, names)
    if attested:
        listed = "; ".join(f"attestation {a} ({pool}) proves {names[v]} and still verifies"
                           for v, a, pool in attested)
        found.append(Hold("attested", listed + ": it names the files deleting would release, "
                                               "and its verification would break",
                          "Retire the version instead: a retired version keeps its blobs, so "
                          "its attestations stay verifiable."))
    return found


def _in_active_sets(session: Session, ids: list[int]) -> list[tuple[int, str, str]]:
    """(version id, pool, how) wherever a pool holds one of the versions: an alias row, a
    retirement still draining, or the pool's signed set (read here without its signature: a
    set that names the version holds it, whoever wrote it)."""
    held = [(v, pool, f"alias {alias!r}") for v, pool, alias in repository.aliases_naming(session, ids)]
    held += [(v, pool, "retiring until traffic has moved")
             for v, pool in repository.retirements_naming(session, ids)]
    known = {(v, pool) for v, pool, _ in held}
    for pool, envelope in repository.signed_sets(session):
        for v in sorted(signed_version_ids(envelope) & set(ids)):
            if (v, pool) not in known:
                held.append((v, pool, "its signed active set"))
    return held


def _verifying_attestations(session: Session, versions: list[AdapterVersion],
                            names: dict[int, str]) -> list[tuple[int, int, str]]:
    """(version id, attestation id, pool) of each attestation that proves its version in its pool
    under the trust bundle the registry publishes now."""
    rows = repository.attestations_of(session, [v.id for v in versions])
    if not rows:
        return []
    trusted = provenance.TrustBundle.parse(bundle.trust_bundle())
    by_id = {v.id: v for v in versions}
    found = []
    for row in rows:
        pool = existing(session, Pool, row.pool_id).name
        if proof_problem(trusted, row.envelope, names[row.version_id], by_id[row.version_id], pool) is None:
            found.append((row.version_id, row.id, f"pool {pool!r}, {row.action}"))
    return found


def _served_name(session: Session, version: AdapterVersion) -> str:
    adapter = existing(session, Adapter, version.adapter_id)
    return f"{existing(session, Tenant, adapter.tenant_id).name}/{adapter.name}@{version.number}"


def _past(action: str) -> str:
    return "retired" if action == RETIRE else "deleted"
