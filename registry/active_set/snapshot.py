"""Read a pool's active set: the generation and its entries, consistent with each other."""

from __future__ import annotations

from collections import defaultdict

from sqlalchemy import select
from sqlalchemy.orm import Session

from registry.active_set.schemas import ActiveEntry, ActiveSet, AliasWeight, ArtifactFile
from registry.adapters import artifact
from registry.attestations import repository as attestations
from registry.requalification import service as requalification
from registry.errors import NotFound
from registry.settings import RegistrySettings
from registry.storage.base import ArtifactStore
from registry.tables import (
    Adapter, AdapterVersion, BaseModel, Pool, PoolAlias, PoolRetirement, Tenant,
)

PRODUCTION, CANARY = "production", "canary"


def pool_by_name(session: Session, name: str, *, lock: bool = False) -> Pool:
    query = select(Pool).where(Pool.name == name)
    if lock:
        # A change holds this row's lock from its generation bump to its commit, so entries
        # read after this see exactly that generation's set.
        query = query.with_for_update(read=True)
    row = session.scalar(query)
    if row is None:
        raise NotFound(f"pool {name!r} does not exist", code="pool_not_found",
                       hint="List them with GET /v1/pools.")
    return row


def read(session: Session, pool_name: str, store: ArtifactStore,
         settings: RegistrySettings, node: str | None = None) -> ActiveSet:
    """The pool's whole set, or with `node` only what the placement gives that node."""
    from registry.placement import service as placement  # it reads the set's names from here

    pool = pool_by_name(session, pool_name, lock=True)
    aliases = session.scalars(select(PoolAlias).where(PoolAlias.pool_id == pool.id)).all()
    retiring = set(session.scalars(select(PoolRetirement.version_id)
                                   .where(PoolRetirement.pool_id == pool.id)))
    canary_weight = {a.adapter_id: a.weight or 0 for a in aliases if a.alias == CANARY}
    by_version: dict[int, list[AliasWeight]] = defaultdict(list)
    for alias in aliases:
        by_version[alias.version_id].append(AliasWeight(
            alias=alias.alias, weight=_weight(alias, canary_weight.get(alias.adapter_id, 0))))
    # Versions waiting to qualify on a new engine, under the pool's `suspend` policy.
    version_ids = sorted((set(by_version) | retiring) - requalification.suspended_version_ids(session, pool.id))
    proofs = attestations.current(session, pool.id, version_ids)
    entries = [_entry(session, session.get(AdapterVersion, vid), by_version.get(vid, []),
                      store, settings, proofs.get(vid)) for vid in version_ids]
    spread = placement.stored(pool)
    part_of = None
    if spread is not None and spread.mode == "spread":
        for entry in entries:
            entry.nodes = spread.nodes_of(entry.served_name)
        if node is not None:
            part_of = node
            # A node the placement does not count (new, or back after an absence) keeps what it
            # last reported holding, so that an outage never empties a fleet; a new one holds
            # nothing. Its next report gets it placed.
            mine = spread.served_by(node) if node in spread.targets else placement.last_loaded(session, pool, node)
            entries = [entry for entry in entries if entry.served_name in mine]
    return ActiveSet(
        pool=pool.name, base_model=session.get(BaseModel, pool.base_model_id).name,
        generation=pool.generation, node=part_of,
        limits={"max_loras": pool.max_loras, "max_cpu_loras": pool.max_cpu_loras,
                "max_lora_rank": pool.max_lora_rank},
        entries=entries, urls_expire_in=settings.presign_ttl_s)


def _weight(alias: PoolAlias, canary: int) -> int:
    if alias.alias == PRODUCTION:
        return 100 - canary
    return alias.weight or 0


def _entry(session: Session, version: AdapterVersion, aliases: list[AliasWeight],
           store: ArtifactStore, settings: RegistrySettings, attestation: dict | None) -> ActiveEntry:
    adapter = session.get(Adapter, version.adapter_id)
    tenant = session.get(Tenant, adapter.tenant_id).name
    return ActiveEntry(
        served_name=f"{tenant}/{adapter.name}@{version.number}", tenant=tenant,
        adapter=adapter.name, version=version.number, digest=version.digest, rank=version.rank,
        size_bytes=version.size_bytes, aliases=sorted(aliases, key=lambda a: a.alias),
        retiring=not aliases, attestation=attestation,
        files=[ArtifactFile(**f, url=store.presigned_url(artifact.blob_key(f["sha256"]),
                                                         settings.presign_ttl_s))
               for f in version.files])


def retiring_names(session: Session, pool_id: int) -> set[str]:
    """Served names that lost their last alias and stay only until traffic has moved."""
    version_ids = session.scalars(select(PoolRetirement.version_id).where(PoolRetirement.pool_id == pool_id))
    rows = session.execute(
        select(Tenant.name, Adapter.name, AdapterVersion.number)
        .join(Adapter, Adapter.id == AdapterVersion.adapter_id).join(Tenant, Tenant.id == Adapter.tenant_id)
        .where(AdapterVersion.id.in_(list(version_ids)))).all()
    return {f"{tenant}/{name}@{number}" for tenant, name, number in rows}


def desired_digests(session: Session, pool_id: int) -> dict[str, str]:
    """served name -> digest of everything the pool's nodes should hold (no URLs)."""
    version_ids = set(session.scalars(select(PoolAlias.version_id).where(PoolAlias.pool_id == pool_id)))
    version_ids |= set(session.scalars(select(PoolRetirement.version_id)
                                       .where(PoolRetirement.pool_id == pool_id)))
    version_ids -= requalification.suspended_version_ids(session, pool_id)
    rows = session.execute(
        select(Tenant.name, Adapter.name, AdapterVersion.number, AdapterVersion.digest)
        .join(Adapter, Adapter.id == AdapterVersion.adapter_id).join(Tenant, Tenant.id == Adapter.tenant_id)
        .where(AdapterVersion.id.in_(version_ids))).all()
    return {f"{tenant}/{name}@{number}": digest for tenant, name, number, digest in rows}
