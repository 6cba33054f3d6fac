"""The gateway's objects as the registry's pools and active sets say they should be."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from registry.active_set import repository
from registry.active_set.reading import snapshot
from registry.errors import LoraplaneError, NotFound
from registry.gateway.objects import GatewaySpec, pool_objects
from registry.settings import get_settings

log = logging.getLogger(__name__)


@dataclass
class Desired:
    """Every object loraplane should have in the cluster, and the pools whose set could not be
    read this time (their objects are left as they are: neither updated nor deleted)."""
    objects: list[dict[str, Any]] = field(default_factory=list)
    unread: dict[str, str] = field(default_factory=dict)  # pool -> why


def generations(session: Session) -> dict[str, int]:
    """pool -> generation: a change to any pool's set (or a pool made or dropped) changes this."""
    return dict(repository.all_generations(session))


def desired(session: Session, spec: GatewaySpec, pool: str | None = None) -> Desired:
    """Every pool's objects, or `pool`'s alone (NotFound when there is no such pool)."""
    names = sorted(generations(session))
    if pool is not None:
        if pool not in names:
            raise NotFound(f"pool {pool!r} does not exist", code="pool_not_found",
                           hint=f"Pools: {', '.join(names[:20]) or 'none yet'} (loraplane pool list).")
        names = [pool]
    found = Desired()
    for name in names:
        try:
            # A set that does not verify serves nothing new; a pool whose name cannot be a pod
            # label cannot select pods.
            active = snapshot.read(session, name, None, get_settings(), with_files=False)
            entries = [entry.model_dump(include={"served_name", "tenant", "adapter", "aliases"})
                       for entry in active.entries]
            found.objects += pool_objects(spec, name, entries)
        except LoraplaneError as error:
            log.error("gateway objects of pool %s left as they are: %s", name, error.message)
            found.unread[name] = error.message
    return found
