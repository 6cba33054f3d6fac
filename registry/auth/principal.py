"""Who is calling, and what they may do. Roles are scoped to one tenant; admin may be global."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from registry.errors import Forbidden


class Role(StrEnum):
    ADMIN = "admin"
    UPLOADER = "uploader"
    REVIEWER = "reviewer"
    NODE = "node"


@dataclass(frozen=True)
class Principal:
    token_id: int
    subject: str
    role: Role
    tenant: str | None  # None for a global admin and for node tokens
    pool: str | None = None  # a node token's pool

    @property
    def is_global_admin(self) -> bool:
        return self.role is Role.ADMIN and self.tenant is None

    @property
    def label(self) -> str:
        scope = f"pool {self.pool}" if self.pool else (self.tenant or "*")
        return f"{self.subject} ({self.role}@{scope}, token {self.token_id})"

    def require(self, roles: set[Role], tenant: str | None = None) -> None:
        """Pass a global admin; otherwise demand one of `roles`, within `tenant` when given."""
        if self.is_global_admin:
            return
        if self.role not in roles:
            allowed = ", ".join(sorted(roles)) or "a global admin"
            raise Forbidden(
                f"role '{self.role}' may not do this; it needs {allowed}",
                hint="Use a token with the right role (loraplane token create --role ...).",
            )
        if tenant is not None and tenant != self.tenant:
            raise Forbidden(
                f"this token belongs to tenant '{self.tenant}', not '{tenant}'",
                hint="Use a token issued for that tenant.",
            )

    def require_global_admin(self) -> None:
        self.require(set())

    def require_node_of(self, pool: str) -> None:
        """Pass a global admin, or a node token issued for this pool."""
        if self.is_global_admin:
            return
        if self.role is not Role.NODE:
            raise Forbidden(f"role '{self.role}' may not do this; it needs a node token of pool '{pool}'",
                            hint="Use the node token issued for this pool (loraplane token create "
                                 "--role node --pool POOL).")
        if self.pool != pool:
            raise Forbidden(f"this node token belongs to pool '{self.pool}', not '{pool}'",
                            hint="Use the node token issued for this pool.")
