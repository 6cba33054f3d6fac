"""Everything that names a blob, the collector's marks, and the per-blob locks that keep a
collection and an upload of the same bytes apart."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import delete, select, text
from sqlalchemy.dialects.postgresql import insert as postgres_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from registry.tables import AdapterVersion, Attestation, BlobGcMark, EvalSuite, Pool

# The first of PostgreSQL's two-key advisory locks (which never meet the one-key locks others
# take): the second key is taken from the blob's digest. A collision only makes two blobs wait
# for each other.
BLOB_LOCK_SPACE = 7_260_029


def lock_blobs(session: Session, sha256s: Iterable[str], *, shared: bool) -> None:
    """Hold each blob's lock until the transaction ends: shared while an upload checks that its
    blobs are there and records them, exclusive while the collector re-checks and deletes one.
    In sorted order, so that two holders never wait on each other. SQLite's transactions already
    run one at a time (BEGIN IMMEDIATE): nothing to take there."""
    if session.get_bind().dialect.name != "postgresql":
        return
    function = "pg_advisory_xact_lock_shared" if shared else "pg_advisory_xact_lock"
    for key in sorted({_lock_key(sha256) for sha256 in sha256s}):
        session.execute(text(f"SELECT {function}(:space, :key)"), {"space": BLOB_LOCK_SPACE, "key": key})


def _lock_key(sha256: str) -> int:
    return int.from_bytes(bytes.fromhex(sha256[:8]), "big", signed=True)


def version_blob_fields(session: Session) -> Iterator[tuple[Any, Any, Any]]:
    """(files, derived_from, upload_signature) of every version row, deleted ones included."""
    query = select(AdapterVersion.files, AdapterVersion.derived_from, AdapterVersion.upload_signature)
    yield from session.execute(query.execution_options(yield_per=500))


def suite_datasets(session: Session) -> set[str]:
    return set(session.scalars(select(EvalSuite.dataset_sha256)))


def attestation_envelopes(session: Session) -> Iterator[Any]:
    yield from session.scalars(select(Attestation.envelope).execution_options(yield_per=500))


def signed_sets(session: Session) -> list[Any]:
    return list(session.scalars(select(Pool.signed_active_set)))


def files_of_versions(session: Session, version_ids: set[int]) -> list[Any]:
    if not version_ids:
        return []
    return list(session.scalars(select(AdapterVersion.files).where(AdapterVersion.id.in_(version_ids))))


def marks(session: Session) -> dict[str, datetime]:
    return {row.sha256: aware(row.unreferenced_since) for row in session.scalars(select(BlobGcMark))}


def aware(moment: datetime) -> datetime:
    """SQLite gives back the UTC time it stored without its zone."""
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def mark_rows(session: Session, sha256s: list[str], *, for_update: bool) -> list[BlobGcMark]:
    query = select(BlobGcMark).where(BlobGcMark.sha256.in_(sha256s)).order_by(BlobGcMark.sha256)
    return list(session.scalars(query.with_for_update(skip_locked=True) if for_update else query))


def add_marks(session: Session, sha256s: list[str], at: datetime) -> None:
    """Mark each blob unreferenced since `at`, keeping an earlier mark another collector made."""
    if not sha256s:
        return
    insert = postgres_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert
    session.execute(insert(BlobGcMark).values([{"sha256": sha256, "unreferenced_since": at}
                                               for sha256 in sha256s])
                    .on_conflict_do_nothing(index_elements=["sha256"]))


def drop_marks(session: Session, sha256s: Iterable[str]) -> None:
    listed = list(sha256s)
    if listed:
        session.execute(delete(BlobGcMark).where(BlobGcMark.sha256.in_(listed)))
