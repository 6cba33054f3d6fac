from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class AliasWeight(BaseModel):
    alias: str
    weight: int = Field(description=(
        "Percent of `tenant/name` traffic this alias receives: production gets what its canary "
        "does not; other aliases are reached only by name and weigh 0."))
    shadow: float = Field(0.0, description=(
        "For a canary under analysis: the share of its requests that routers also send to "
        "production, out of band, to compare the two answers."))


class ArtifactFile(BaseModel):
    name: str
    sha256: str
    size: int
    url: str = Field(description="Presigned; downloads without other credentials until it expires.")


class ActiveEntry(BaseModel):
    served_name: str = Field(description="The name inside vLLM: tenant/name@N, never reused.")
    tenant: str
    adapter: str
    version: int
    digest: str = Field(description="sha256 of the version's manifest (its files and their sha256).")
    rank: int
    size_bytes: int
    aliases: list[AliasWeight]
    retiring: bool = Field(description=(
        "No alias points here any more; it stays loaded until traffic has moved."))
    files: list[ArtifactFile]
    attestation: dict[str, Any] | None = Field(None, description=(
        "The signed statement that this version may serve in this pool: a DSSE envelope holding "
        "an in-toto statement about its digest and files (see docs/security.md). Nodes refuse "
        "an entry whose attestation does not verify."))
    nodes: list[str] | None = Field(None, description=(
        "The nodes the placement gives this version, when the set outgrows one node; None while "
        "every node holds every version."))
    on_demand: bool = Field(False, description=(
        "Under the pool's overflow on_demand: loaded only when a request names it (vLLM's "
        "resolver asks the node's agent), never ahead. In a node's part (?node=), every version "
        "this node is not placed to hold; in the whole set, the versions no node is placed to hold."))


class ActiveSet(BaseModel):
    pool: str
    base_model: str
    generation: int
    limits: dict[str, int]
    node: str | None = Field(None, description=(
        "The node whose part this is (?node=), while the set is spread over the nodes; None when "
        "it is the whole set, which every node holds while it fits."))
    overflow: str = Field("refuse", description=(
        "The pool's overflow: refuse (every version resident) or on_demand (the long tail: any "
        "node may be sent a version it does not hold, and loads it at the first request)."))
    entries: list[ActiveEntry]
    urls_expire_in: int
    signed: dict[str, Any] | None = Field(None, description=(
        "The pool's whole active set as the registry signed it at this generation's change: a "
        "DSSE envelope (payload type application/vnd.loraplane.active-set+json) holding every "
        "alias with its version, digest and weight, and the versions retiring. Signed with the "
        "attestation key, so a trust-bundle holder can check that the entries and weights above "
        "are the ones the registry decided (see docs/security.md)."))
