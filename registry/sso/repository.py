from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from sqlalchemy import CursorResult, delete, select, update
from sqlalchemy.orm import Session

from registry.tables import Identity, SsoIdentity, SsoSignIn


def sso_identity(session: Session, issuer: str, subject: str) -> SsoIdentity | None:
    return session.scalar(select(SsoIdentity).where(SsoIdentity.issuer == issuer,
                                                    SsoIdentity.subject == subject))


def exchange_for_update(session: Session, exchange_hash: str) -> SsoSignIn | None:
    return session.scalar(select(SsoSignIn).where(SsoSignIn.exchange_hash == exchange_hash).with_for_update())


def forget_sign_ins_before(session: Session, moment: datetime) -> int:
    """Sign-ins that expired before `moment`: their states can no longer be used either way."""
    # A DML statement's result is a CursorResult; Session.execute is typed as Result.
    result = cast("CursorResult[Any]", session.execute(delete(SsoSignIn).where(SsoSignIn.expires_at < moment)))
    return result.rowcount


def repoint_links(session: Session, old_root: int, new_root: int) -> None:
    """Every identity linked to `old_root` (and it) now links to `new_root`."""
    session.execute(update(Identity).where(Identity.same_as_id == old_root).values(same_as_id=new_root))
    session.execute(update(Identity).where(Identity.id == old_root).values(same_as_id=new_root))


def lock_identities(session: Session, identity_ids: set[int]) -> None:
    """Row locks on these identities, in id order (so two lockers never wait on each other)."""
    session.execute(select(Identity.id).where(Identity.id.in_(sorted(identity_ids)))
                    .order_by(Identity.id).with_for_update())
