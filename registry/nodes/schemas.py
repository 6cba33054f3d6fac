from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import AfterValidator, AnyHttpUrl, BaseModel, ConfigDict, Field, UrlConstraints

from registry.names import FREE_TEXT, SERVED_NAME
from registry.requalification.schemas import EngineDeclaration

SHA256 = r"^[0-9a-f]{64}$"


def _plain_address(url: AnyHttpUrl) -> AnyHttpUrl:
    if url.username or url.password or url.query or url.fragment:
        raise ValueError("a vLLM address is scheme://host:port[/path], without credentials, query "
                         "or fragment")
    return url


NodeAddressUrl = Annotated[AnyHttpUrl, UrlConstraints(max_length=500), AfterValidator(_plain_address)]


class NodeAddressIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    vllm_url: NodeAddressUrl = Field(description="The node's vLLM, as routers reach it.")


class NodeAddressOut(BaseModel):
    pool: str
    node_id: str
    vllm_url: str
    bound_by: str
    bound_at: datetime


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


class NodeEngine(EngineDeclaration):
    """What serves on the node: a change here asks every active version to qualify again, once a
    quorum or an operator confirms it (the fields an operator declares it with)."""


class NodeReport(BaseModel):
    model_config = ConfigDict(extra="forbid")
    generation: int = Field(ge=0, le=2**62, description="The active-set generation applied.")
    loaded: list[LoadedAdapter] = Field(max_length=4096)
    failures: list[NodeFailure] = Field(default_factory=list, max_length=4096)
    incidents: list[NodeIncident] = Field(default_factory=list, max_length=64)
    engine: NodeEngine | None = None
    vllm_url: Annotated[AnyHttpUrl, UrlConstraints(max_length=500)] | None = Field(None, description=(
        "Ignored: a node's address is the one an admin bound when issuing its token."))
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
    vllm_url: str | None = Field(description=(
        "The address bound to the node when its token was issued, the only one routers send to. "
        "Only for global admins and the pool's routers: vLLM's runtime endpoints must stay private."))
    address: Literal["bound", "unbound", "seal_broken"] = Field(description=(
        "unbound: no admin bound this node's address; seal_broken: the binding was changed "
        "outside the registry. Either way routers send the node nothing."))
    limits: dict[str, int] | None
    reported_at: datetime


class RolloutOut(BaseModel):
    pool: str
    generation: int
    nodes_total: int
    nodes_converged: int
    nodes_stale: int
    nodes: list[NodeOut]
