from __future__ import annotations

import tempfile
from functools import partial
from pathlib import Path as FilePath

from fastapi import APIRouter, Depends, Request, Response
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect

from registry.adapters import service
from registry.adapters.endpoints import Name, Tenant
from registry.adapters.receive import OPENAPI_BODY, receive_upload
from registry.adapters.receive_deadlines import TimedBody, receive_timing
from registry.adapters.schemas import VersionOut
from registry.adapters.upload_slots import upload_slots
from registry.auth.dependencies import authenticated
from registry.auth.principal import Principal
from registry.errors import BadRequest, LoraplaneError
from registry.metrics import UPLOAD_REFUSALS, UPLOADS, UPLOADS_IN_PROGRESS
from registry.names import check_name
from registry.request_session import RequestSession, commit_so_far, work_factory
from registry.settings import get_settings
from registry.storage import get_store
from registry.uploads import upload

router = APIRouter(prefix="/v1/adapters", tags=["adapters"])


@router.post(
    "/{tenant}/{name}/versions",
    status_code=201,
    response_model=VersionOut,
    openapi_extra=OPENAPI_BODY,
    responses={200: {"description": "These exact bytes were uploaded before: the existing version."},
               408: {"description": "The body stalled or arrived too slowly; the connection is closed."},
               429: {"description": "Too many uploads at once; retry after the Retry-After seconds."}},
)
async def upload_version(
    request: Request,
    response: Response,
    tenant: str = Tenant,
    name: str = Name,
    principal: Principal = Depends(authenticated),
    session: Session = RequestSession,
):
    # Unlike other routes, the upload works in transactions of its own around its slow I/O
    # (upload.py): end the one the token was read in, so no pooled connection waits on the body.
    await run_in_threadpool(commit_so_far, request)
    principal.require(service.UPLOADERS, tenant)
    try:
        check_name(tenant, "tenant")
        check_name(name, "adapter")
        body = TimedBody(request.stream(), receive_timing())
        with UPLOADS_IN_PROGRESS.labels(tenant, "awaiting_body").track_inprogress():
            await body.first_bytes()  # a client that sends only headers holds no slot
        with (upload_slots().hold(tenant),  # before the first byte is spooled
              UPLOADS_IN_PROGRESS.labels(tenant, "receiving").track_inprogress(),
              tempfile.TemporaryDirectory(prefix="upload-", dir=get_settings().spool_dir()) as workdir):
            received = await receive_upload(request, body, FilePath(workdir), get_store())
            try:
                version, created = await run_in_threadpool(
                    partial(upload.upload_version, work_factory(request), get_store(), get_settings(),
                            principal=principal, tenant=tenant, name=name, received=received,
                            workdir=FilePath(workdir)))
            except BaseException:
                if received.streamed is not None:
                    await run_in_threadpool(received.streamed.abort)
                raise
    except ClientDisconnect:
        # Nothing to answer; say so in the metrics instead of as a server error.
        UPLOAD_REFUSALS.labels(reason="client_disconnected").inc()
        raise BadRequest("the client disconnected before the upload finished",
                         code="client_disconnected", hint="Upload again.") from None
    except LoraplaneError as refusal:
        UPLOAD_REFUSALS.labels(reason=refusal.code).inc()
        raise
    UPLOADS.labels(outcome="created" if created else "duplicate").inc()
    response.status_code = 201 if created else 200
    return version
