"""The agent's loops: follow the active set by long-poll (persisting each one), converge vLLM on
it whenever it changes and every `resync_s` (which is how a restarted vLLM is noticed and refilled),
report after each pass, and serve /metrics and /healthz."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from tenacity import AsyncRetrying, retry_if_exception_type, stop_never, wait_random_exponential

from serving.agent import metrics
from serving.agent.artifacts import AdapterCache
from serving.agent.last_known_good import LastKnownGood
from serving.agent.reconcile import Reconciler
from serving.agent.settings import AgentSettings
from serving.agent.vllm_client import VllmClient, VllmUnavailable
from serving.process import configure_logging, keep_running, until_signalled
from serving.registry_client import ActiveSet, RegistryClient, RegistryUnavailable

log = logging.getLogger("loraplane.agent")


class Agent:
    def __init__(self, settings: AgentSettings) -> None:
        self.settings = settings
        timeout = settings.request_timeout_s
        self.registry = RegistryClient(str(settings.registry_url), settings.node_token.get_secret_value(),
                                       settings.pool, timeout, node_id=settings.node_id)
        self.vllm = VllmClient(str(settings.vllm_url), timeout)
        self.reconciler = Reconciler(self.vllm, AdapterCache(settings.cache_dir, settings.cache_max_bytes, timeout),
                                     retry_failed_after_s=settings.retry_failed_after_s)
        self.last_known_good = LastKnownGood(settings.state_dir)
        self.desired: ActiveSet | None = self.last_known_good.load()
        self.changed = asyncio.Event()
        self.sync = metrics.SyncClock()
        self.vllm_up = False

    async def run(self, stop: asyncio.Event) -> None:
        if self.desired is not None:
            log.info("serving the last-known-good set (generation %d) until the registry answers",
                     self.desired.generation)
            self.changed.set()
        tasks = [asyncio.create_task(keep_running("following the active set", self._follow)),
                 asyncio.create_task(keep_running("converging", self._converge))]
        http = self._http_server()
        serving = asyncio.create_task(http.serve()) if http else None
        await stop.wait()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if serving:
            http.should_exit = True  # a clean shutdown, not a cancelled one
            await serving
        await self.registry.close()
        await self.vllm.close()

    async def _follow(self) -> None:
        etag = None  # ask for the set at once: a restart also wants fresh download URLs
        retrying = AsyncRetrying(wait=wait_random_exponential(multiplier=0.5, max=self.settings.backoff_max_s),
                                 retry=retry_if_exception_type(RegistryUnavailable), stop=stop_never,
                                 before_sleep=lambda state: _registry_away(state.outcome.exception()))
        while True:
            async for attempt in retrying:
                with attempt:
                    active = await self.registry.next_active_set(etag, self.settings.poll_wait_s)
            self.sync.mark()
            if active is not None:
                self._keep(active)
                self.desired, etag = active, active.etag
                self.changed.set()

    def _keep(self, active: ActiveSet) -> None:
        """Persist the set for a restart without the registry. A disk that cannot take it (full,
        or something in the way) must not stop the node from following the registry now."""
        try:
            self.last_known_good.save(active)
        except OSError as error:
            metrics.FAILURES.labels("state_unwritable").inc()
            log.warning("could not keep the last-known-good set on disk: %s", error)

    async def _converge(self) -> None:
        last_report, last_sent = None, 0.0
        loop = asyncio.get_running_loop()
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), self.settings.resync_s)
            self.changed.clear()
            if self.desired is None:
                continue
            try:
                status = await self.reconciler.run_pass(self.desired)
                self.vllm_up = True
            except VllmUnavailable as error:
                if self.vllm_up:
                    log.warning("vLLM is unavailable (%s); will reload everything when it is back", error)
                self.vllm_up = False
                metrics.FAILURES.labels("vllm_unavailable").inc()
                continue
            except Exception:  # a bug must not stop the node from converging: log, try again
                log.exception("reconcile pass failed")
                metrics.FAILURES.labels("internal").inc()
                continue
            status |= {"vllm_url": str(self.settings.vllm_url), "limits": self._limits()}
            if status != last_report or loop.time() - last_sent > self.settings.heartbeat_s:
                try:
                    await self.registry.report(self.settings.node_id, status)
                    last_report, last_sent = status, loop.time()
                except RegistryUnavailable:  # the next pass reports again
                    metrics.FAILURES.labels("registry_unavailable").inc()

    def _limits(self) -> dict[str, int]:
        # The pool's limits, which its nodes' vLLMs are started with (vLLM does not expose them).
        return dict(self.desired.limits) if self.desired and self.desired.limits else \
            {"max_loras": 1, "max_cpu_loras": 1, "max_lora_rank": 1}

    def _http_server(self) -> uvicorn.Server | None:
        if not self.settings.metrics_port:
            return None

        async def metrics_endpoint(_request) -> Response:
            return Response(generate_latest(metrics.REGISTRY), media_type=CONTENT_TYPE_LATEST)

        async def health(_request) -> JSONResponse:
            body = {"vllm_up": self.vllm_up, "seconds_since_sync": round(self.sync.age(), 1),
                    "generation": self.desired.generation if self.desired else None}
            return JSONResponse(body, status_code=200 if self.vllm_up else 503)

        app = Starlette(routes=[Route("/metrics", metrics_endpoint), Route("/healthz", health)])
        config = uvicorn.Config(app, host=self.settings.metrics_host, port=self.settings.metrics_port,
                                log_level="warning", access_log=False)
        server = uvicorn.Server(config)
        server.install_signal_handlers = lambda: None  # the agent handles its own signals
        return server


def _registry_away(error: BaseException | None) -> None:
    metrics.FAILURES.labels("registry_unavailable").inc()
    log.warning("registry unavailable (%s); serving the last-known-good set", error)


def run(settings: AgentSettings) -> None:
    configure_logging()
    asyncio.run(until_signalled(lambda stop: Agent(settings).run(stop)))
