"""Serving pools: one base model, with the vLLM LoRA limits every node in the pool runs with."""

from __future__ import annotations

from sqlalchemy.orm import Session

from registry import audit
from registry.active_set import signed_set
from registry.active_set.writing.change import ActiveSetChange, new_generation
from registry.base_models import service as base_models
from registry.errors import Conflict
from registry.eval_suites import service as eval_suites
from registry.names import check_name
from registry.pool_lookup import pool_by_name
from registry.pools import overflow, repository
from registry.pools.schemas import PoolCreate, PoolOut, PoolUpdate
from registry.requalification import added_suites
from registry.requalification import service as requalification
from registry.base_models.stored_tables import config_digest
from registry.tables import BaseModel, Pool
from registry.rows import existing


def create(session: Session, spec: PoolCreate, *, actor: str) -> PoolOut:
    check_name(spec.name, "pool")
    base = base_models.get(session, spec.base_model)
    eval_suites.require_for_base(session, spec.required_suites, base.id, base.name)
    if repository.pool_exists(session, spec.name):
        raise Conflict(f"pool {spec.name!r} already exists", code="already_exists",
                       hint="Pick another name.")
    row = Pool(
        name=spec.name,
        base_model_id=base.id,
        max_loras=spec.max_loras,
        max_cpu_loras=spec.max_cpu_loras,
        max_lora_rank=spec.max_lora_rank,
        dtype=spec.dtype,
        required_suites=list(spec.required_suites),
        requalify_policy=spec.requalify_policy,
        canary_min_routers=spec.canary_min_routers,
        overflow=spec.overflow,
        cold_tier_bytes=spec.cold_tier_bytes,
        # Versions promoted here are evaluated on the base as it is now; the qualified engine
        # is the first one a node reports.
        qualified_engines=[],
        qualified_config_sha256=config_digest(base.config),
    )
    session.add(row)
    session.flush()
    signed_set.sign(row, signed_set.SignedSet(pool=row.name, pool_id=row.id, generation=row.generation,
                                              canary_min_routers=row.canary_min_routers))
    return audit.record_created(session, to_out(row, base), actor=actor, action="pool.create",
                                subject=f"pool/{row.name}")


def update(session: Session, name: str, spec: PoolUpdate, *, actor: str) -> PoolOut:
    """Change the re-qualification policy, the required suites, the routers a canary needs, the
    overflow or the cold tier. Under the pool's lock,
    as every change to what it serves: switching to or from `suspend` adds or drops marked
    versions from the active set, and a suite added is queued for the versions serving."""
    row = pool_by_name(session, name, lock="update")
    base = existing(session, BaseModel, row.base_model_id)
    if spec.required_suites is not None:
        eval_suites.require_for_base(session, spec.required_suites, base.id, base.name)
    if spec.requalify_policy is not None and spec.requalify_policy != row.requalify_policy:
        _change_policy(session, row, spec.requalify_policy, actor=actor)
    if spec.required_suites is not None and spec.required_suites != row.required_suites:
        _change_required_suites(session, row, spec.required_suites, actor=actor)
    if spec.canary_min_routers is not None and spec.canary_min_routers != row.canary_min_routers:
        audit.record(session, actor=actor, action="pool.update", subject=f"pool/{row.name}",
                     before={"canary_min_routers": row.canary_min_routers},
                     after={"canary_min_routers": spec.canary_min_routers})
        row.canary_min_routers = spec.canary_min_routers
        session.flush()
        change = ActiveSetChange.begin(session, row.id)  # canaries read it from the signed set
        change.signed.canary_min_routers = spec.canary_min_routers
        change.finish()
    if spec.overflow is not None or spec.cold_tier_bytes is not None:
        overflow.change(session, row, spec, actor=actor)
    return to_out(row, base)


def _change_policy(session: Session, row: Pool, policy: str, *, actor: str) -> None:
    before = row.requalify_policy
    suspended = requalification.suspended_version_ids(session, row.id)
    row.requalify_policy = policy
    session.flush()
    if requalification.suspended_version_ids(session, row.id) != suspended:
        new_generation(session, row.id)
    audit.record(session, actor=actor, action="pool.update", subject=f"pool/{row.name}",
                 before={"requalify_policy": before}, after={"requalify_policy": policy})


def _change_required_suites(session: Session, row: Pool, names: list[str], *, actor: str) -> None:
    before = list(row.required_suites)
    added = [name for name in names if name not in before]
    row.required_suites = list(names)
    session.flush()
    queued = added_suites.request_for_served_versions(session, row, added, actor=actor)
    audit.record(session, actor=actor, action="pool.update", subject=f"pool/{row.name}",
                 before={"required_suites": before},
                 after={"required_suites": row.required_suites, "evaluations": queued})
    requalification.after_suites_changed(session, row)


def get(session: Session, name: str) -> PoolOut:
    row = pool_by_name(session, name)
    return to_out(row, existing(session, BaseModel, row.base_model_id))


def list_page(session: Session, *, limit: int, cursor: str | None) -> tuple[list[PoolOut], str | None]:
    rows, next_cursor = repository.page_of_pools(session, limit=limit, cursor=cursor)
    return [to_out(row, existing(session, BaseModel, row.base_model_id)) for row in rows], next_cursor


def to_out(row: Pool, base: BaseModel) -> PoolOut:
    return PoolOut(
        name=row.name,
        base_model=base.name,
        max_loras=row.max_loras,
        max_cpu_loras=row.max_cpu_loras,
        max_lora_rank=row.max_lora_rank,
        dtype=row.dtype,
        required_suites=row.required_suites,
        requalify_policy=row.requalify_policy,
        canary_min_routers=row.canary_min_routers,
        overflow=row.overflow,
        cold_tier_bytes=row.cold_tier_bytes,
        created_at=row.created_at,
    )
