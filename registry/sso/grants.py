"""What a person's claims give them: the first rule of LORAPLANE_SSO_ROLE_MAPPINGS their claims
match names a role, and a tenant unless the role is a global admin's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from registry.auth.principal import Role
from registry.errors import Forbidden
from registry.settings import SsoRoleMapping, get_settings

MAX_SHOWN = 10  # of a person's groups, in a refusal


@dataclass(frozen=True)
class Grant:
    role: Role
    tenant: str | None
    rule: int  # its place in LORAPLANE_SSO_ROLE_MAPPINGS, from 1


def grant_for(claims: dict[str, Any]) -> Grant:
    mappings = get_settings().sso_role_mappings
    for place, rule in enumerate(mappings, 1):
        if _matches(claim_at(claims, rule.claim), rule.value):
            return Grant(Role(rule.role), rule.tenant, place)
    raise Forbidden(f"your identity provider's claims ({_shown(claims, mappings)}) map to no loraplane "
                    "role", code="sso_unmapped",
                    hint="Ask an admin to map one of your groups to a role (LORAPLANE_SSO_ROLE_MAPPINGS).")


def claim_at(claims: dict[str, Any], path: str) -> Any:
    """A claim by name, or by a dotted path into nested objects (realm_access.roles); a claim
    whose name itself holds dots (a URL, as some providers name theirs) is found whole first."""
    if path in claims:
        return claims[path]
    value: Any = claims
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _matches(value: Any, wanted: str) -> bool:
    if isinstance(value, str):
        return value == wanted
    if isinstance(value, list):
        return any(isinstance(item, str) and item == wanted for item in value)
    return False


def _shown(claims: dict[str, Any], mappings: list[SsoRoleMapping]) -> str:
    """The values of the claims the rules look at, so the refusal says what the provider sent."""
    shown = []
    for name in dict.fromkeys(rule.claim for rule in mappings):
        value = claim_at(claims, name)
        values = value if isinstance(value, list) else [] if value is None else [value]
        listed = ", ".join(str(item)[:64] for item in values[:MAX_SHOWN])
        more = f", and {len(values) - MAX_SHOWN} more" if len(values) > MAX_SHOWN else ""
        shown.append(f"{name}: {listed or 'none'}{more}")
    return "; ".join(shown) or "no mapping is configured"
