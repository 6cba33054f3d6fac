from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, model_validator
from pydantic_core import PydanticCustomError

from registry.names import NAME_PATTERN

# One line of text people read: no control characters (newlines and tabs included).
DISPLAY_NAME = r"^[^\x00-\x1f\x7f]*$"
# As the settings' defaults (LORAPLANE_TENANT_MAX_*): at least one, at most a million.
QUOTA_BOUNDS: dict[str, Any] = {"ge": 1, "le": 1_000_000}
SLUG_IS_FIXED = (
    "a tenant's name never changes: it is the slug in served names (tenant/adapter@N), signed "
    "active sets, attestations and audit subjects. Send display_name to rename the tenant")


class TenantCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # The pattern is documented here and enforced by check_name, which gives the clearer error.
    name: str = Field(max_length=64, json_schema_extra={"pattern": NAME_PATTERN.pattern},
                      description="The slug in URLs and served names (tenant/adapter@N). It never "
                                  "changes; display_name may.")
    display_name: str | None = Field(default=None, min_length=1, max_length=128,
                                     pattern=DISPLAY_NAME,
                                     description="What people read; defaults to the name.")
    max_waiting_evaluations: int | None = Field(
        default=None, **QUOTA_BOUNDS, description=(
            "How many of the tenant's evaluations may wait or run at once; null: the deployment's "
            "LORAPLANE_TENANT_MAX_WAITING_EVALUATIONS."))
    max_suites: int | None = Field(default=None, **QUOTA_BOUNDS, description=(
        "How many eval suites the tenant may own; null: the deployment's "
        "LORAPLANE_TENANT_MAX_SUITES."))


class TenantUpdate(BaseModel):
    """Only the fields sent change; a quota sent as null goes back to the deployment default."""

    model_config = ConfigDict(extra="forbid")
    display_name: str | None = Field(default=None, min_length=1, max_length=128,
                                     pattern=DISPLAY_NAME, description=(
                                         "The rename: what people read. null: show the name."))
    disabled: StrictBool | None = Field(default=None, description=(
        "true refuses every token of the tenant and the issuing of new ones; false restores "
        "them; omitted or null: unchanged."))
    max_waiting_evaluations: int | None = Field(default=None, **QUOTA_BOUNDS, description=(
        "null: LORAPLANE_TENANT_MAX_WAITING_EVALUATIONS."))
    max_suites: int | None = Field(default=None, **QUOTA_BOUNDS, description=(
        "null: LORAPLANE_TENANT_MAX_SUITES."))

    @model_validator(mode="before")
    @classmethod
    def _name_is_fixed(cls, data: Any) -> Any:
        # Said plainly, rather than as an unknown field.
        if isinstance(data, dict) and "name" in data:
            raise PydanticCustomError("slug_is_fixed", SLUG_IS_FIXED)
        return data


class QuotaOut(BaseModel):
    own: int | None = Field(description="The tenant's own quota; null: the deployment default.")
    default: int = Field(description="The deployment default (LORAPLANE_TENANT_MAX_*).")
    effective: int = Field(description="What applies: the tenant's own, else the default.")


class TenantQuotas(BaseModel):
    max_waiting_evaluations: QuotaOut
    max_suites: QuotaOut


class TenantOut(BaseModel):
    name: str = Field(description="The slug; it never changes.")
    display_name: str | None
    disabled: bool
    disabled_at: datetime | None
    require_signed_uploads: bool
    quotas: TenantQuotas
    adapters: int = Field(description="How many adapters the tenant has.")
    active_tokens: int = Field(description="Its tokens neither revoked nor expired.")
    created_at: datetime


class TenantPage(BaseModel):
    items: list[TenantOut]
    next_cursor: str | None = None
