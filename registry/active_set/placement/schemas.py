from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from registry.names import SERVED_NAME
from registry.traffic_windows.schemas import MAX_WINDOWS, REPORT_ID, WindowDelta

MAX_NAMES = 4096
_SERVED = re.compile(SERVED_NAME)


class TrafficReport(BaseModel):
    model_config = ConfigDict(extra="forbid")
    requests_per_s: dict[str, float] = Field(
        max_length=MAX_NAMES, description="Recent requests per second by served name (tenant/name@N).")
    report_id: str | None = Field(None, pattern=REPORT_ID, description=(
        "Names the windows below (a UUID): a report sent again under the same id counts once."))
    windows: list[WindowDelta] = Field(default_factory=list, max_length=MAX_WINDOWS, description=(
        "What the router saw of each served name and alias since its last report taken: what "
        "canary analysis reads."))

    @model_validator(mode="after")
    def _windows_named(self) -> TrafficReport:
        if self.windows and self.report_id is None:
            raise ValueError("windows need a report_id")
        return self

    @field_validator("requests_per_s")
    @classmethod
    def _check(cls, rates: dict[str, float]) -> dict[str, float]:
        for name, rate in rates.items():
            if len(name) > 140 or not _SERVED.fullmatch(name):
                raise ValueError(f"{name[:150]!r} is not a served name (tenant/name@N)")
            if not 0 <= rate <= 1e6:  # also refuses NaN
                raise ValueError(f"the rate of {name} must be between 0 and 1000000")
        return rates


class PlacedAdapter(BaseModel):
    served_name: str
    traffic_share: float = Field(description=(
        "Its share of the recent requests (0-1): of the whole pool's, or for a tenant token, of its "
        "own tenant's."))
    replicas: int
    nodes: list[str] = Field(description="Nodes meant to hold it.")
    draining_on: list[str] = Field(description="Nodes that still hold it while others load it.")


class PlacedNode(BaseModel):
    node_id: str
    capacity: int | None = Field(description=(
        "Adapters it keeps resident (its max_cpu_loras, at most the pool's); not shown to tenant tokens."))
    live: bool = Field(description="False: it stopped reporting, and its part moves at the next change.")
    targets: list[str]
    draining: list[str]


class PlacementOut(BaseModel):
    pool: str
    generation: int
    mode: str = Field(description="'everywhere' while every node holds the whole set, else 'spread'.")
    adapters: list[PlacedAdapter]
    nodes: list[PlacedNode]
    unplaced: list[str] = Field(description="Versions no node has room for.")
