"""Append-only audit trail: every state change records who, what, before and after."""

from registry.audit.service import record

__all__ = ["record"]
