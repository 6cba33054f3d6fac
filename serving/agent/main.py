"""The agent's loops: follow the active set by long-poll (persisting each one), converge vLLM on
it whenever it changes and every `resync_s` (which is how a restarted vLLM is noticed and refilled),
report after each pass, keep the trust bundle current, and serve /metrics and /healthz; with the
resolver on, answer vLLM's resolver plugin on a unix socket (resolver_socket.py)."""

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

from serving.agent import engine, metrics
from serving.agent.artifacts import AdapterCache
from serving.agent.incidents import Incidents
from serving.agent.last_known_good import LastKnownGood
from serving.agent.on_demand import OnDemand
from serving.agent.proof import ProofCheck
from serving.agent.reconcile import Reconciler
from serving.agent.resolver_socket import ResolverSocket
from serving.agent.signed_sets import SignedSetCheck
from serving.agent.settings import AgentSettings
from serving.agent.token_file import TokenFile
from serving.agent.trust import TrustStore
from serving.agent.vllm_client import VllmClient, VllmUnavailable
from serving.transport import warn_if_insecure
from serving.process import ServerWithoutSignals, configure_logging, keep_running, until_signalled
from serving.registry_client import ActiveSet, RegistryClient, RegistryUnavailable

log = logging.getLogger("loraplane.agent")
URGENT_TRUST_REFRESH_S = 10  # at most this often for attestations naming a key not held
REFUSED_SET_RETRY_S = 5  # a refused active set is asked for again after this, or a new bundle


class Agent:
    def __init__(self, settings: AgentSettings) -> None:
        self.settings = settings
        timeout = settings.request_timeout_s
        credential = TokenFile(settings.token_file) if settings.token_file else \
            settings.node_token.get_secret_value() if settings.node_token else ""
        self.registry = RegistryClient(str(settings.registry_url), credential, settings.pool, timeout,
                                       node_id=settings.node_id)
        self.vllm = VllmClient(str(settings.vllm_url), timeout)
        self.trust = TrustStore(pinned=settings.pinned_trust_bundle, operator_file=settings.trust_bundle,
                                fetch=self.registry.trust_bundle)
        self.proof = ProofCheck(self.trust, settings.pool) if settings.verify_provenance else None
        self.signed_sets = SignedSetCheck(self.trust, settings.pool) if settings.verify_provenance else None
        self.reconciler = Reconciler(self.vllm, AdapterCache(settings.cache_dir, settings.cache_max_bytes, timeout),
                                     retry_failed_after_s=settings.retry_failed_after_s,
                                     proof=self.proof, incidents=Incidents(),
                                     load_ahead=settings.load_ahead)
        self.last_known_good = LastKnownGood(settings.state_dir)
        self.desired: ActiveSet | None = self.last_known_good.load()
        if self.signed_sets is not None:
            self.signed_sets.took(self.desired)
        self.changed = asyncio.Event()
        self.trust_wanted = asyncio.Event()
        self.trust_changed = asyncio.Event()
        self.refused_set: str | None = None  # why the last set offered was not taken
        self.sync = metrics.SyncClock()
        self.vllm_up = False
        self.engine: dict | None = None
        self.engine_at = float("-inf")

    async def run(self, stop: asyncio.Event) -> None:
        await self._start_trusting()
        if self.desired is not None:
            log.info("serving the last-known-good set (generation %d) until the registry answers",
                     self.desired.generation)
            self.changed.set()
        tasks = [asyncio.create_task(keep_running("following the active set", self._follow)),
                 asyncio.create_task(keep_running("converging", self._converge)),
                 asyncio.create_task(keep_running("following the trust bundle", self._follow_trust))]
        if self.settings.resolver:
            on_demand = OnDemand(self.reconciler, lambda: self.desired, self.settings.resolver_deadline_s)
            socket = ResolverSocket(self.settings.resolver_socket_path, on_demand)
            tasks.append(asyncio.create_task(keep_running("answering vLLM's resolver", socket.serve)))
        http = self._http_server()
        serving = asyncio.create_task(http.serve()) if http else None
        await stop.wait()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if http is not None and serving is not None:
            http.should_exit = True  # a clean shutdown, not a cancelled one
            await serving
        await self.registry.close()
        await self.vllm.close()

    async def _follow(self) -> None:
        etag = None  # ask for the set at once: a restart also wants fresh download URLs
        retrying = AsyncRetrying(wait=wait_random_exponential(multiplier=0.5, max=self.settings.backoff_max_s),
                                 retry=retry_if_exception_type(RegistryUnavailable), stop=stop_never,
                                 before_sleep=lambda state: _registry_away(
                                     state.outcome.exception() if state.outcome else None))
        while True:
            async for attempt in retrying:
                with attempt:
                    active = await self.registry.next_active_set(etag, self.settings.poll_wait_s)
            self.sync.mark()
            if active is not None and not await self._signed(active):
                etag = None  # asked again, at once once the trust bundle changed, else after a pause
                continue
            if active is not None:
                self._keep(active)
                self.desired, etag = active, active.etag
                self.changed.set()

    async def _signed(self, active: ActiveSet) -> bool:
        """Whether the set may be taken (signed_sets.py); a refusal is logged when it changes,
        counted, and waited out: the node keeps serving what it holds."""
        if self.signed_sets is None:
            return True
        problem = self.signed_sets.problem(active)
        if problem is None:
            self.signed_sets.took(active)
            self.refused_set = None
            return True
        if problem != self.refused_set:
            log.error("%s (generation %d); keeping generation %s", problem, active.generation,
                      self.desired.generation if self.desired else None)
        self.refused_set = problem
        metrics.FAILURES.labels("active_set_refused").inc()
        if self.signed_sets.unknown_key:
            self.trust_wanted.set()
        self.trust_changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.trust_changed.wait(), REFUSED_SET_RETRY_S)
        return False

    async def _start_trusting(self) -> None:
        if self.proof is None:
            log.warning("!!! LORAPLANE_AGENT_VERIFY_PROVENANCE is off: this node loads versions "
                        "without checking their attestations. Use it only to measure what the "
                        "check costs, never to serve. !!!")
            return
        self.trust.load()
        if self.trust.bundle is None:  # first start: pin the registry's, if it answers now
            await self._refresh_trust()

    async def _follow_trust(self) -> None:
        """Fetch the bundle every `trust_refresh_s`, and soon after an attestation named a key
        the node does not hold (a rotation), at most once per URGENT_TRUST_REFRESH_S so that a
        stream of forged entries cannot make the node hammer its registry."""
        if self.proof is None:
            return
        loop, last = asyncio.get_running_loop(), float("-inf")
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.trust_wanted.wait(), self.settings.trust_refresh_s)
            if self.trust_wanted.is_set():
                await asyncio.sleep(max(0.0, last + URGENT_TRUST_REFRESH_S - loop.time()))
                self.trust_wanted.clear()
            last = loop.time()
            await self._refresh_trust()

    async def _refresh_trust(self) -> None:
        try:
            if await self.trust.refresh():
                self.changed.set()  # entries refused for want of a key may be proven now
                self.trust_changed.set()  # and a set refused for it may be taken
        except RegistryUnavailable as error:
            metrics.FAILURES.labels("registry_unavailable").inc()
            log.warning("could not fetch the registry's trust bundle: %s", error)

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
                self.vllm_up, self.engine = False, None  # it may come back as another version
                metrics.FAILURES.labels("vllm_unavailable").inc()
                continue
            except Exception:  # a bug must not stop the node from converging: log, try again
                log.exception("reconcile pass failed")
                metrics.FAILURES.labels("internal").inc()
                continue
            if self.proof is not None and self.proof.unknown_key:
                self.proof.unknown_key = False
                self.trust_wanted.set()
            status["limits"] = self._limits()  # its address is the one bound to its token
            if described := await self._engine():
                status["engine"] = engine.with_limits(described, self._limits())
            if status != last_report or loop.time() - last_sent > self.settings.heartbeat_s:
                try:
                    await self.registry.report(self.settings.node_id, status)
                    last_report, last_sent = status, loop.time()
                except RegistryUnavailable:  # the next pass reports again
                    metrics.FAILURES.labels("registry_unavailable").inc()

    async def _engine(self) -> dict | None:
        """vLLM's version and settings, asked again at each heartbeat: a restart between two
        passes goes unseen, and may have brought another version."""
        now = asyncio.get_running_loop().time()
        if self.engine is None or now - self.engine_at > self.settings.heartbeat_s:
            self.engine, self.engine_at = await engine.describe(self.vllm, self.settings.engine_dtype), now
        return self.engine

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
        return ServerWithoutSignals(config)  # the agent handles its own signals, and stops it last


def _registry_away(error: BaseException | None) -> None:
    metrics.FAILURES.labels("registry_unavailable").inc()
    log.warning("registry unavailable (%s); serving the last-known-good set", error)


def run(settings: AgentSettings) -> None:
    configure_logging()
    warn_if_insecure(settings.registry_url, "LORAPLANE_AGENT_ALLOW_INSECURE_REGISTRY")
    asyncio.run(until_signalled(lambda stop: Agent(settings).run(stop)))
