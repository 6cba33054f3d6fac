"""Who is calling, and what they may do. Roles are scoped to one tenant; admin may be global."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from registry.errors import Forbidden


class Role(StrEnum):
    ADMIN = "admin"
    UPLOADER = "uploader"
    REVIEWER = "reviewer"
    NODE = "node"  # a serving node's agent: reads its pool's active set, reports its status
    ROUTER = "router"  # reads its pool's active set, rollout and placement; reports its traffic
    APP = "app"  # an application calling the router; the registry only answers its /v1/whoami
    METRICS = "metrics"  # a scraper: reads /metrics of every loraplane process, and nothing else


POOL_ROLES = (Role.NODE, Role.ROUTER)  # tokens of one pool and no tenant
TIERS = ("interactive", "batch")  # an app key's SLO tier; the first is the default




@dataclass(frozen=True)
class Principal:
    token_id: int
    subject: str
    role: Role
    tenant: str | None  # None for a global admin and for node and router tokens
    pool: str | None = None  # a node or router token's pool
    tier: str | None = None  # an app key's SLO tier
    identity_id: int = 0  # the person or service behind the token; 0 only in hand-made values
    instance_id: str | None = None  # the node or router id a node or router token speaks for
    # A node that presented its pod's service-account token (registry/auth/service_accounts/):
    # no stored token (token_id and identity_id are 0), the pod's uid, and the Unix time the
    # token stops being accepted, which nothing in the database can revoke sooner.
    pod_uid: str | None = None
    expires_at: float | None = None

    @property
    def is_global_admin(self) -> bool:
        return self.role is Role.ADMIN and self.tenant is None

    @property
    def label(self) -> str:
        scope = f"pool {self.pool}" if self.pool else (self.tenant or "*")
        if self.pod_uid is not None:
            return f"{self.subject} ({self.role}@{scope}, pod {self.instance_id}, uid {self.pod_uid})"
        return f"{self.subject} ({self.role}@{scope}, identity {self.identity_id}, token {self.token_id})"

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

    def require_node_of(self, pool: str, roles: tuple[Role, ...] = (Role.NODE,)) -> None:
        """Pass a global admin, or a token of one of `roles` issued for this pool."""
        if self.is_global_admin:
            return
        wanted = " or ".join(roles)
        if self.role not in roles:
            raise Forbidden(f"role '{self.role}' may not do this; it needs a {wanted} token of pool "
                            f"'{pool}'", hint=f"Use the token issued for this pool (loraplane token "
                                              f"create --role {roles[0]} --pool POOL).")
        if self.pool != pool:
            raise Forbidden(f"this {self.role} token belongs to pool '{self.pool}', not '{pool}'",
                            hint="Use the token issued for this pool.")

    def require_instance(self, pool: str, instance_id: str, role: Role) -> None:
        """Pass a global admin, or the token of `role` issued for this pool and this node or
        router id: a leaked token cannot speak for another node of its pool."""
        self.require_node_of(pool, (role,))
        if not self.is_global_admin and self.instance_id is None:
            raise Forbidden(f"this {self.role} token was issued before tokens were bound to one "
                            f"{self.role}", hint=f"Issue a token for {self.role} '{instance_id}' "
                                                 f"(loraplane token create --role {self.role} --pool "
                                                 f"{pool} --instance-id {instance_id}) and revoke this one.")
        if not self.is_global_admin and self.instance_id != instance_id:
            raise Forbidden(f"this {self.role} token is bound to {self.role} "
                            f"'{self.instance_id}', not '{instance_id}'",
                            hint=f"Use the token issued for {self.role} '{instance_id}' "
                                 f"(loraplane token create --role {self.role} --pool {pool} "
                                 f"--instance-id {instance_id}).")

    def require_pool_reader(self, pool: str) -> None:
        """Pass a global admin, or a node or router token of this pool."""
        self.require_node_of(pool, (Role.NODE, Role.ROUTER))

    def require_pool_viewer(self, pool: str) -> None:
        """Pass what may see a pool's nodes (rollout, placement): its router tokens, which route
        by them, and admins, reviewers and uploaders (who see their own tenant's names only). A
        node token may not: the other nodes' vLLM addresses are none of a node's business."""
        if self.role is Role.ROUTER:
            self.require_node_of(pool, (Role.ROUTER,))
        else:
            self.require({Role.ADMIN, Role.REVIEWER, Role.UPLOADER})
