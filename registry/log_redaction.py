"""Keep credentials out of the access log. A presigned download link is a credential for as long
as it lives, so its signature (and any token in a query) is replaced before a line is written."""

from __future__ import annotations

import logging
import re

# Query parameters that carry a credential: local and S3 presigned links, and tokens.
SECRET_PARAMETER = re.compile(
    r"(?i)([?&](?:signature|x-amz-signature|x-amz-credential|x-amz-security-token|token|"
    r"access_token|api_key)=)[^&#\s]*")
REDACTED = r"\1[redacted]"


class RedactQuerySecrets(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(SECRET_PARAMETER.sub(REDACTED, arg) if isinstance(arg, str) else arg
                                for arg in record.args)
        elif isinstance(record.msg, str):
            record.msg = SECRET_PARAMETER.sub(REDACTED, record.msg)
        return True


def install() -> None:
    """Once per process, on uvicorn's access logger (safe to call again)."""
    access = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, RedactQuerySecrets) for f in access.filters):
        access.addFilter(RedactQuerySecrets())
