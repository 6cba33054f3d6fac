"""Each base's module table, derived once per config.json and kept in module_tables: a second
base registered from the same config, every upload and every sizing read the stored one."""

from __future__ import annotations

import hashlib
import logging
from typing import Any

from sqlalchemy.orm import Session

from registry.base_models import repository
from registry.base_models.derivation import derive
from registry.base_models.module_table import ModuleTable
from registry.errors import LoraplaneError
from registry.tables import BaseModel
from signed_digests.provenance import canonical

log = logging.getLogger(__name__)


def config_digest(config: dict[str, Any]) -> str:
    """The base's config.json, canonical, as attestations name it (config_sha256): the key of its
    module table, and what requalification compares."""
    return hashlib.sha256(canonical(config)).hexdigest()


def table_for_config(session: Session, config: dict[str, Any]) -> ModuleTable:
    """The stored table of this config, derived and stored first if there is none, or if the
    stored one was derived by an older registry (it knew less of the architecture)."""
    digest = config_digest(config)
    stored = repository.stored_table(session, digest)
    if stored is not None and ModuleTable.is_current(stored):
        return ModuleTable.from_json(stored)
    try:
        table = derive(config)  # in a process of its own
    except LoraplaneError as failed:
        if stored is None:
            raise
        # What worked before keeps working: the older table, until a derivation succeeds.
        log.warning("the module table of config %s could not be derived again (%s); using the one "
                    "stored by an older registry", digest[:12], failed)
        return ModuleTable.from_json(stored)
    repository.store_table(session, digest, table.to_json())
    return table


def table_of(session: Session, base: BaseModel) -> ModuleTable:
    return table_for_config(session, base.config)
