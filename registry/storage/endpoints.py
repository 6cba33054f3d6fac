"""Downloads for the embedded store. The signed URL is the credential, as with S3 presigning."""

from __future__ import annotations

from fastapi import APIRouter, Query
from fastapi.responses import FileResponse

from registry.errors import NotFound
from registry.storage import get_store
from registry.storage.local import LocalStore

router = APIRouter(tags=["artifacts"])


@router.get("/v1/artifacts/{key:path}", response_class=FileResponse)
def download_artifact(key: str, expires: int = Query(..., ge=0, le=2**40),
                      signature: str = Query(..., pattern="^[0-9a-f]{64}$")):
    store = get_store()
    if not isinstance(store, LocalStore):
        raise NotFound("artifacts are served by the object store", code="not_found")
    path = store.open_signed(key, expires, signature)
    return FileResponse(path, media_type="application/octet-stream")
