from __future__ import annotations

from fastapi import APIRouter, Depends, Path, Query, Response

from registry.adapters.endpoints import Cursor, Limit, Name, Number, Tenant
from registry.auth.dependencies import authenticated
from registry.auth.principal import Principal
from registry.db import transaction
from registry.evaluations import service
from registry.evaluations.schemas import EvaluationOut, EvaluationRequest
from registry.pagination import Page
from registry.task_queue import enqueue_evaluations

router = APIRouter(tags=["evaluations"])


@router.post(
    "/v1/adapters/{tenant}/{name}/versions/{number}/evaluations",
    status_code=202, response_model=EvaluationOut,
    responses={200: {"description": "This version already has an unfinished or passed "
                                    "evaluation against the suite: that one."}},
)
def request_evaluation(
    body: EvaluationRequest, response: Response, tenant: str = Tenant, name: str = Name,
    number: int = Number, principal: Principal = Depends(authenticated),
):
    with transaction() as session:
        evaluation, created = service.request(session, principal, tenant, name, number, body.suite)
    if created:
        enqueue_evaluations([(evaluation.id, evaluation.base_model)])
    else:
        response.status_code = 200
    return evaluation


@router.get("/v1/adapters/{tenant}/{name}/versions/{number}/evaluations",
            response_model=Page[EvaluationOut])
def list_evaluations(
    tenant: str = Tenant, name: str = Name, number: int = Number, limit: int = Limit,
    cursor: str | None = Cursor, principal: Principal = Depends(authenticated),
):
    with transaction() as session:
        items, next_cursor = service.list_for_version(session, principal, tenant, name, number,
                                                      limit=limit, cursor=cursor)
        return Page(items=items, next_cursor=next_cursor)


@router.get("/v1/evaluations/{evaluation_id}", response_model=EvaluationOut)
def get_evaluation(
    evaluation_id: int = Path(ge=1, le=2**31 - 1),
    examples_limit: int = Query(50, ge=1, le=200),
    examples_cursor: str | None = Query(None, max_length=18),
    principal: Principal = Depends(authenticated),
):
    with transaction() as session:
        return service.get(session, principal, evaluation_id, examples_limit=examples_limit,
                           examples_cursor=examples_cursor)
