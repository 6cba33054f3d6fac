"""Read the multipart upload. Starlette spools each file to disk past 1 MiB, never all in memory."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Request
from starlette.datastructures import FormData, UploadFile
from starlette.exceptions import HTTPException
from starlette.formparsers import MultiPartException

from registry.adapters.upload_files import UploadedFile
from registry.errors import BadRequest, UnsupportedMediaType

FILE_FIELD = "file"
BASE_MODEL_FIELD = "base_model"
MAX_PARTS = 8

# The request body as the OpenAPI schema shows it.
OPENAPI_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": [FILE_FIELD],
                    "properties": {
                        FILE_FIELD: {
                            "type": "array",
                            "items": {"type": "string", "format": "binary"},
                            "description": "adapter_config.json and adapter_model.safetensors, "
                            "or one .tar.gz/.tgz/.tar/.zip of a PEFT folder.",
                        },
                        BASE_MODEL_FIELD: {
                            "type": "string",
                            "description": "Target base model; defaults to the one named "
                            "in adapter_config.json.",
                        },
                    },
                }
            }
        },
    }
}


@dataclass
class UploadForm:
    parts: list[UploadedFile]
    base_model: str | None
    form: FormData

    async def close(self) -> None:
        await self.form.close()


async def read_upload_form(request: Request) -> UploadForm:
    content_type = request.headers.get("content-type", "")
    if not content_type.lower().startswith("multipart/form-data"):
        raise UnsupportedMediaType(
            f"expected multipart/form-data, got {content_type or 'no content type'!r}",
            hint="curl -F file=@adapter_config.json -F file=@adapter_model.safetensors ...",
        )
    try:
        form = await request.form(max_files=MAX_PARTS, max_fields=MAX_PARTS, max_part_size=4096)
    except (MultiPartException, HTTPException) as error:
        # Starlette turns its parser's errors into a plain 400 HTTPException inside an app.
        detail = getattr(error, "detail", None) or getattr(error, "message", str(error))
        raise BadRequest(f"malformed multipart body: {detail}", code="invalid_multipart",
                         hint="Send multipart/form-data, e.g. with curl -F file=@PATH.") from None
    unknown = sorted(set(form.keys()) - {FILE_FIELD, BASE_MODEL_FIELD})
    if unknown:
        await form.close()
        raise BadRequest(f"unknown form field {unknown[0]!r}", code="unknown_field",
                         hint=f"Send files as {FILE_FIELD!r} and optionally {BASE_MODEL_FIELD!r}.")
    parts, base_model = [], None
    for key, value in form.multi_items():
        if key == FILE_FIELD and isinstance(value, UploadFile):
            parts.append(UploadedFile(filename=value.filename or "", file=value.file))
        elif key == BASE_MODEL_FIELD and isinstance(value, str) and base_model is None:
            base_model = value
        else:
            await form.close()
            raise BadRequest(f"form field {key!r} has the wrong type or is repeated",
                             code="invalid_field",
                             hint=f"{FILE_FIELD!r} takes files; {BASE_MODEL_FIELD!r} takes one name.")
    return UploadForm(parts=parts, base_model=base_model, form=form)
