"""Probes and metrics. Probes answer without a token, so load balancers can use them."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Response
from fastapi.responses import JSONResponse
from sqlalchemy.orm import Session
from prometheus_client import CONTENT_TYPE_LATEST

from registry.auth.dependencies import metrics_reader
from registry.auth.principal import Principal
from registry.db import plain_transaction
from registry.request_session import RequestSession
from registry import metrics as process_metrics
from registry.ops import fleet_metrics, repository
from registry.storage import get_store

router = APIRouter(tags=["operations"])


@router.get("/healthz")
def healthz():
    return {"status": "ok"}


@router.get("/readyz")
def readyz():
    checks = {"database": _check(_database), "storage": _check(lambda: get_store().check())}
    ready = all(result == "ok" for result in checks.values())
    return JSONResponse({"ready": ready, "checks": checks}, status_code=200 if ready else 503)


@router.get("/metrics", response_class=Response)
def metrics(principal: Principal = Depends(metrics_reader), session: Session = RequestSession):
    """This process's metrics (every worker process's, under `serve --workers N`), and the
    fleet's as the database tells them. For a metrics token or a global admin."""
    # In the request's own session, the one its token was read in: a second transaction would
    # wait on the first on SQLite.
    fleet = fleet_metrics.exposition(session)
    return Response(process_metrics.exposition() + fleet, media_type=CONTENT_TYPE_LATEST)


def _database() -> None:
    # A transaction of its own, not the request's: a database that is away is this probe's
    # answer ("failed"), not an error of the request.
    with plain_transaction() as session:
        repository.ping(session)


def _check(probe) -> str:
    try:
        probe()
    except Exception as error:  # any failure means not ready; the type tells the operator why
        return f"failed: {type(error).__name__}"
    return "ok"
