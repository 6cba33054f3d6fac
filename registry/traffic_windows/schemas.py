"""What a router reports of each served name and alias between two of its traffic reports."""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from registry.names import SERVED_NAME

# Histogram bounds of the routers' TTFT and latency windows, in seconds (the router's own
# LATENCY_BUCKETS; a report with others is refused). One more bucket counts what lies above.
WINDOW_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
ERROR_CLASSES = ("server_error", "timeout", "unavailable", "broken")
MAX_WINDOWS = 512  # (served name, alias) pairs in one report
_ALIAS = r"^[a-z][a-z0-9-]{0,31}$"
REPORT_ID = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
_MAX_COUNT = 10**9


class WindowDelta(BaseModel):
    """What one router saw of one served name under one alias since its last report."""

    model_config = ConfigDict(extra="forbid")
    served_name: str = Field(max_length=140, pattern=SERVED_NAME)
    alias: str = Field(max_length=32, pattern=_ALIAS)
    requests: int = Field(ge=0, le=_MAX_COUNT)
    errors: dict[str, int] = Field(default_factory=dict, max_length=len(ERROR_CLASSES))
    completion_tokens: int = Field(0, ge=0, le=10**12)
    busy_s: float = Field(0, ge=0, le=1e9)
    ttft_buckets: list[int] = Field(min_length=len(WINDOW_BUCKETS) + 1, max_length=len(WINDOW_BUCKETS) + 1)
    latency_buckets: list[int] = Field(min_length=len(WINDOW_BUCKETS) + 1, max_length=len(WINDOW_BUCKETS) + 1)
    shadow_compared: int = Field(0, ge=0, le=_MAX_COUNT, description=(
        "Shadowed requests whose production answer came back and was compared."))
    shadow_agreed: int = Field(0, ge=0, le=_MAX_COUNT, description="Of those, answers that agreed.")
    cold_requests: int | None = Field(None, ge=0, le=_MAX_COUNT, description=(
        "Of the answered requests, those sent to a node that did not hold the adapter and loaded "
        "it on demand (a pool whose overflow is on_demand). Given with cold_ttft_buckets."))
    cold_ttft_buckets: list[int] | None = Field(None, min_length=len(WINDOW_BUCKETS) + 1,
                                                max_length=len(WINDOW_BUCKETS) + 1, description=(
        "Their TTFTs, in the same buckets as ttft_buckets (each count at most that bucket's)."))

    @field_validator("errors")
    @classmethod
    def _known_classes(cls, errors: dict[str, int]) -> dict[str, int]:
        for name, count in errors.items():
            if name not in ERROR_CLASSES:
                raise ValueError(f"unknown error class {name[:40]!r}; one of {', '.join(ERROR_CLASSES)}")
            if not 0 <= count <= _MAX_COUNT:
                raise ValueError(f"the count of {name} must be between 0 and {_MAX_COUNT}")
        return errors

    @field_validator("ttft_buckets", "latency_buckets", "cold_ttft_buckets")
    @classmethod
    def _counts(cls, buckets: list[int] | None) -> list[int] | None:
        if buckets is not None and any(not 0 <= b <= _MAX_COUNT for b in buckets):
            raise ValueError(f"bucket counts must be between 0 and {_MAX_COUNT}")
        return buckets

    @model_validator(mode="after")
    def _consistent(self) -> WindowDelta:
        answered = self.requests - sum(self.errors.values())
        if answered < 0:
            raise ValueError(f"{self.served_name}: more errors than requests")
        # Each answered request is in both histograms, and a failed one in neither: a window
        # whose requests carry no timings would leave its p95s unjudged.
        if sum(self.ttft_buckets) != answered or sum(self.latency_buckets) != answered:
            raise ValueError(f"{self.served_name}: the histograms must count each of the {answered} "
                             "answered requests (requests minus errors) once")
        self._consistent_cold(answered)
        if self.shadow_agreed > self.shadow_compared:
            raise ValueError(f"{self.served_name}: more shadow agreements than comparisons")
        if not math.isfinite(self.busy_s):
            raise ValueError("busy_s must be finite")
        return self

    def _consistent_cold(self, answered: int) -> None:
        if (self.cold_requests is None) != (self.cold_ttft_buckets is None):
            raise ValueError(f"{self.served_name}: give cold_requests and cold_ttft_buckets together")
        if self.cold_requests is None or self.cold_ttft_buckets is None:
            return
        if self.cold_requests > answered:
            raise ValueError(f"{self.served_name}: more cold requests than the {answered} answered")
        if sum(self.cold_ttft_buckets) != self.cold_requests:
            raise ValueError(f"{self.served_name}: cold_ttft_buckets must count each cold request once")
        if any(cold > every for cold, every in zip(self.cold_ttft_buckets, self.ttft_buckets, strict=True)):
            raise ValueError(f"{self.served_name}: a cold_ttft_buckets count exceeds its ttft_buckets count")


RESIDENCY_WINDOW_S = 900


class ResidencyOut(BaseModel):
    """Of the requests routers answered over the last `window_s`: how many found their adapter
    resident, and what a cold load costs. TTFT quantiles are interpolated in the routers'
    histogram buckets; None where no request was counted."""

    pool: str
    overflow: str
    window_s: int
    answered: int = Field(description="Requests answered, the tenant's own for a tenant token.")
    cold_requests: int = Field(description="Of those, sent to a node that loaded the adapter on demand.")
    resident_hit_ratio: float | None = Field(description="1 - cold_requests / answered.")
    cold_loads_per_minute: float
    cold_ttft_p50_ms: float | None
    cold_ttft_p99_ms: float | None
    warm_ttft_p50_ms: float | None
    warm_ttft_p99_ms: float | None
