"""A version's attestations as people read them: each statement decoded, and whether it proves
this version in its pool against the trust bundle the registry publishes now (the signature,
then the served name, digest, files and pool it names)."""

from __future__ import annotations

from sqlalchemy.orm import Session

from registry.adapters import service as adapters
from registry.attestation_keys import bundle
from registry.attestations import repository
from registry.attestations.evidence import served_name
from registry.attestations.schemas import AttestationOut
from registry.auth.principal import Principal
from registry.rows import existing
from registry.tables import Pool
from signed_digests import provenance


def of_version(session: Session, principal: Principal, tenant: str, name: str,
               number: int) -> list[AttestationOut]:
    principal.require(adapters.READERS, tenant)
    version = adapters.find_version(session, tenant, name, number)
    trusted = provenance.TrustBundle.parse(bundle.trust_bundle())
    served = served_name(session, version)
    out = []
    for row in repository.of_version(session, version.id):
        pool = existing(session, Pool, row.pool_id).name
        try:
            statement, problem = provenance.unverified_statement(row.envelope), None
        except provenance.Unverified as error:
            statement, problem = {}, str(error)
        if problem is None:
            problem = proof_problem(trusted, row.envelope, served, version, pool)
        out.append(AttestationOut(
            id=row.id, pool=pool, action=row.action, key_id=row.key_id, created_at=row.created_at,
            audit_event_hash=row.audit_event_hash, statement_sha256=row.statement_sha256,
            verified=problem is None, problem=problem, statement=statement, envelope=row.envelope))
    return out


def proof_problem(trusted: provenance.TrustBundle, envelope: dict, served: str, version, pool: str) -> str | None:
    """Why the attestation does not prove this version in this pool under `trusted`, or None."""
    try:
        statement = trusted.verify(envelope)
        provenance.check_subject(statement, served, version.digest, version.files)
    except provenance.Unverified as error:
        return str(error)
    named = statement["predicate"].get("pool")
    return None if named == pool else f"the attestation is for pool {named!r}, not {pool!r}"
