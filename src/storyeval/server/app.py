"""The server's app factory (no import-time globals: every app is built by :func:`create_app`
from validated settings and the sessions it serves)."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from http import HTTPStatus
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.staticfiles import StaticFiles
from sqlalchemy.exc import DataError, StatementError
from starlette.exceptions import HTTPException as StarletteHTTPException
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
    405: "Method not allowed",
    409: "Conflict",
    422: "Invalid answer",
    429: "Too many requests",
}
PLAIN_DETAILS = {
    404: "There is no page at this address. Check that you copied the whole link.",
    405: "This page cannot be used that way.",
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


def _client_salt(db: Database) -> str:
    """The secret key of the address hashes (made once per database, kept across restarts and
    shared by the worker processes)."""

    def work(conn: Any) -> str:
        stored = get_meta(conn, "client_salt")
        if stored:
            return stored
        salt = new_token()
        set_meta(conn, "client_salt", salt)
        return salt

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
    db = database or Database(
        settings.database_url, background_checkpoints=True, sqlite_sync=settings.sqlite_sync
    )
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
        client_salt=_client_salt(db),
    )
    for name in dict.fromkeys(n for s in sessions for n in s.template_names()):
        state.templates.get_template(name)  # compile now, not on a participant's request

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        import gc

        import anyio.to_thread

        # few threads: SQLite serialises writers, and every thread competes for the GIL
        anyio.to_thread.current_default_thread_limiter().total_tokens = settings.threads
        gc.freeze()  # the objects made at start-up live as long as the server: skip them in GC
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
    app.add_middleware(SecurityHeaders, scripts=True)
    app.mount("/static", StaticFiles(packages=[("storyeval.server", "static")]), name="static")
    mounted: set[int] = set()
    kinds = [SESSION_KINDS.get(kind) for kind in dict.fromkeys(s.kind for s in sessions)]

    def mount(routers: Sequence[APIRouter], prefix: str = "") -> None:
        for router in routers:
            if id(router) not in mounted:
                app.include_router(router, prefix=prefix)
                mounted.add(id(router))

    # participant pages first: routes are matched in order, and most requests are theirs
    mount([router for kind in kinds for router in kind.routers if kind.first])
    mount([core.router])
    mount([core.admin_router], "/admin/{admin_token}")
    mount([router for kind in kinds for router in kind.routers])
    mount([router for kind in kinds for router in kind.admin_routers], "/admin/{admin_token}")
    _error_pages(app, state)
    return app


def _error_pages(app: FastAPI, state: ServerState) -> None:
    """Every error is the same HTML page with a 4xx status; database errors caused by the
    input (PostgreSQL refuses a NUL byte, say) are a 400, logged without their parameters."""

    @app.exception_handler(StarletteHTTPException)  # the router's 404 and 405 too
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        detail = str(exc.detail)
        if exc.status_code in PLAIN_DETAILS and detail == HTTPStatus(exc.status_code).phrase:
            detail = PLAIN_DETAILS[exc.status_code]  # the router's own 404/405
        response = state.message(
            TITLES.get(exc.status_code, "Error"), detail, status_code=exc.status_code
        )
        if exc.status_code == 429:
            response.headers["Retry-After"] = "60"
        for name, value in (exc.headers or {}).items():  # e.g. Allow on a 405
            response.headers.setdefault(name, value)
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


SERVE_ENVIRONMENT = "STORYEVAL_SERVE"
"""The variable through which ``storyeval serve --workers N`` passes the session files and
settings to each worker process (see :func:`app_from_environment`)."""


def app_from_environment() -> FastAPI:
    """The app of one worker process of ``storyeval serve --workers N``: the session files and
    settings come from :data:`SERVE_ENVIRONMENT` (JSON). The parent process has set up the
    database already, so each worker's setup finds everything in place; quotas, idempotence and
    the participant state machine hold across workers because they are database transactions.
    """
    import json
    import os

    from storyeval.server.kinds import load_session

    config = json.loads(os.environ[SERVE_ENVIRONMENT])
    sessions = [load_session(path) for path in config["files"]]
    return create_app(Settings(**config["settings"]), sessions)


__all__ = ["SERVE_ENVIRONMENT", "ServerState", "app_from_environment", "create_app", "server_state"]
