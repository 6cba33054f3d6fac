from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field


class EngineOut(BaseModel):
    sha256: str = Field(description="Fingerprint: sha256 of the canonical vllm_version, dtype and "
                                    "flags.")
    vllm_version: str | None
    dtype: str | None
    flags: dict[str, Any] | None = Field(description="Only for global admins and the pool's routers.")
    since: str | None = None


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
    suspended: bool = Field(description="Out of the active set until it qualifies again.")
    suites: list[SuiteProgress]


class VersionMarkOut(MarkOut):
    pool: str
    policy: str


class RequalificationsOut(BaseModel):
    pool: str
    policy: str = Field(description="keep_serving: marked versions serve until they qualify again; "
                                    "suspend: they leave the active set until then.")
    qualified_engine: EngineOut | None = Field(
        description="The engine the versions were last qualified on; none until a node reports one.")
    also_qualified: list[EngineOut] = Field(description="Earlier qualified engines that live nodes "
                                                        "still run.")
    qualified_config_sha256: str | None
    base_config_sha256: str
    marks: list[MarkOut]
