"""Prometheus metrics of the registry process. Under `loraplane serve --workers N` each worker
process writes its values to files in PROMETHEUS_MULTIPROC_DIR, and a scrape reads them all."""

from __future__ import annotations

import os
import time

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from starlette.types import ASGIApp, Receive, Scope, Send

REQUESTS = Counter("loraplane_http_requests_total", "HTTP requests", ["method", "route", "status"])
LATENCY = Histogram(
    "loraplane_http_request_seconds", "HTTP request latency", ["method", "route"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
UPLOADS = Counter("loraplane_uploads_total", "Accepted adapter uploads", ["outcome"])
UPLOAD_REFUSALS = Counter("loraplane_upload_refusals_total", "Refused adapter uploads", ["reason"])
UPLOADS_IN_PROGRESS = Gauge(
    "loraplane_uploads_in_progress", "Uploads this process is handling, by stage: awaiting_body "
    "(headers read, no body yet: no upload slot held) or receiving (an upload slot held)",
    ["tenant", "stage"], multiprocess_mode="livesum",
)
LONG_POLLS = Gauge("loraplane_active_set_long_polls",
                   "Active-set long-polls this process holds, waiting for a change", ["pool"],
                   multiprocess_mode="livesum")
BODY_RENDERS = Counter("loraplane_active_set_renders_total", "Active-set bodies rendered: once per "
                       "generation for the whole set, the routers' body and each node's part while "
                       "the set is spread, however many long-polls a change wakes", ["pool"])
TOKEN_RECHECKS = Counter("loraplane_active_set_token_rechecks_total", "Queries that checked again "
                         "the tokens of woken long-polls: one per wake-up, not one per node")
K8S_TOKENS = Counter("loraplane_k8s_token_checks_total", "Pods' service-account tokens checked: "
                     "accepted, or refused by reason", ["outcome"])
K8S_KEY_FETCHES = Counter("loraplane_k8s_key_fetches_total", "Reads of the cluster issuer's keys: "
                          "fetched, read (from the file) or failed", ["outcome"])


def exposition() -> bytes:
    """Every worker process's values when several share the port, else this process's."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        MultiProcessCollector(registry)
        return generate_latest(registry)
    return generate_latest(REGISTRY)


class MetricsMiddleware:
    """Count and time requests by route template, so label values stay bounded."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = {"code": 500}

        async def record_status(message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        started = time.perf_counter()
        try:
            await self.app(scope, receive, record_status)
        finally:
            route = getattr(scope.get("route"), "path", "unmatched")
            method = scope["method"]
            REQUESTS.labels(method, route, str(status["code"])).inc()
            LATENCY.labels(method, route).observe(time.perf_counter() - started)
