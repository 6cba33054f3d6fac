"""The router process: follow the pool's active set (long-poll) and its nodes' reports, and serve
the OpenAI API on them."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp
import uvicorn
from prometheus_client import start_http_server
from tenacity import AsyncRetrying, retry_if_exception_type, stop_never, wait_random_exponential

from serving.transport import warn_if_insecure
from serving.process import (ServerWithoutSignals, collector_paused, configure_logging, keep_running,
                             until_signalled)
from serving.registry_client import ActiveSet, NewestSigned, RegistryClient, RegistryRefused, RegistryUnavailable
from serving.router import metrics
from serving.router.admission import Admission
from serving.router.app import RouterApp
from serving.router.app_keys import AppKeys
from serving.router.catalog import Catalog
from serving.router.endpoint_watch import EndpointWatch, api_client
from serving.router.engines import EngineCheck, node_tls
from serving.router.fleet import Fleet
from serving.router.forward import Forwarder
from serving.router.settings import RouterSettings
from serving.router.traffic import TrafficMeter
from serving.router.windows import WindowMeter

log = logging.getLogger("loraplane.router")
CONVERGE_POLL_S = 0.1  # nodes' reports are read this often while they load a new generation
CONVERGE_WINDOW_S = 10
UPSTREAM_KEEPALIVE_S = 2
ENGINE_CHECK_S = 3  # for a node's engine to list what it holds, past connecting
REFUSED_SET_RETRY_S = 5  # a refused active set is asked for again after this


def follow_active_set(fleet: Fleet, pool: str, generation: int, entries: list[dict[str, Any]], *,
                      on_demand: bool) -> Catalog:
    """The catalog of a new active set, with `fleet` told where its versions are placed. Both
    build a few small objects per entry, thousands at once for a large pool: with the collector
    paused (collector_paused), the update grows with the set and no faster."""
    with collector_paused():
        catalog = Catalog.from_active_set(pool, generation, entries)
        fleet.follow_active_set(entries, on_demand=on_demand)
    return catalog


class Router:
    def __init__(self, settings: RouterSettings) -> None:
        self.settings = settings
        self.registry = RegistryClient(str(settings.registry_url), settings.token.get_secret_value(),
                                       settings.pool, timeout_s=10)
        self.fleet = Fleet(settings.spill_outstanding,
                           addresses_from_platform=settings.node_addresses == "kubernetes")
        self.keys = AppKeys(str(settings.registry_url), settings.key_cache_s)
        # A new generation, or pods that came, went or moved: nodes' reports are read, and their
        # engines asked, often for a while.
        self.nodes_changing = asyncio.Event()
        self.newest_signed = NewestSigned()
        self.traffic = TrafficMeter()
        self.windows = WindowMeter()

    async def run(self, stop: asyncio.Event) -> None:
        s = self.settings
        timeout = aiohttp.ClientTimeout(total=s.upstream_timeout_s, sock_connect=s.connect_timeout_s)
        # Idle connections are closed here before vLLM's own keep-alive (5 s) closes them under
        # a request; aiohttp may keep one up to twice this long.
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=UPSTREAM_KEEPALIVE_S,
                                         ssl=node_tls(s.node_ca_file))
        async with aiohttp.ClientSession(timeout=timeout, connector=connector,
                                         auto_decompress=False) as http:
            self.engines = EngineCheck(http, timeout_s=s.connect_timeout_s + ENGINE_CHECK_S)
            forwarder = Forwarder(self.fleet, http, cooldown_s=s.node_cooldown_s,
                                  load_wait_s=s.load_wait_s, retry_after_s=s.retry_after_s,
                                  serial_wait_s=s.queue_timeout_s, windows=self.windows, engines=self.engines)
            admission = Admission(s.max_inflight, s.batch_max_inflight, s.queue_timeout_s,
                                  s.tenant_max_inflight, s.retry_after_s)
            self.app = RouterApp(s.pool, self.keys, admission, forwarder, s.max_body_bytes,
                                 s.retry_after_s, self.traffic)
            # The router handles its own signals: it stops the server once `stop` is set.
            server = ServerWithoutSignals(uvicorn.Config(
                self.app, host=s.host, port=s.port, loop="none", http="httptools", lifespan="off",
                log_level="warning", access_log=False, timeout_keep_alive=30))
            tasks = [asyncio.create_task(keep_running("following the active set", self._follow_active_set)),
                     asyncio.create_task(keep_running("following the nodes", self._follow_nodes)),
                     asyncio.create_task(keep_running("reporting traffic", self._report_traffic)),
                     asyncio.create_task(server.serve())]
            kubernetes = api_client(str(s.k8s_api_url).rstrip("/") if s.k8s_api_url else None) \
                if s.node_addresses == "kubernetes" else None
            if kubernetes is not None:
                watch = EndpointWatch(kubernetes, s.service_namespace, s.service_name, s.k8s_port_name,
                                      s.k8s_scheme, self._nodes_located)
                tasks.insert(0, asyncio.create_task(keep_running("following the pool's endpoints", watch.run)))
            log.info("router for pool %s on http://%s:%d", s.pool, s.host, s.port)
            await stop.wait()
            server.should_exit = True
            await tasks[-1]
            for task in tasks[:-1]:
                task.cancel()
            await asyncio.gather(*tasks[:-1], return_exceptions=True)
            if kubernetes is not None:
                await kubernetes.close()
        await self.registry.close()
        await self.keys.close()

    async def _follow_active_set(self) -> None:
        etag = None
        retrying = AsyncRetrying(wait=wait_random_exponential(multiplier=0.5, max=30),
                                 retry=retry_if_exception_type(RegistryUnavailable), stop=stop_never,
                                 before_sleep=lambda state: log.warning(
                                     "registry unavailable (%s); routing on what it said last",
                                     state.outcome.exception() if state.outcome else None))
        while True:
            async for attempt in retrying:
                with attempt:
                    active = await self.registry.next_active_set(etag, self.settings.poll_wait_s)
            if active is not None and not self._newer_or_same(active):
                etag = None
                await asyncio.sleep(REFUSED_SET_RETRY_S)
                continue
            if active is not None:
                self.app.catalog = follow_active_set(self.fleet, self.settings.pool, active.generation,
                                                     active.entries, on_demand=active.overflow == "on_demand")
                etag = active.etag
                metrics.GENERATION.set(active.generation)
                self.nodes_changing.set()

    def _newer_or_same(self, active: ActiveSet) -> bool:
        """Keep routing on the newest signed set (registry_client.NewestSigned)."""
        if self.newest_signed.admits(active):
            return True
        log.error("the registry offers pool %s's signed active set of generation %s, older than "
                  "generation %d this router routes on: refused", self.settings.pool,
                  active.signed_generation, self.newest_signed.generation)
        metrics.REFUSED_SETS.inc()
        return False

    async def _follow_nodes(self) -> None:
        """Poll the nodes' reports; quickly while they load a new generation, or pods come."""
        loop = asyncio.get_running_loop()
        fast_until = 0.0
        while True:
            try:
                self.fleet.update(await self.registry.rollout())
            except RegistryUnavailable as error:
                log.warning("cannot read the nodes' reports (%s); routing on the last ones", error)
            await self.fleet.confirm(self.engines)
            if self.nodes_changing.is_set():
                self.nodes_changing.clear()
                fast_until = loop.time() + CONVERGE_WINDOW_S
            pause = CONVERGE_POLL_S if loop.time() < fast_until else self.settings.nodes_poll_s
            try:
                await asyncio.wait_for(self.nodes_changing.wait(), pause)
            except TimeoutError:
                pass

    def _nodes_located(self, addresses: dict[str, str]) -> None:
        self.fleet.locate(addresses)
        self.nodes_changing.set()

    async def _report_traffic(self) -> None:
        router_id = self.settings.router_id
        while True:
            await asyncio.sleep(self.settings.traffic_report_s)
            try:
                # A router token speaks for one router id: by default, report as that one.
                router_id = router_id or (await self.registry.whoami()).get("instance_id") or ""
            except RegistryUnavailable as error:
                log.warning("cannot learn this router's id (%s); traffic waits for the next report", error)
                continue
            if not router_id:
                log.error("this token is bound to no router id: traffic is not reported "
                          "(use a router token, or set LORAPLANE_ROUTER_ROUTER_ID)")
                return
            await self.report_traffic(router_id)

    async def report_traffic(self, router_id: str) -> None:
        """Send the request rates and the next traffic windows."""
        try:
            await self.registry.report_traffic(router_id, self.traffic.rates(), self.windows.take())
            self.windows.acknowledged()
        except RegistryUnavailable as error:
            log.warning("cannot report traffic (%s); placement keeps the last rates, and the "
                        "window is sent again with the next report", error)
        except RegistryRefused as error:
            # Sent again, it would be refused again, and every later window would queue behind
            # it: canary analysis would go blind. Drop this one and go on.
            log.error("the registry refused a traffic report (%s); its windows are dropped", error)
            self.windows.acknowledged()


def run(settings: RouterSettings) -> None:
    import uvloop

    configure_logging()
    warn_if_insecure(settings.registry_url, "LORAPLANE_ROUTER_ALLOW_INSECURE_REGISTRY")
    if settings.metrics_port:
        start_http_server(settings.metrics_port, settings.metrics_host, registry=metrics.REGISTRY)
    uvloop.run(until_signalled(lambda stop: Router(settings).run(stop)))
