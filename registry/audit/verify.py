"""Walk the audit chain and report every row that does not fit it, and check that the head
recorded outside the database is still in the chain."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy.orm import Session

from registry.audit import anchor, repository
from registry.audit.sealed import hash_under, keyed_with
from registry.audit.anchor import Head
from registry.audit.chain import GENESIS, HMAC_SHA256, SHA256
from registry.keys import current_fingerprint
from registry.secret_checkpoints import service as secret_checkpoints
from registry.tables import AuditEvent

BATCH = 2000


@dataclass
class Problem:
    id: int
    kind: str  # altered | removed_before | unkeyed | retired_secret | head_untrusted | head_mismatch | head_missing
    detail: str


@dataclass
class ChainReport:
    events: int = 0
    head: str = GENESIS
    problems: list[Problem] = field(default_factory=list)
    anchor: str = ""  # what became of the head kept outside the database, in words
    external_head: Head | None = None  # (in this class, `anchor` is the field above)
    keyed_by_previous_secret: int = 0  # events keyed before LORAPLANE_SECRET_KEY was rotated

    @property
    def intact(self) -> bool:
        return not self.problems


def verify_chain(session: Session, *, head_file: Path | None = None,
                 max_problems: int = 100) -> ChainReport:
    """An altered row no longer matches its own hash. A removed row leaves the next one pointing
    at a hash that is not the row before it. A row hashed without the key after keyed rows was
    written by someone without it. A chain rewritten as a whole (recomputed, or truncated and
    rebuilt) no longer holds the head recorded outside the database (`head_file`, by default the
    configured one), or is shorter than it."""
    path = head_file or anchor.head_path(session.get_bind().engine.url)
    report = ChainReport()
    # Read before the walk: the chain only grows, so a head read now is inside what is walked.
    try:
        external = anchor.read(path)
    except anchor.UntrustedHead as problem:
        report.problems.append(Problem(0, "head_untrusted", f"the audit head at {path} cannot be "
                                                            f"trusted: {problem}"))
        external = None
    report.external_head = external
    checkpoints = secret_checkpoints.checkpoints(session)
    expected_prev, last_id, keyed = GENESIS, 0, False
    while True:
        rows = repository.events_after(session, last_id, BATCH)
        if not rows:
            break
        for row in rows:
            if external is not None and last_id < external.last_id < row.id:
                report.problems.append(_head_missing(external, report.events, last_id))
            report.events += 1
            _check_row(row, expected_prev, last_id, checkpoints, keyed, report)
            keyed = keyed or row.hash_scheme == HMAC_SHA256
            if external is not None and row.id == external.last_id:
                _check_head(row, external, report)
            expected_prev, last_id = row.hash, row.id
            report.head = row.hash
            if len(report.problems) >= max_problems:
                return report
        session.expunge_all()
    if external is None:
        report.anchor = (f"no head recorded outside the database at {path} yet: only the chain "
                         "itself was checked")
    elif last_id < external.last_id:
        report.problems.append(_head_missing(external, report.events, last_id))
    elif not any(p.kind.startswith("head_") for p in report.problems):
        report.anchor = (f"the head recorded at {external.at} (event {external.last_id}, "
                         f"{external.count} events) is in the chain")
    return report


def _check_row(row: AuditEvent, expected_prev: str, last_id: int, checkpoints: dict[str, secret_checkpoints.Checkpoint],
               keyed: bool, report: ChainReport) -> None:
    if row.prev_hash != expected_prev:
        report.problems.append(Problem(row.id, "removed_before", (
            f"event {row.id} follows a hash that is not event {last_id or 'genesis'}'s: "
            "an event before it was removed or reordered")))
    if row.hash_scheme not in (SHA256, HMAC_SHA256):
        report.problems.append(Problem(row.id, "altered", (
            f"event {row.id} names an unknown hash scheme {row.hash_scheme!r}: it was edited "
            "after it was written")))
        return
    if row.hash_scheme == SHA256:
        if keyed:
            report.problems.append(Problem(row.id, "unkeyed", (
                f"event {row.id} ({row.action} {row.subject}) is hashed without the audit key after "
                "keyed events: it was written or rewritten by someone who does not hold the key")))
        if hash_under(row, None) != row.hash:
            report.problems.append(Problem(row.id, "altered", (
                f"event {row.id} ({row.action} {row.subject}) does not match its hash: it was edited "
                "after it was written")))
        return
    secret = keyed_with(row)
    if secret is None:
        report.problems.append(Problem(row.id, "altered", (
            f"event {row.id} ({row.action} {row.subject}) does not match its hash: it was edited "
            "after it was written, or keyed with a secret that is neither LORAPLANE_SECRET_KEY nor in "
            "LORAPLANE_PREVIOUS_SECRET_KEYS here")))
    elif secret != current_fingerprint():
        checkpoint = checkpoints.get(secret)
        if checkpoint is not None and row.id > checkpoint.through_event:
            report.problems.append(Problem(row.id, "retired_secret", (
                f"event {row.id} ({row.action} {row.subject}) is keyed with a secret rotated out after "
                f"event {checkpoint.through_event}: it was written by someone who still holds that secret")))
        else:
            report.keyed_by_previous_secret += 1


def _check_head(row: AuditEvent, external: anchor.Head, report: ChainReport) -> None:
    if row.hash != external.last_hash:
        report.problems.append(Problem(row.id, "head_mismatch", (
            f"event {row.id} no longer has the hash the head recorded outside the database at "
            f"{external.at} holds for it: the chain was rewritten")))
    elif report.events != external.count:
        report.problems.append(Problem(row.id, "head_mismatch", (
            f"the head recorded outside the database at {external.at} counts {external.count} "
            f"events through event {row.id}, and the chain now holds {report.events}: events were "
            "removed or inserted")))


def _head_missing(external: anchor.Head, events: int, last_id: int) -> Problem:
    return Problem(external.last_id, "head_missing", (
        f"event {external.last_id}, the head recorded outside the database at {external.at} "
        f"({external.count} events), is not in the chain, which holds {events} events up to "
        f"event {last_id or 'genesis'}: events were removed, or the chain was truncated and "
        "rebuilt"))
