"""Append-only, hash-chained audit trail: every state change records who, what, before and after."""

from registry.audit.service import pending, record, record_created

__all__ = ["pending", "record", "record_created"]
