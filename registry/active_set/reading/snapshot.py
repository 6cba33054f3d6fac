"""Read a pool's active set: the generation and its entries, consistent with each other."""

from __future__ import annotations

import logging
from collections import defaultdict

from sqlalchemy.orm import Session

from registry.active_set import repository, signed_set
from registry.active_set.reading.schemas import ActiveEntry, ActiveSet, AliasWeight, ArtifactFile
from registry.active_set.reading.suspension import suspended_version_ids
from registry.adapters import artifact
from registry.placement.stored import from_stored
from registry.pool_lookup import CANARY, PRODUCTION, pool_by_name
from registry.settings import RegistrySettings
from registry.storage.base import ArtifactStore
from registry.rows import existing
from registry.tables import AdapterVersion, BaseModel, Pool, Promotion

log = logging.getLogger(__name__)


def read(session: Session, pool_name: str, store: ArtifactStore | None,
         settings: RegistrySettings, node: str | None = None, *,
         with_files: bool = True) -> ActiveSet:
    """The pool's whole set, or with `node` only what the placement gives that node; without
    files (and their presigned URLs) for readers that must not download them. Built from the
    pool's signed set (signed_set.py), never from alias rows alone."""
    pool = pool_by_name(session, pool_name, lock="share")
    signed = signed_set.load(pool, generation=pool.generation, locked=True, remember=True)
    _report_rows_that_differ(session, pool, signed)
    aliases = list(signed.aliases.values())
    canary_weight = {a.adapter_id: a.weight or 0 for a in aliases if a.alias == CANARY}
    by_version: dict[int, list[AliasWeight]] = defaultdict(list)
    for alias in aliases:
        by_version[alias.version_id].append(AliasWeight(
            alias=alias.alias, weight=_weight(alias, canary_weight.get(alias.adapter_id, 0)),
            shadow=_shadow(session, alias)))
    # Versions waiting to qualify on a new engine, under the pool's `suspend` policy.
    version_ids = sorted(_as_signed(session, pool, signed) - suspended_version_ids(session, pool.id))
    proofs = repository.current_attestations(session, pool.id, version_ids)
    owned = repository.versions_with_owners(session, version_ids)
    entries = [_entry(*owned[vid], by_version.get(vid, []), store if with_files else None, settings,
                      proofs.get(vid))
               for vid in version_ids]
    spread = from_stored(pool.placement)
    part_of = None
    on_demand = pool.overflow == "on_demand"
    if spread is not None and spread.mode == "spread":
        for entry in entries:
            entry.nodes = spread.nodes_of(entry.served_name)
            entry.on_demand = on_demand and not entry.nodes  # cold: resident nowhere
        if node is not None:
            part_of = node
            # A node the placement does not count (new, or back after an absence) keeps what it
            # last reported holding, so that an outage never empties a fleet; a new one holds
            # nothing. Its next report gets it placed.
            mine = spread.served_by(node) if node in spread.targets else _last_loaded(session, pool, node)
            if on_demand:  # the node may be asked for any of them; it loads ahead only its own
                for entry in entries:
                    entry.on_demand = entry.served_name not in mine
            else:
                entries = [entry for entry in entries if entry.served_name in mine]
    elif on_demand and len(entries) > pool.max_cpu_loras:
        # Not spread, yet more than a node holds: the placement was made with no live node (the
        # first, or after the whole fleet was away). Nothing is known to fit, so nothing is
        # loaded ahead (what a node holds stays loaded) until the nodes' reports get it placed.
        for entry in entries:
            entry.on_demand = True
    return ActiveSet(
        pool=pool.name, base_model=existing(session, BaseModel, pool.base_model_id).name,
        generation=pool.generation, node=part_of, overflow=pool.overflow,
        limits={"max_loras": pool.max_loras, "max_cpu_loras": pool.max_cpu_loras,
                "max_lora_rank": pool.max_lora_rank},
        entries=entries, urls_expire_in=settings.presign_ttl_s, signed=pool.signed_active_set)


def _as_signed(session: Session, pool: Pool, signed: signed_set.SignedSet) -> set[int]:
    """The signed set's versions that still have a row. A row edited since it was signed (its
    name or digest) is served as it is, and reported: every node refuses it against the
    attestation and the signed set, and keeps the approved bytes it holds (leaving the version
    out would have nodes unload them)."""
    rows = repository.names_and_digests(session, signed.version_ids())
    for version_id, (served_name, digest) in signed.names().items():
        if rows.get(version_id) != (served_name, digest):
            log.error("pool %s: version %d was signed as %s (%s…), its row says %s",
                      pool.name, version_id, served_name, digest[:12], rows.get(version_id))
    return set(rows)


def _report_rows_that_differ(session: Session, pool: Pool, signed: signed_set.SignedSet) -> None:
    rows = {(a.adapter_id, a.alias, a.version_id, a.weight) for a in repository.aliases_of_pool(session, pool.id)}
    kept = {(a.adapter_id, a.alias, a.version_id, a.weight) for a in signed.aliases.values()}
    if rows != kept:
        log.error("pool %s: alias rows differ from its signed set (rows only: %s; signed only: %s); "
                  "the signed set is served", pool.name, sorted(rows - kept)[:5], sorted(kept - rows)[:5])


def _weight(alias: signed_set.SignedAlias, canary: int) -> int:
    if alias.alias == PRODUCTION:
        return 100 - canary
    return alias.weight or 0


def _shadow(session: Session, alias: signed_set.SignedAlias) -> float:
    if alias.alias != CANARY:
        return 0.0
    promotion = session.get(Promotion, alias.promotion_id)
    return float((promotion.analysis or {}).get("shadow_fraction", 0.0)) if promotion else 0.0


def _entry(version: AdapterVersion, adapter: str, tenant: str, aliases: list[AliasWeight],
           store: ArtifactStore | None, settings: RegistrySettings,
           attestation: dict | None) -> ActiveEntry:
    return ActiveEntry(
        served_name=f"{tenant}/{adapter}@{version.number}", tenant=tenant,
        adapter=adapter, version=version.number, digest=version.digest, rank=version.rank,
        size_bytes=version.size_bytes, aliases=sorted(aliases, key=lambda a: a.alias),
        retiring=not aliases, attestation=attestation,
        files=[ArtifactFile(**f, url=store.presigned_url(artifact.blob_key(f["sha256"]),
                                                         settings.presign_ttl_s))
               for f in version.files] if store is not None else [])


def _last_loaded(session: Session, pool: Pool, node_id: str) -> frozenset[str]:
    """What the node reported holding last; nothing for a node never seen."""
    row = repository.node_status(session, pool.id, node_id)
    return frozenset(a["served_name"] for a in row.loaded) if row is not None else frozenset()


def retiring_names(session: Session, pool_id: int) -> set[str]:
    """Served names that lost their last alias and stay only until traffic has moved."""
    signed = signed_set.load(existing(session, Pool, pool_id))
    return {r.served_name for r in signed.retiring.values()}


def desired_digests(session: Session, pool_id: int) -> dict[str, str]:
    """served name -> digest of everything the pool's nodes should hold (no URLs): the signed
    set's versions, named as the active set serves them."""
    signed = signed_set.load(existing(session, Pool, pool_id))
    return repository.served_names(session, signed.version_ids() - suspended_version_ids(session, pool_id))
