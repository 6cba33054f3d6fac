"""Prometheus metrics per served name (`tenant/name@N`) and alias. Labels only ever hold names
from the active set, node ids and fixed codes, never what a client typed."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry()
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)

REQUESTS = Counter("loraplane_router_requests_total", "Requests answered by a node.",
                   ["served_name", "alias", "node", "status"], registry=REGISTRY)
TOKENS = Counter("loraplane_router_tokens_total", "Tokens: prompt and completion (streamed answers "
                 "count their events as completion tokens).", ["served_name", "alias", "kind"],
                 registry=REGISTRY)
TTFT = Histogram("loraplane_router_ttft_seconds", "Time to the first byte of the answer.",
                 ["served_name", "alias"], buckets=LATENCY_BUCKETS, registry=REGISTRY)
LATENCY = Histogram("loraplane_router_latency_seconds", "Time to the end of the answer.",
                    ["served_name", "alias"], buckets=LATENCY_BUCKETS, registry=REGISTRY)
ERRORS = Counter("loraplane_router_errors_total", "Requests refused or failed, by code.",
                 ["served_name", "code"], registry=REGISTRY)
MISSES = Counter("loraplane_router_misses_total", "Requests sent to a node where the adapter was "
                 "not resident (by the router's estimate), which makes vLLM load it.",
                 ["served_name", "node"], registry=REGISTRY)
COLD_REQUESTS = Counter("loraplane_router_cold_requests_total", "Requests sent to a node not known to "
                        "hold their adapter, to load it on demand (a pool whose overflow is "
                        "on_demand), by node and outcome: answered, not_resolved (the node's resolver "
                        "gave vLLM no adapter) or another failure.", ["node", "outcome"], registry=REGISTRY)
RESIDENCY_TTFT = Histogram("loraplane_router_residency_ttft_seconds", "Time to the first byte of answers "
                           "with status 200, by residency: resident (a node known to hold the adapter) or cold "
                           "(sent to one that loads it on demand).", ["residency"],
                           buckets=LATENCY_BUCKETS, registry=REGISTRY)
RETRIES = Counter("loraplane_router_retries_total", "Requests tried again on another node because "
                  "one failed before its first byte.", ["node", "reason"], registry=REGISTRY)
SHADOW = Counter("loraplane_router_shadow_total", "Canary requests also answered by production, by "
                 "outcome: agreed, differed, unanswered, skipped.", ["served_name", "result"],
                 registry=REGISTRY)
QUEUED = Histogram("loraplane_router_queue_seconds", "Wait for an admission slot.", ["tier"],
                   buckets=LATENCY_BUCKETS, registry=REGISTRY)
INFLIGHT = Gauge("loraplane_router_inflight", "Requests being forwarded.", ["tier"], registry=REGISTRY)
GENERATION = Gauge("loraplane_router_generation", "The active-set generation followed.", registry=REGISTRY)
NODES = Gauge("loraplane_router_nodes", "Nodes with an address (bound by an admin, or a ready pod of "
              "the pool's EndpointSlices) and a report, which the router may send to.", registry=REGISTRY)
ENDPOINTS = Gauge("loraplane_router_endpoints", "Ready pods listed in the pool's EndpointSlices "
                  "(LORAPLANE_ROUTER_NODE_ADDRESSES=kubernetes).", registry=REGISTRY)
ENDPOINTS_STALE = Gauge("loraplane_router_endpoints_stale", "1 while the Kubernetes API cannot be read and "
                        "the router routes on the endpoints it listed last.", registry=REGISTRY)
ENDPOINT_WATCH_FAILURES = Counter("loraplane_router_endpoint_watch_failures_total", "Lists and watches of "
                                  "the pool's EndpointSlices that failed, by reason: unreachable, refused "
                                  "(an API error such as 403), expired (410 Gone: listed again), invalid.",
                                  ["reason"], registry=REGISTRY)
ENGINE_CHECKS = Counter("loraplane_router_engine_checks_total", "Nodes' engines asked what they hold, "
                        "by outcome: confirmed (every name its agent reports), refuted (some are not "
                        "loaded from their digest), unreachable.", ["node", "outcome"], registry=REGISTRY)
REFUSED_SETS = Counter("loraplane_router_refused_active_sets_total", "Active sets refused because their "
                       "signed generation was older than one the router routed on (an old set put "
                       "back into the registry's database).", registry=REGISTRY)
