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
    tenant: str | None  # None only for a global admin

    @property
    def is_global_admin(self) -> bool:
        return self.role is Role.ADMIN and self.tenant is None

    @property
    def label(self) -> str:
        scope = self.tenant or "*"
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
