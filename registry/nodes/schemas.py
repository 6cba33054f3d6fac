from __future__ import annotations

from datetime import datetime

from typing import Annotated

from pydantic import AnyHttpUrl, BaseModel, ConfigDict, Field, UrlConstraints

from registry.names import SERVED_NAME
from registry.names import FREE_TEXT

SHA256 = r"^[0-9a-f]{64}$"


class LoadedAdapter(BaseModel):
    model_config = ConfigDict(extra="forbid")
    served_name: str = Field(pattern=SERVED_NAME, max_length=140)
    digest: str = Field(pattern=SHA256)


class NodeFailure(BaseModel):
    model_config = ConfigDict(extra="forbid")
    served_name: str = Field(pattern=SERVED_NAME, max_length=140)
    reason: str = Field(min_length=1, max_length=2000, pattern=FREE_TEXT)


class NodeLimits(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_loras: int = Field(ge=1, le=256)
    max_cpu_loras: int = Field(ge=1, le=4096)
    max_lora_rank: int = Field(ge=1, le=512)


class NodeIncident(BaseModel):
    """Bytes on the node that failed a re-check: replaced or rotted after they were verified."""
    model_config = ConfigDict(extra="forbid")
    served_name: str = Field(pattern=SERVED_NAME, max_length=140)
    kind: str = Field(pattern=r"^[a-z_]{1,32}$", description="e.g. tampered")
    reason: str = Field(min_length=1, max_length=2000, pattern=FREE_TEXT)
    at: datetime


class NodeEngine(BaseModel):
    """What serves on the node: a change here asks every active version to qualify again."""
    model_config = ConfigDict(extra="forbid")
    vllm_version: str = Field(pattern=r"^[A-Za-z0-9.+_-]{1,64}$")
    dtype: str | None = Field(None, pattern=r"^[a-z0-9_]{1,16}$")
    flags: dict[Annotated[str, Field(pattern=r"^[a-z0-9_-]{1,64}$")],
                Annotated[str, Field(max_length=200)] | int | float | bool] = Field(
        default_factory=dict, max_length=64)


class NodeReport(BaseModel):
    model_config = ConfigDict(extra="forbid")
    generation: int = Field(ge=0, le=2**62, description="The active-set generation applied.")
    loaded: list[LoadedAdapter] = Field(max_length=4096)
    failures: list[NodeFailure] = Field(default_factory=list, max_length=4096)
    incidents: list[NodeIncident] = Field(default_factory=list, max_length=64)
    engine: NodeEngine | None = None
    vllm_url: Annotated[AnyHttpUrl, UrlConstraints(max_length=500)]
    limits: NodeLimits


class DriftOut(BaseModel):
    missing: list[str] = Field(description="Desired but not loaded.")
    extra: list[str] = Field(description="Loaded but not desired.")
    wrong_digest: list[str] = Field(description="Loaded under the right name with other bytes.")


class NodeOut(BaseModel):
    node_id: str
    generation: int
    converged: bool
    stale: bool
    seconds_since_report: float
    drift: DriftOut
    failures: list[NodeFailure]
    incidents: list[NodeIncident] = Field(default_factory=list)
    serving: list[str] = Field(description="Desired and loaded with the right digest: the names "
                                           "a router may send to this node.")
    vllm_url: str | None = Field(description="Only for global admins and the pool's nodes: vLLM's "
                                             "runtime endpoints must stay private.")
    limits: dict[str, int] | None
    reported_at: datetime


class RolloutOut(BaseModel):
    pool: str
    generation: int
    nodes_total: int
    nodes_converged: int
    nodes_stale: int
    nodes: list[NodeOut]
