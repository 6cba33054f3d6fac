"""Which served names of a pool's active set a reader may see."""

from __future__ import annotations

from collections.abc import Callable

from registry.auth.principal import Principal


def visible_to(principal: Principal) -> Callable[[str], bool]:
    """Tenant-scoped readers see only their own tenant's adapter names."""
    if principal.tenant is None:
        return lambda served_name: True
    prefix = principal.tenant + "/"
    return lambda served_name: served_name.startswith(prefix)
