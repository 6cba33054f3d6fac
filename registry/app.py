"""The registry's API as an ASGI application. The process serves it with the review dashboard
beside it (loraplane/server.py): the registry imports no web code."""

from __future__ import annotations

import gc
import logging
from collections.abc import Sequence
from contextlib import asynccontextmanager
from functools import partial

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from registry import log_redaction
from registry.active_set.long_poll.endpoints import router as active_set
from registry.active_set.long_poll.fast_path import ActiveSetFastPath
from registry.active_set.placement.endpoints import router as placement
from registry.active_set.long_poll import state as long_poll_state
from registry.active_set.long_poll.state import LongPolls
from registry.adapters.endpoints import router as adapters
from registry.attestations import upkeep as attestation_upkeep
from registry.attestations.endpoints import router as attestations
from registry.audit.endpoints import router as audit
from registry.base_models.endpoints import router as base_models
from registry.canaries.endpoints import router as canaries
from registry.attestation_keys import ledger as key_ledger
from registry.deployment_keys import service as deployment_keys
from registry.errors import LoraplaneError
from registry.eval_suites.endpoints import router as eval_suites
from registry.evaluation_policies.endpoints import router as evaluation_policies
from registry.evaluations.endpoints import router as evaluations
from registry.input_guard import ControlCharacterGuard
from registry.lifecycle.endpoints import router as lifecycle
from registry.leadership.service import start_up_turn
from registry.limits import BodySizeLimitMiddleware
from registry.metrics import MetricsMiddleware
from registry.nodes.endpoints import router as nodes
from registry.ops.endpoints import router as ops
from registry.pools.endpoints import router as pools
from registry.promotions.endpoints import router as promotions
from registry.settings import get_settings
from registry.signing_keys.endpoints import router as signing_keys
from registry.sizing.endpoints import router as sizing
from registry.sso.endpoints import router as sso
from registry.storage import get_store
from registry.storage.endpoints import router as artifacts
from registry.tenants.endpoints import router as tenants
from registry.tokens.endpoints import router as auth
from registry.unit_of_work import UnitOfWork, transaction
from registry.uploads.endpoints import router as uploads
from registry.webhooks.endpoints import router as webhooks

log = logging.getLogger(__name__)


@asynccontextmanager
async def lifespan(app: FastAPI):
    # Build the store's client and sign once now, not on the first node's long-poll.
    get_store().presigned_url("warm-up", 60)
    # The fingerprints of the keys this registry seals and signs with, for workers and
    # housekeepers to compare theirs with before they start (registry/deployment_keys/); first,
    # since a rotated secret's rows are sealed again there, the key ledger's among them.
    await run_in_threadpool(_publish_keys)
    # Attestation keys from the environment: a new one is a rotation, recorded once.
    await run_in_threadpool(_adopt_key_ledger)
    # What a key rotated out since signed (here, or before a redeploy with another key).
    await run_in_threadpool(_resign_on_start)
    await long_poll_state.of(app).start(poll_s=get_settings().active_set_poll_s)
    # Everything loaded so far lives as long as the process: keep the collector from walking it
    # again and again, which pauses every open long-poll at once.
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        await long_poll_state.of(app).stop()


# Each start-up step waits for the replicas starting beside this one to finish theirs
# (leadership.start_up_turn), then finds the work done: a rollout starts replicas together.
def _adopt_key_ledger() -> None:
    with transaction() as session:
        start_up_turn(session)
        key_ledger.adopt(session, actor="registry (start)")


def _resign_on_start() -> None:
    with transaction() as session:
        start_up_turn(session)
        resigned = attestation_upkeep.resign_active(session)
    if resigned:
        log.info("re-signed %d active attestations with the current key", resigned)


def _publish_keys() -> None:
    with transaction() as session:
        start_up_turn(session)
        deployment_keys.publish(session, actor="registry (start)")


def create_app() -> FastAPI:
    log_redaction.install()
    app = FastAPI(
        title="loraplane registry",
        version="0.1.0",
        description="Validated LoRA adapters, base models and serving pools for multi-LoRA vLLM.",
        lifespan=lifespan,
    )
    app.state.long_polls = long_polls = LongPolls(auth_cache_s=get_settings().auth_cache_s)
    # Each unit of work this process commits wakes its own long-polls at once (unit_of_work.py).
    app.state.begin_work = partial(UnitOfWork.begin, wake=long_polls.wake)
    for router in (auth, sso, tenants, signing_keys, base_models, pools, eval_suites, adapters, evaluation_policies,
                   uploads, evaluations, promotions, canaries, active_set, nodes, placement, sizing, webhooks, audit,
                   attestations, artifacts, ops, lifecycle):
        app.include_router(router)
    app.add_middleware(BodySizeLimitMiddleware, max_upload_bytes=get_settings().max_upload_bytes)
    app.add_middleware(ControlCharacterGuard)
    app.add_middleware(MetricsMiddleware)
    app.add_middleware(ActiveSetFastPath)  # outermost: before every other layer
    # FastAPI's decorator, called: Starlette's add_exception_handler types every handler as one
    # taking any Exception, where each of these takes the class it is registered for.
    app.exception_handler(LoraplaneError)(_domain_error)
    app.exception_handler(RequestValidationError)(_validation_error)
    app.exception_handler(HTTPException)(_http_error)
    return app


async def _domain_error(_: Request, error: LoraplaneError) -> JSONResponse:
    headers = dict(error.headers)
    if error.status == 401:
        headers.setdefault("WWW-Authenticate", "Bearer")
    return JSONResponse(error.body(), status_code=error.status, headers=headers or None)


async def _validation_error(_: Request, error: RequestValidationError) -> JSONResponse:
    first = error.errors()[0]
    where = ".".join(str(part) for part in first.get("loc", ()))
    message = f"{where}: {first.get('msg', 'invalid value')}"
    body = {"error": {"code": "invalid_request", "message": message,
                      "hint": "See the OpenAPI schema at /docs.", "details": _safe(error.errors())}}
    return JSONResponse(body, status_code=422)


async def _http_error(_: Request, error: HTTPException) -> JSONResponse:
    body = {"error": {"code": "http_error", "message": str(error.detail), "hint": ""}}
    return JSONResponse(body, status_code=error.status_code, headers=getattr(error, "headers", None))


def _safe(errors: Sequence[dict]) -> list[dict]:
    # Drop the raw input: it may be large, or hold a secret the caller mistyped.
    return [{"loc": list(e.get("loc", ())), "msg": e.get("msg", "")} for e in errors[:10]]
