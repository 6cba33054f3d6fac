"""Follow the pool's EndpointSlices through the Kubernetes API: list them, then watch from the
listing's resourceVersion; list afresh every RELIST_S (which also ends a watch whose connection
went silent without closing) and after any failure. A fresh listing replaces everything held, so
a slice deleted while no watch ran is gone too; that is also the answer to 410 Gone (the
resourceVersion was compacted away).

While the API cannot be read, the router routes on the endpoints it listed last: an API server
restart must not take every node out of rotation. The outage is logged once and shows in the
metrics (loraplane_router_endpoints_stale, loraplane_router_endpoint_watch_failures_total).
What is held is bounded: one small record per endpoint, for at most MAX_SLICES slices."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from pathlib import Path

import httpx2
import msgspec
from lightkube import AsyncClient, KubeConfig
from lightkube.config.models import Cluster, User
from lightkube.core.exceptions import ApiError, ConfigError, NotReadyError
from lightkube.core.client import LabelSelector
from lightkube.resources.discovery_v1 import EndpointSlice

from serving.router import metrics
from serving.router.endpoint_slices import SERVICE_LABEL, PodEndpoint, addresses, pod_endpoints
from serving.router.settings import SERVICE_ACCOUNT, in_cluster_url

log = logging.getLogger("loraplane.router")
WATCH_S = 240  # the API server ends each watch after this; lightkube starts it again where it was
RELIST_S = 300
API_TIMEOUT_S = 10  # connecting, and each listing
BACKOFF_S = 0.25  # the first pause after a failure is up to twice this
BACKOFF_MAX_S = 30
HEALTHY_S = 30  # a failure this long after a good listing starts the pauses small again
MAX_SLICES = 1000  # a service's slices hold up to 1000 endpoints each
FAILURES = (httpx2.HTTPError, msgspec.MsgspecError, ConfigError, ValueError, OSError)


def api_client(api_url: str | None, account: Path = SERVICE_ACCOUNT) -> AsyncClient:
    """The API at `api_url`, else the pod's own; with the pod's service account (its token, read
    again when it rotates, and its CA) over https://, and no credentials over plain http://."""
    server = api_url or in_cluster_url()
    if server.startswith("https://") and (account / "token").is_file():
        config = KubeConfig.from_one(cluster=Cluster(server=server, certificate_auth=str(account / "ca.crt")),
                                     user=User(token_file=str(account / "token")))
    else:
        config = KubeConfig.from_one(cluster=Cluster(server=server), user=User())
    # Not through an HTTP proxy from the environment: the API says where prompts go.
    return AsyncClient(config, timeout=httpx2.Timeout(API_TIMEOUT_S), trust_env=False)


class EndpointWatch:
    def __init__(self, client: AsyncClient, namespace: str, service: str, port_name: str, scheme: str,
                 on_change: Callable[[dict[str, str]], None]) -> None:
        self.client, self.namespace, self.service = client, namespace, service
        self.port_name, self.scheme, self.on_change = port_name, scheme, on_change
        self.slices: dict[str, tuple[PodEndpoint, ...]] = {}  # slice name -> its endpoints
        self.addresses: dict[str, str] = {}  # node id -> address, as last published
        self.lost_since: float | None = None  # when the API stopped answering, while it does not
        self._listed_at: float | None = None
        self._failures = 0

    @property
    def _labels(self) -> LabelSelector:
        return {SERVICE_LABEL: self.service}

    async def run(self) -> None:
        while True:
            deadline = asyncio.timeout(RELIST_S)
            try:
                async with deadline:
                    await self._list_and_watch()
            except (*FAILURES, TimeoutError) as error:
                if not (isinstance(error, TimeoutError) and deadline.expired()):
                    await asyncio.sleep(self._failed(error))

    async def _list_and_watch(self) -> None:
        listing = self.client.list(EndpointSlice, namespace=self.namespace, labels=self._labels)
        slices: dict[str, tuple[PodEndpoint, ...]] = {}
        async for slice_ in listing:
            self._take(slices, slice_)
        try:
            version: str | None = listing.resourceVersion
        except NotReadyError:  # a listing without one: watch from now
            version = None
        self.slices = slices
        self._listed()
        self._publish()
        async for kind, slice_ in self.client.watch(EndpointSlice, namespace=self.namespace, labels=self._labels,
                                                    resource_version=version, server_timeout=WATCH_S):
            if kind == "DELETED":
                self.slices.pop((slice_.metadata.name if slice_.metadata else None) or "", None)
            elif kind in ("ADDED", "MODIFIED"):
                self._take(self.slices, slice_)
            self._publish()

    def _take(self, slices: dict[str, tuple[PodEndpoint, ...]], slice_: EndpointSlice) -> None:
        meta = slice_.metadata
        if meta is None or not meta.name:
            return
        if (meta.labels or {}).get(SERVICE_LABEL) != self.service:
            slices.pop(meta.name, None)  # not, or no longer, this service's (as the API filters)
            return
        if meta.name not in slices and len(slices) >= MAX_SLICES:
            log.error("service %s/%s has more than %d EndpointSlices: slice %s is not followed",
                      self.namespace, self.service, MAX_SLICES, meta.name)
            return
        slices[meta.name] = pod_endpoints(slice_, self.port_name, self.scheme)

    def _publish(self) -> None:
        now = addresses(self.slices)
        if now == self.addresses:
            return
        came = sorted(set(now) - set(self.addresses))
        went = sorted(set(self.addresses) - set(now))
        moved = sorted(n for n in set(now) & set(self.addresses) if now[n] != self.addresses[n])
        log.info("pods of %s/%s: %d ready; came %s, went %s, moved %s", self.namespace, self.service,
                 len(now), _few(came), _few(went), _few(moved))
        self.addresses = now
        metrics.ENDPOINTS.set(len(now))
        self.on_change(dict(now))

    def _listed(self) -> None:
        self._listed_at = time.monotonic()
        if self.lost_since is not None:
            log.warning("the EndpointSlices of %s/%s are listed again, after %.0f s", self.namespace,
                        self.service, self._listed_at - self.lost_since)
            self.lost_since = None
        metrics.ENDPOINTS_STALE.set(0)

    def _failed(self, error: BaseException) -> float:
        """Log and count `error`; the pause before listing again."""
        now = time.monotonic()
        if self._listed_at is not None and now - self._listed_at >= HEALTHY_S:
            self._failures = 0
        self._listed_at = None
        self._failures = min(self._failures + 1, 16)  # past the longest pause: no larger number
        reason = _reason(error)
        metrics.ENDPOINT_WATCH_FAILURES.labels(reason).inc()
        if reason == "expired":
            log.info("the EndpointSlices' resourceVersion expired (410 Gone): listing them again")
        elif self.lost_since is None:
            self.lost_since = now
            metrics.ENDPOINTS_STALE.set(1)
            log.warning("cannot read the EndpointSlices of %s/%s (%s: %s); routing on the %d ready "
                        "pods listed last until it can", self.namespace, self.service,
                        type(error).__name__, str(error)[:300], len(self.addresses))
        else:
            log.debug("still cannot read the EndpointSlices: %s: %s", type(error).__name__, error)
        return random.uniform(0, min(BACKOFF_MAX_S, BACKOFF_S * 2**self._failures))


def _reason(error: BaseException) -> str:
    if isinstance(error, ApiError):
        return "expired" if error.status.code == 410 else "refused"
    if isinstance(error, httpx2.HTTPStatusError | ConfigError):
        return "refused"
    if isinstance(error, msgspec.MsgspecError | ValueError):
        return "invalid"
    return "unreachable"


def _few(names: list[str]) -> str:
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "") or "none"
