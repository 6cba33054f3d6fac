"""Collect stored blobs that nothing names, once they have stayed unnamed for the grace period.

What names a blob: a version row (its files, the upload it was derived from, its signature), an
eval suite's dataset, an attestation's subjects, and the versions a pool's signed active set
names. A blob is collected only when none of these names it, it was first seen unnamed at least
the grace period ago (a mark row keeps when), and it was last written at least that long ago.

A round lists the store, then marks in one transaction, then collects in batches. Each batch
takes the batch's marks (skipping those another collector holds), then each blob's exclusive
lock, then reads every reference again: an upload of the same bytes holds the blob's shared lock
while it checks that the blob is there and records its version (`hold`), so it either commits
before this read and keeps the blob, or finds the blob gone and stores it again. A round stopped
anywhere leaves marks that the next round takes up: it is safe to run again, or twice at once."""

from __future__ import annotations

import base64
import json
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from registry import audit
from registry.adapters.artifact import blob_key
from registry.blob_gc import repository
from registry.storage.base import ArtifactStore
from registry.work_scope import BeginWork, opened
from signed_digests import provenance

log = logging.getLogger(__name__)
SHA256 = re.compile(r"[0-9a-f]{64}")
BATCH = 100
ACTOR = "housekeeper (blob collector)"


@dataclass
class Round:
    listed: int = 0
    referenced: int = 0
    marked: int = 0  # newly seen unreferenced
    collected: list[str] = field(default_factory=list)


def hold(session: Session, store: ArtifactStore, sha256s: Iterable[str]) -> list[str]:
    """Take the blobs' shared locks until the transaction ends, and return those that are not
    in the store (collected since they were checked): the caller stores them again before it
    commits a row that names them."""
    wanted = sorted({sha256 for sha256 in sha256s if SHA256.fullmatch(sha256)})
    repository.lock_blobs(session, wanted, shared=True)
    return [sha256 for sha256 in wanted if not store.has(blob_key(sha256))]


def collect(begin_work: BeginWork, store: ArtifactStore, *, grace_s: float,
            now: datetime | None = None) -> Round:
    now = now or datetime.now(UTC)
    cutoff = now - timedelta(seconds=grace_s)
    listing = {sha256: modified for sha256, modified in store.list_blobs() if SHA256.fullmatch(sha256)}
    done = Round(listed=len(listing))
    with opened(begin_work) as work:
        names = referenced(work.session)
        marks = repository.marks(work.session)
        unnamed = set(listing) - names
        new = sorted(unnamed - set(marks))
        repository.add_marks(work.session, new, now)
        # Named again, or no longer stored (collected by a round that stopped before its commit).
        repository.drop_marks(work.session, sorted(set(marks) - unnamed))
    done.referenced, done.marked = len(set(listing) & names), len(new)
    due = sorted(sha256 for sha256 in unnamed
                 if marks.get(sha256, now) <= cutoff and listing[sha256] <= cutoff)
    for start in range(0, len(due), BATCH):
        with opened(begin_work) as work:
            done.collected += _collect_batch(work.session, store, due[start:start + BATCH], cutoff, grace_s)
    if done.collected:
        log.info("collected %d unreferenced blobs", len(done.collected))
    return done


def _collect_batch(session: Session, store: ArtifactStore, batch: list[str], cutoff: datetime,
                   grace_s: float) -> list[str]:
    rows = repository.mark_rows(session, batch, for_update=True)  # another collector's: skipped
    repository.lock_blobs(session, [row.sha256 for row in rows], shared=False)
    names = referenced(session)  # read after the locks: an upload that recorded a version counts
    collected, named = [], []
    for row in rows:
        if row.sha256 in names:
            named.append(row.sha256)
        elif repository.aware(row.unreferenced_since) <= cutoff:
            store.delete(blob_key(row.sha256))
            collected.append(row.sha256)
    repository.drop_marks(session, [*named, *collected])
    if collected:
        audit.record(session, actor=ACTOR, action="blob.collected", subject="blobs",
                     after={"sha256": collected, "grace_s": grace_s})
    return collected


def referenced(session: Session) -> set[str]:
    """Every sha256 something still names."""
    names: set[str] = set()
    for files, derived_from, signature in repository.version_blob_fields(session):
        names |= _file_digests(files)
        if isinstance(derived_from, dict):
            names |= _file_digests(derived_from.get("files"))
        if isinstance(signature, dict) and isinstance(signature.get("sha256"), str):
            names.add(signature["sha256"])
    names |= repository.suite_datasets(session)
    for envelope in repository.attestation_envelopes(session):
        try:
            statement = provenance.unverified_statement(envelope)
        except provenance.Unverified:
            continue
        for subject in statement.get("subject", []):
            digest = subject.get("digest") if isinstance(subject, dict) else None
            if isinstance(digest, dict) and isinstance(digest.get("sha256"), str):
                names.add(digest["sha256"])
    in_sets = set().union(*(signed_version_ids(envelope) for envelope in repository.signed_sets(session)))
    for files in repository.files_of_versions(session, in_sets):
        names |= _file_digests(files)
    return names


def signed_version_ids(envelope: object) -> set[int]:
    """The versions a stored signed active set names, its signature unchecked (whoever wrote it,
    what it names is kept); nothing for a value that is not one."""
    try:
        document = json.loads(base64.b64decode(envelope["payload"]))  # type: ignore[index]
        return {int(item["version_id"]) for item in [*document["aliases"], *document["retiring"]]}
    except (KeyError, TypeError, ValueError, AttributeError):
        return set()


def _file_digests(files: Any) -> set[str]:
    if not isinstance(files, list):
        return set()
    return {entry["sha256"] for entry in files
            if isinstance(entry, dict) and isinstance(entry.get("sha256"), str)}
