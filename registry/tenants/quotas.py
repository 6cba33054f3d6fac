"""Which quota applies to a tenant: its own when a global admin set one, else the deployment's
default from settings. Each says where it comes from, for the messages that refuse past it."""

from __future__ import annotations

from dataclasses import dataclass

from registry.settings import get_settings
from registry.tables import Tenant

TENANT_QUOTA = "tenant quota"  # set on the tenant by a global admin


@dataclass(frozen=True)
class Quota:
    limit: int
    source: str  # TENANT_QUOTA, or the setting's variable
    more: str  # how to get a larger one


def waiting_evaluations(tenant: Tenant) -> Quota:
    return _quota(tenant, tenant.max_waiting_evaluations,
                  get_settings().tenant_max_waiting_evaluations,
                  "LORAPLANE_TENANT_MAX_WAITING_EVALUATIONS", "--max-waiting-evaluations")


def suites(tenant: Tenant) -> Quota:
    return _quota(tenant, tenant.max_suites, get_settings().tenant_max_suites,
                  "LORAPLANE_TENANT_MAX_SUITES", "--max-suites")


def _quota(tenant: Tenant, own: int | None, default: int, variable: str, option: str) -> Quota:
    # Either way a global admin may give this tenant a quota of its own.
    more = f"ask a global admin for a larger one (loraplane tenant quota {tenant.name} {option} N)"
    return Quota(own, TENANT_QUOTA, more) if own is not None else Quota(default, variable, more)
