"""Rendering pages: the templates, the security headers every page carries, and a route class
that turns the registry's errors into an error page and a missing session into the sign-in form."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.routing import APIRoute
from fastapi.templating import Jinja2Templates
from starlette.concurrency import run_in_threadpool

from registry.errors import LoraplaneError
from registry.request_session import discard, session_of
from web import charts
from web.session import SignInRequired, Visit, visit_of

TEMPLATES = Jinja2Templates(directory=Path(__file__).parent / "templates")
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; "
                               "script-src 'self'; form-action 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def _ago(moment: datetime | None) -> str:
    if moment is None:
        return ""
    seconds = (datetime.now(UTC) - (moment if moment.tzinfo else moment.replace(tzinfo=UTC))).total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{int(seconds // size)} {unit} ago"
    return "just now"


def _size(count: float) -> str:
    for unit, size in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if abs(count) >= size:
            return f"{count / size:,.2f} {unit}"
    return f"{count:,.0f} bytes"


def _figure(figure) -> str:
    """A sizing figure for people: bytes in KiB to GiB, money in dollars, 3 significant digits."""
    value, unit = figure.value, figure.unit
    if value is None:
        return "not known"
    if unit == "bytes":
        return _size(value)
    if unit == "USD":
        return f"${value:,.3f}"
    shown = f"{value:,}" if isinstance(value, int) else f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"
    return f"{shown} {unit}"


TEMPLATES.env.filters["ago"] = _ago
TEMPLATES.env.filters["figure"] = _figure
TEMPLATES.env.filters["when"] = lambda m: m.strftime("%Y-%m-%d %H:%M:%S UTC") if m else ""
TEMPLATES.env.globals["charts"] = charts


def page(request: Request, visit: Visit, template: str, status: int = 200, **context) -> HTMLResponse:
    response = TEMPLATES.TemplateResponse(request, template, {"visit": visit, **context},
                                          status_code=status)
    response.headers.update(SECURITY_HEADERS)
    return response


def error_page(request: Request, status: int, message: str, hint: str = "") -> HTMLResponse:
    return page(request, visit_of(session_of(request), request), "error.html", status=status,
                status_code=status, message=message, hint=hint)


def _refused(request: Request, error: LoraplaneError) -> HTMLResponse:
    # The error page answers instead of the error, so the request session would commit: undo
    # what the request did first.
    discard(request)
    return error_page(request, error.status, error.message, error.hint)


def see_other(url: str) -> RedirectResponse:
    response = RedirectResponse(url, status_code=303)
    response.headers.update(SECURITY_HEADERS)
    return response


class PageRoute(APIRoute):
    """The registry's errors become an error page with the same status; a page that needs a
    session sends the browser to sign in, and back here afterwards. Every page works in its
    request's session (web/routes.py), which the error page reads too."""

    def get_route_handler(self) -> Callable:
        handler = super().get_route_handler()

        async def guarded(request: Request) -> Response:
            try:
                return await handler(request)
            except SignInRequired:
                back = str(request.url.path) + (f"?{request.url.query}" if request.url.query else "") \
                    if request.method == "GET" else "/ui/"
                return see_other(f"/ui/sign-in?next={quote(back)}")
            except LoraplaneError as error:
                return await run_in_threadpool(_refused, request, error)
            except RequestValidationError as error:
                first = error.errors()[0]
                where = ".".join(str(part) for part in first.get("loc", ())[1:])
                return error_page(request, 422, f"{where}: {first.get('msg', 'invalid value')}",
                                  "Correct the value and try again.")

        return guarded
