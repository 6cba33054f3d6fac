from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.orm import Session

from registry.tables import AttestationKeyLedger

LEDGER = "environment"
# Any constant works; it keeps two registries starting at once from each recording a rotation.
LEDGER_LOCK = 7_260_003


def ledger_for_update(session: Session) -> AttestationKeyLedger | None:
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": LEDGER_LOCK})
    return session.get(AttestationKeyLedger, LEDGER, with_for_update=True)
