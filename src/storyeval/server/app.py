"""The server's app factory (no import-time globals: every app is built by :func:`create_app`
from validated settings and the sessions it serves)."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.staticfiles import StaticFiles
from sqlalchemy.exc import DataError, StatementError
from starlette.responses import Response

from storyeval import __version__
from storyeval.server.db import Database
from storyeval.server.kinds import SESSION_KINDS
from storyeval.server.participants import get_meta, new_token, set_meta
from storyeval.server.routers import core
from storyeval.server.security import SecurityHeaders
from storyeval.server.sessions import SessionPlugin
from storyeval.server.settings import Settings
from storyeval.server.state import ServerState, server_state
from storyeval.server.templating import make_environment

log = logging.getLogger("storyeval.server")
TITLES = {
    400: "Bad request",
    403: "Forbidden",
    404: "Not found",
    409: "Conflict",
    422: "Invalid answer",
    429: "Too many requests",
}


def _admin_token(db: Database, settings: Settings) -> str:
    def work(conn: Any) -> str:
        if settings.admin_token is not None:
            set_meta(conn, "admin_token", settings.admin_token)
            return settings.admin_token
        stored = get_meta(conn, "admin_token")
        if stored:
            return stored
        token = new_token()
        set_meta(conn, "admin_token", token)
        return token

    return db.run(work)


def create_app(
    settings: Settings,
    sessions: Sequence[SessionPlugin],
    *,
    database: Database | None = None,
    clock: Callable[[], float] = time.time,
) -> FastAPI:
    """Build the server for ``sessions`` (e.g. one study).

    Creates the tables, registers each session (refusing a changed study under an old name),
    fixes the admin token, and mounts the core routers plus the routers of each session kind
    served.
    """
    if not sessions:
        raise ValueError("create_app needs at least one session (e.g. a study)")
    db = database or Database(settings.database_url)
    db.create_all()
    registry: dict[tuple[str, str], SessionPlugin] = {}
    for session in sessions:
        key = (session.kind, session.name)
        if key in registry:
            raise ValueError(f"two sessions are named {session.kind}/{session.name}")
        session.setup(db, now=clock())
        registry[key] = session
    state = ServerState(
        settings=settings,
        db=db,
        templates=make_environment(),
        sessions=registry,
        admin_token=_admin_token(db, settings),
        clock=clock,
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        for session in sessions:
            session.shutdown()

    app = FastAPI(
        title="storyeval study server",
        version=__version__,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        lifespan=lifespan,
    )
    app.state.storyeval = state
    app.add_middleware(SecurityHeaders)
    app.mount("/static", StaticFiles(packages=[("storyeval.server", "static")]), name="static")
    app.include_router(core.router)
    app.include_router(core.admin_router, prefix="/admin/{admin_token}")
    mounted: set[int] = set()
    for kind in dict.fromkeys(s.kind for s in sessions):
        spec = SESSION_KINDS.get(kind)
        for router in spec.routers:
            if id(router) not in mounted:
                app.include_router(router)
                mounted.add(id(router))
        for router in spec.admin_routers:
            if id(router) not in mounted:
                app.include_router(router, prefix="/admin/{admin_token}")
                mounted.add(id(router))
    _error_pages(app, state)
    return app


def _error_pages(app: FastAPI, state: ServerState) -> None:
    """Every error is the same HTML page with a 4xx status; database errors caused by the
    input (PostgreSQL refuses a NUL byte, say) are a 400, logged without their parameters."""

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException) -> Response:
        response = state.message(
            TITLES.get(exc.status_code, "Error"), str(exc.detail), status_code=exc.status_code
        )
        if exc.status_code == 429:
            response.headers["Retry-After"] = "60"
        return response

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> Response:
        return state.message("Invalid request", "The request was malformed.", status_code=422)

    @app.exception_handler(DataError)
    async def _data_error(request: Request, exc: StatementError) -> Response:
        route = getattr(request.scope.get("route"), "path", "?")  # the template: no token
        log.warning("the database refused a value in %s %s", request.method, route)
        return state.message(
            "Bad request", "The request holds a value that cannot be stored.", status_code=400
        )


__all__ = ["ServerState", "create_app", "server_state"]
