"""The agent's Prometheus metrics, on its own registry so tests and embedding stay clean."""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry()
ADAPTERS_LOADED = Gauge("loraplane_agent_adapters_loaded", "Adapters this agent has loaded in vLLM",
                        registry=REGISTRY)
LOAD_SECONDS = Histogram("loraplane_agent_load_seconds", "Download (if needed) and load of one adapter",
                         buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
                         registry=REGISTRY)
PASSES = Counter("loraplane_agent_reconcile_passes_total", "Reconcile passes", registry=REGISTRY)
FAILURES = Counter("loraplane_agent_failures_total", "Failures by reason", ["reason"], registry=REGISTRY)
GENERATION = Gauge("loraplane_agent_generation_applied", "Active-set generation last applied",
                   registry=REGISTRY)
DOWNLOADS = Counter("loraplane_agent_downloads_total",
                    "Downloads of a version's files into the cache, begun", registry=REGISTRY)
RESOLVER_ANSWERS = Counter("loraplane_agent_resolver_answers_total",
                           "Answers to vLLM's resolver: resolved, unknown (not an approved version "
                           "of the set), unavailable (approved, but not fetched in time), refused "
                           "(bad bytes), bad_request", ["answer"], registry=REGISTRY)
RESOLVE_SECONDS = Histogram("loraplane_agent_resolve_seconds", "From vLLM's resolver question to the "
                            "verified folder handed back: the fetch (when the cache lacks it), the "
                            "re-hash and the sealed folder, for answers that resolved",
                            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
                            registry=REGISTRY)
PASS_SECONDS = Histogram("loraplane_agent_pass_seconds", "One reconcile pass over the node's part of the "
                         "active set: parsing and proving its entries, asking vLLM, loads and unloads",
                         buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
                         registry=REGISTRY)
SINCE_SYNC = Gauge("loraplane_agent_seconds_since_sync",
                   "Seconds since the registry last answered the long-poll", registry=REGISTRY)


class SyncClock:
    def __init__(self) -> None:
        self.last = time.monotonic()
        SINCE_SYNC.set_function(self.age)

    def mark(self) -> None:
        self.last = time.monotonic()

    def age(self) -> float:
        return time.monotonic() - self.last
