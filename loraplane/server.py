"""The registry process's ASGI application: the registry's API with the review dashboard mounted
beside it. Composed here, above both, so that registry/ never imports web/.

    uvicorn --factory loraplane.server:create_app
"""

from __future__ import annotations

from fastapi import FastAPI

from registry.app import create_app as create_registry_app
from web.routes import STATIC, router as dashboard


def create_app() -> FastAPI:
    app = create_registry_app()
    # After the API's routes, as before: a dashboard path never shadows an API path.
    app.include_router(dashboard)
    app.mount("/ui/static", STATIC, name="dashboard-static")
    return app
