"""The floor for the 304 comparison: a bare Starlette endpoint that answers 304, nothing else."""

from starlette.applications import Starlette
from starlette.responses import Response
from starlette.routing import Route


async def not_modified(_request) -> Response:
    return Response(status_code=304, headers={"ETag": '"1"', "Cache-Control": "no-cache"})


app = Starlette(routes=[Route("/v1/pools/{pool}/active-set", not_modified)])
