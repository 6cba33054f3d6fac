from __future__ import annotations

from fastapi import APIRouter, Depends, Path, Response
from sqlalchemy.orm import Session

from registry.adapters.endpoints import Name, Number, Tenant
from registry.auth.dependencies import authenticated
from registry.auth.principal import Principal
from registry.evaluations import service
from registry.evaluations.schemas import EvaluationOut, EvaluationRequest
from registry.page_query import Paging, paging
from registry.pagination import Page, PageRequest
from registry.request_session import RequestSession

router = APIRouter(tags=["evaluations"])


@router.post(
    "/v1/adapters/{tenant}/{name}/versions/{number}/evaluations",
    status_code=202, response_model=EvaluationOut,
    responses={200: {"description": "This version already has an unfinished or passed "
                                    "evaluation against the suite (an unfinished one with `again`): "
                                    "that one."}},
)
def request_evaluation(
    body: EvaluationRequest, response: Response, tenant: str = Tenant, name: str = Name,
    number: int = Number, principal: Principal = Depends(authenticated),
    session: Session = RequestSession,
):
    evaluation, created = service.request(session, principal, tenant, name, number, body.suite,
                                          against=body.against, again=body.again)
    if not created:
        response.status_code = 200
    return evaluation


@router.get("/v1/adapters/{tenant}/{name}/versions/{number}/evaluations",
            response_model=Page[EvaluationOut])
def list_evaluations(
    tenant: str = Tenant, name: str = Name, number: int = Number, page: PageRequest = Paging,
    principal: Principal = Depends(authenticated), session: Session = RequestSession,
):
    return Page.of(service.list_for_version(session, principal, tenant, name, number,
                                            limit=page.limit, cursor=page.cursor))


@router.get("/v1/evaluations/{evaluation_id}", response_model=EvaluationOut)
def get_evaluation(
    evaluation_id: int = Path(ge=1, le=2**31 - 1),
    examples: PageRequest = paging(prefix="examples_"),
    principal: Principal = Depends(authenticated),
    session: Session = RequestSession,
):
    return service.get(session, principal, evaluation_id, examples_limit=examples.limit,
                       examples_cursor=examples.cursor)
