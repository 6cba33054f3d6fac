"""What an attestation may sign: the bytes that were uploaded, evaluated and shown to the
reviewer, as the sealed audit events recorded them, never merely what the version's row says at
the moment of signing. Someone who can write to the database could otherwise point an evaluated
version at any other blob in the store between its evaluation and its approval, and a real
reviewer's approval would sign bytes nobody evaluated.

The digest is believed when the upload's event (`adapter_version.upload`) and every passing
evaluation's event (`evaluation.passed`, which the worker records with the digest it loaded)
name it, each event still matching its keyed hash (registry/audit/sealed.py); the row's files
must make that digest, and a reviewer who says which digest they saw must have seen that one."""

from __future__ import annotations

from sqlalchemy.orm import Session

from registry.attestation_keys.bundle import own_keys
from registry.attestations import repository as attestations
from registry.attestations.reading import proof_problem
from registry.audit.sealed import recorded, sealed_events
from registry.errors import Conflict
from registry.evaluations import rules as evaluation_rules
from registry.evaluations.repository import latest_evaluations
from registry.tables import AdapterVersion, Pool
from signed_digests.digests import manifest_digest

UPLOADED, PASSED = "adapter_version.upload", f"evaluation.{evaluation_rules.PASSED}"


def check(session: Session, version: AdapterVersion, served_name: str, *,
          evaluations: bool = True, approved_in: Pool | None = None) -> None:
    """Raise Conflict (409 evaluated_bytes_changed) naming every disagreement; nothing is signed.
    `evaluations` False (a rollback to a version approved before): the upload's event alone.
    `approved_in`: the pool where the registry must have signed an approval of these very bytes
    before (a rollback restores what a promotion row says was served: the row is not proof)."""
    problems = _problems(session, version, served_name, evaluations)
    if approved_in is not None and not _signed_before(session, approved_in, version, served_name):
        problems.append(f"this registry never signed {_short(version.digest)} for pool {approved_in.name!r}")
    _refuse(served_name, problems)


def _signed_before(session: Session, pool: Pool, version: AdapterVersion, served_name: str) -> bool:
    """An attestation of this version in this pool, signed by this registry's keys, about exactly
    its name, digest and files."""
    ours = own_keys()
    return any(proof_problem(ours, row.envelope, served_name, version, pool.name) is None
               for row in attestations.of_version(session, version.id))


def check_seen(version: AdapterVersion, served_name: str, seen_digest: str | None) -> None:
    """The reviewer who says which digest they saw must have seen the one about to be signed."""
    if seen_digest is not None and seen_digest != version.digest:
        _refuse(served_name, [f"the reviewer saw {_short(seen_digest)}, the version now says "
                              f"{_short(version.digest)}"])


def _refuse(served_name: str, problems: list[str]) -> None:
    if problems:
        raise Conflict(f"{served_name} cannot be signed: " + "; ".join(problems),
                       code="evaluated_bytes_changed",
                       hint="Its stored digest or files are not the ones that were uploaded and "
                            "evaluated: check the database's audit trail (loraplane audit verify), "
                            "then upload the adapter again and have it evaluated.")


def _problems(session: Session, version: AdapterVersion, served_name: str,
              evaluations: bool) -> list[str]:
    digest = version.digest
    problems = []
    if manifest_digest(version.files) != digest:
        problems.append("its files do not make its digest")
    uploads = sealed_events(session, served_name, UPLOADED)
    if not uploads:
        problems.append("no sealed upload event records its digest")
    elif recorded(uploads[-1], "digest") != digest:
        problems.append(f"the upload recorded {_short(recorded(uploads[-1], 'digest'))}, "
                        f"the version now says {_short(digest)}")
    if evaluations:
        problems += _evaluation_problems(session, version, served_name)
    return problems


def _evaluation_problems(session: Session, version: AdapterVersion, served_name: str) -> list[str]:
    passes = {recorded(row, "evaluation"): recorded(row, "digest")
              for row in sealed_events(session, served_name, PASSED)}
    problems = []
    for suite, evaluation in sorted(latest_evaluations(session, version.id).items()):
        if evaluation.state != evaluation_rules.PASSED:
            continue
        ran_on = passes.get(evaluation.id, "unsealed")
        if ran_on == "unsealed":
            problems.append(f"evaluation {evaluation.id} ({suite}) has no sealed record of its pass")
        elif ran_on != version.digest:
            problems.append(f"evaluation {evaluation.id} ({suite}) ran on {_short(ran_on)}")
    return problems


def _short(digest: str | None) -> str:
    return f"{digest[:12]}…" if isinstance(digest, str) else "no digest"
