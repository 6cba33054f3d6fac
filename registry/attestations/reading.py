"""A version's attestations as people read them: each statement decoded, and whether it verifies
against the trust bundle the registry publishes now."""

from __future__ import annotations

from sqlalchemy.orm import Session

from loraplane import provenance
from registry.adapters import service as adapters
from registry.attestations import service
from registry.attestations.schemas import AttestationOut
from registry.auth.principal import Principal
from registry.tables import Pool


def of_version(session: Session, principal: Principal, tenant: str, name: str,
               number: int) -> list[AttestationOut]:
    principal.require(adapters.READERS, tenant)
    version = adapters.find_version(session, tenant, name, number)
    bundle = provenance.TrustBundle.parse(service.trust_bundle())
    out = []
    for row in service.of_version(session, version.id):
        problem = None
        try:
            bundle.verify(row.envelope)
        except provenance.Unverified as error:
            problem = str(error)
        out.append(AttestationOut(
            id=row.id, pool=session.get(Pool, row.pool_id).name, action=row.action, key_id=row.key_id,
            created_at=row.created_at, audit_event_hash=row.audit_event_hash,
            statement_sha256=row.statement_sha256, verified=problem is None, problem=problem,
            statement=provenance.unverified_statement(row.envelope), envelope=row.envelope))
    return out
