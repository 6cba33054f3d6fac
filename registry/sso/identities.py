"""A person signed on through the identity provider is one identity per issuer and subject: the
same person signing on again, in the dashboard or the CLI, is that identity again, whatever name
the provider shows; two people with the same name are two identities."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from registry import audit
from registry.rows import existing
from registry.sso import repository
from registry.tables import Identity, SsoIdentity


def identity_for(session: Session, issuer: str, subject: str, name: str,
                 tenant_id: int | None) -> Identity:
    row = repository.sso_identity(session, issuer, subject)
    if row is None:
        try:
            with session.begin_nested():  # the same person signing on twice at once
                identity = Identity(name=name, tenant_id=tenant_id)
                session.add(identity)
                session.flush()
                row = SsoIdentity(issuer=issuer, subject=subject, identity_id=identity.id)
                session.add(row)
                session.flush()
        except IntegrityError:
            row = repository.sso_identity(session, issuer, subject)
            if row is None:
                raise
        else:
            audit.record(session, actor=f"{name} (sign-on)", action="identity.created",
                         subject=f"identity/{identity.id}", tenant_id=tenant_id,
                         after={"issuer": issuer, "subject": subject, "name": name})
    row.last_sign_in_at = datetime.now(UTC)
    identity = existing(session, Identity, row.identity_id)
    identity.name = name  # shown only; the provider may rename people
    identity.tenant_id = tenant_id  # the tenant the mapping gives them now
    session.flush()
    return identity
