"""Each pool's signed active set: what it serves, under which aliases and weights, as the registry
last decided it, signed with the attestation key and kept on the pool's row.

Alias and retirement rows are a projection anyone who can write the database can edit, and an
attestation only proves that a version was approved once, not that it is current. So:
- a change to what a pool serves starts from the pool's last signed set (verified here, never
  re-read from rows), applies its own operations to it, and signs the result with the change's
  generation (change.py);
- the active set nodes and routers read is built from the verified set; rows that say otherwise
  are ignored, and reported (snapshot.py);
- a set with a generation older than one this process has verified is a replay, and refused.

A pool whose set does not verify serves nothing new: readers get a 503 that says so, and nodes
keep what they hold. `loraplane db seal-active-sets` signs the rows of pools that have no set
(those created before signed sets existed, or after an operator checked the rows)."""

from __future__ import annotations

import logging
import threading
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from cachetools import LRUCache
from sqlalchemy.orm import Session

from registry.active_set import repository
from registry.attestation_keys.bundle import own_keys
from registry.attestation_keys.keyring import get_keyring
from registry.errors import Conflict, Unavailable
from registry.tables import Pool
from signed_digests import provenance

log = logging.getLogger(__name__)


@dataclass
class SignedAlias:
    adapter_id: int
    alias: str
    version_id: int
    served_name: str
    digest: str
    weight: int | None
    promotion_id: int | None


@dataclass
class SignedRetiring:
    version_id: int
    served_name: str
    digest: str


@dataclass
class SignedSet:
    pool: str
    pool_id: int  # a pool dropped and made again under its name never takes the old one's set
    generation: int
    aliases: dict[tuple[int, str], SignedAlias] = field(default_factory=dict)
    retiring: dict[int, SignedRetiring] = field(default_factory=dict)
    # The routers whose own traffic must each reach a canary's verdict (canaries/service.py).
    canary_min_routers: int = 2
    key_id: str | None = None  # the key that signed it, once signed

    def point(self, alias: SignedAlias) -> int | None:
        """Point the alias; returns the version it pointed at before, if any."""
        previous = self.aliases.get((alias.adapter_id, alias.alias))
        self.aliases[(alias.adapter_id, alias.alias)] = alias
        self.retiring.pop(alias.version_id, None)
        return previous.version_id if previous else None

    def drop(self, adapter_id: int, alias: str) -> SignedAlias | None:
        return self.aliases.pop((adapter_id, alias), None)

    def is_aliased(self, version_id: int) -> bool:
        return any(a.version_id == version_id for a in self.aliases.values())

    def retire(self, retiring: SignedRetiring) -> None:
        self.retiring[retiring.version_id] = retiring

    def version_ids(self) -> set[int]:
        return {a.version_id for a in self.aliases.values()} | set(self.retiring)

    def names(self) -> dict[int, tuple[str, str]]:
        """version id -> (served name, digest), as signed."""
        named = {r.version_id: (r.served_name, r.digest) for r in self.retiring.values()}
        named.update({a.version_id: (a.served_name, a.digest) for a in self.aliases.values()})
        return named

    def document(self) -> dict[str, Any]:
        return {"_type": provenance.ACTIVE_SET_TYPE, "pool": self.pool, "pool_id": self.pool_id,
                "generation": self.generation,
                "aliases": [asdict(a) for _, a in sorted(self.aliases.items())],
                "retiring": [asdict(r) for _, r in sorted(self.retiring.items())],
                "canary_min_routers": self.canary_min_routers,
                "signed_at": datetime.now(UTC).isoformat()}

    @classmethod
    def from_document(cls, document: dict[str, Any], key_id: str | None) -> SignedSet:
        aliases = [SignedAlias(**item) for item in document["aliases"]]
        retiring = [SignedRetiring(**item) for item in document["retiring"]]
        return cls(pool=document["pool"], pool_id=int(document["pool_id"]),
                   generation=int(document["generation"]),
                   aliases={(a.adapter_id, a.alias): a for a in aliases},
                   retiring={r.version_id: r for r in retiring},
                   canary_min_routers=int(document.get("canary_min_routers", 2)), key_id=key_id)


class Untrusted(Unavailable):
    code = "active_set_unverified"


def load(pool: Pool, *, generation: int | None = None, locked: bool = False,
         remember: bool = False) -> SignedSet:
    """The pool's signed set, once its signature holds. Raises Untrusted (503).
    `generation`: the one it should have, to report a difference (a reader gives the row's; a
    change, the one before its bump). `locked`: the row was read under its lock in this
    transaction, so it is at least as new as any set served: an older one is a replay, refused
    (a row read earlier in a transaction may be older than a set served since, and is not
    compared). `remember`: the set is committed (a reader's), so no older one is taken after it."""
    envelope = pool.signed_active_set
    if envelope is None:
        raise _untrusted(pool, "it has no signed active set")
    if not isinstance(envelope, dict):
        raise _untrusted(pool, "its signed active set is not an envelope")
    try:
        document = _verified(envelope)
        signed = SignedSet.from_document(document, envelope["signatures"][0]["keyid"])
    except (provenance.Unverified, KeyError, TypeError, ValueError) as problem:
        raise _untrusted(pool, f"its signed active set does not verify ({problem})") from None
    if (signed.pool, signed.pool_id) != (pool.name, pool.id):
        raise _untrusted(pool, f"its signed active set is another pool's ({signed.pool!r})")
    if locked:
        _refuse_replay((pool.name, pool.id), signed.generation, remember)
    if generation is not None and signed.generation != generation:
        log.error("pool %s: generation %d in the database, %d signed; the signed set is served",
                  pool.name, generation, signed.generation)
    return signed


def version_at(pool: Pool, adapter_id: int, alias: str) -> int | None:
    """The version the adapter's alias points at in the pool, as signed (gates and canaries compare
    with it: a row edited to point at a weaker version must not make a candidate look better)."""
    pointed = load(pool).aliases.get((adapter_id, alias))
    return pointed.version_id if pointed else None


def sign(pool: Pool, signed: SignedSet) -> None:
    """Sign the set and keep it on the pool's row (committed with the change that made it).
    A set too large for a node to accept is refused (409), so the change is not made."""
    keyring = get_keyring()
    kid = keyring.signing_key_id()
    envelope = provenance.envelope(
        provenance.ACTIVE_SET_PAYLOAD, signed.document(), [(kid, lambda message: keyring.sign(kid, message))])
    if len(provenance.canonical(envelope)) > provenance.MAX_ACTIVE_SET_BYTES:
        raise Conflict(f"pool {pool.name!r} would hold {len(signed.aliases) + len(signed.retiring)} versions, "
                       f"a signed active set larger than {provenance.MAX_ACTIVE_SET_BYTES // 2**20} MiB, "
                       "which nodes refuse", code="active_set_too_large",
                       hint="Retire versions the pool no longer needs, or split its adapters across pools.")
    pool.signed_active_set = envelope
    signed.key_id = kid


def from_rows(session: Session, pool: Pool) -> SignedSet:
    """The set the pool's rows describe, to sign once, by an operator's act (sealing.py)."""
    signed = SignedSet(pool=pool.name, pool_id=pool.id, generation=pool.generation,
                       canary_min_routers=pool.canary_min_routers)
    version_ids = repository.aliased_version_ids(session, pool.id) | repository.retiring_version_ids(session, pool.id)
    names = repository.names_and_digests(session, version_ids)
    for row in repository.aliases_of_pool(session, pool.id):
        served_name, digest = names[row.version_id]
        signed.aliases[(row.adapter_id, row.alias)] = SignedAlias(
            row.adapter_id, row.alias, row.version_id, served_name, digest, row.weight, row.promotion_id)
    for version_id in repository.retiring_version_ids(session, pool.id):
        if not signed.is_aliased(version_id):
            served_name, digest = names[version_id]
            signed.retiring[version_id] = SignedRetiring(version_id, served_name, digest)
    return signed


# Verified envelopes, by their payload and signatures: a verification per generation, not per read.
_verified_cache: LRUCache = LRUCache(maxsize=1024)
_highest: dict[tuple[str, int], int] = {}  # (pool, id) -> the highest generation verified here
_lock = threading.Lock()


def _verified(envelope: dict[str, Any]) -> dict[str, Any]:
    key = (envelope.get("payload"), str(envelope.get("signatures")))
    with _lock:
        document = _verified_cache.get(key)
    if document is None:
        document = own_keys().verify_active_set(envelope)
        with _lock:
            _verified_cache[key] = document
    return document


def _refuse_replay(pool: tuple[str, int], generation: int, remember: bool) -> None:
    with _lock:
        highest = _highest.get(pool, -1)
        if generation < highest:
            raise Untrusted(
                f"pool {pool[0]!r} holds a signed active set of generation {generation}, older than "
                f"generation {highest} this registry served: an old set was put back in the database",
                hint="Check who wrote the pools table, then run `loraplane db seal-active-sets "
                     "--pool NAME` on the registry host once the rows are right.")
        if remember:
            _highest[pool] = generation


def _untrusted(pool: Pool, why: str) -> Untrusted:
    log.error("pool %s serves nothing new: %s", pool.name, why)
    return Untrusted(f"pool {pool.name!r} cannot be served: {why}",
                     hint="Its rows were changed outside the registry, or it was created before "
                          "active sets were signed. Check the audit log, then run "
                          "`loraplane db seal-active-sets` on the registry host.")
