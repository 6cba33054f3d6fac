from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field


class EngineOut(BaseModel):
    sha256: str = Field(description="Fingerprint: sha256 of the canonical vllm_version, dtype and "
                                    "flags.")
    vllm_version: str | None
    dtype: str | None
    flags: dict[str, Any] | None = Field(description="Only for global admins and the pool's routers.")
    since: str | None = None


class PendingEngineOut(EngineOut):
    nodes: list[str] = Field(description="The live nodes that report it.")
    nodes_needed: int = Field(description="Reporting nodes that would confirm it (a majority of the "
                                          "live ones, at least two), unless an operator declares it.")


class EngineDeclaration(BaseModel):
    """The engine a pool's nodes run, as they report it (GET .../requalifications lists pending
    ones with these fields)."""
    model_config = ConfigDict(extra="forbid")
    vllm_version: str = Field(pattern=r"^[A-Za-z0-9.+_-]{1,64}$")
    dtype: str | None = Field(None, pattern=r"^[a-z0-9_]{1,16}$")
    flags: dict[Annotated[str, Field(pattern=r"^[a-z0-9_-]{1,64}$")],
                Annotated[str, Field(max_length=200)] | int | float | bool] = Field(
        default_factory=dict, max_length=64)


class SuiteProgress(BaseModel):
    suite: str
    evaluation_id: int | None = Field(description="The version's latest evaluation of the suite.")
    state: str | None
    counts: bool = Field(description="It passed and finished after the mark.")


class MarkOut(BaseModel):
    served_name: str
    tenant: str
    adapter: str
    version: int
    cause: str = Field(description="engine | base_config")
    reason: str
    change: dict[str, Any] = Field(description="From and to: engines, or config digests.")
    marked_by: str
    marked_at: datetime
    suspended: bool = Field(description=(
        "Out of the active set until it qualifies again (suspend policy; never every version at once)."))
    suites: list[SuiteProgress]


class VersionMarkOut(MarkOut):
    pool: str
    policy: str


class RequalificationsOut(BaseModel):
    pool: str
    policy: str = Field(description="keep_serving: marked versions serve until they qualify again; "
                                    "suspend: they leave the active set until then.")
    qualified_engine: EngineOut | None = Field(
        description="The engine the versions were last qualified on; none until one is confirmed.")
    also_qualified: list[EngineOut] = Field(description="Earlier qualified engines that live nodes "
                                                        "still run.")
    qualified_config_sha256: str | None
    base_config_sha256: str
    declared_engines: list[str] = Field(default_factory=list, description=(
        "Fingerprints an operator declared: a node reporting one starts a round on its own."))
    pending_engines: list[PendingEngineOut] = Field(default_factory=list, description=(
        "New engines live nodes report that are not confirmed yet, so mark nothing (global "
        "admins and routers only)."))
    marks: list[MarkOut]
