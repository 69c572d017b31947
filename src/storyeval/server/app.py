"""The study server's app factory (no import-time globals: every app is built by
:func:`create_app` from validated settings and the sessions it serves)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jinja2
from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.staticfiles import StaticFiles
from starlette.responses import Response

from storyeval import __version__
from storyeval.server.db import Database
from storyeval.server.participants import get_meta, new_token, set_meta
from storyeval.server.security import SecurityHeaders
from storyeval.server.sessions import SessionPlugin
from storyeval.server.settings import Settings
from storyeval.server.templating import make_environment, render


@dataclass
class ServerState:
    """What request handlers reach through ``request.app.state.storyeval``."""

    settings: Settings
    db: Database
    templates: jinja2.Environment
    sessions: dict[tuple[str, str], SessionPlugin]
    admin_token: str
    clock: Callable[[], float]

    def session(self, kind: str, name: str) -> SessionPlugin | None:
        return self.sessions.get((kind, name))

    def page(self, name: str, context: dict[str, Any], *, status_code: int = 200) -> Response:
        return render(
            self.templates, name, {"version": __version__, **context}, status_code=status_code
        )


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
    fixes the admin token, and mounts the core routers plus each session type's routers.
    """
    from storyeval.server.routers import core

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
    packages: list[tuple[str, str]] = []
    for session in sessions:
        for package in session.template_packages:
            if package not in packages:
                packages.append(package)
    state = ServerState(
        settings=settings,
        db=db,
        templates=make_environment(packages),
        sessions=registry,
        admin_token=_admin_token(db, settings),
        clock=clock,
    )
    app = FastAPI(
        title="storyeval study server",
        version=__version__,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.storyeval = state
    app.add_middleware(SecurityHeaders)
    app.mount("/static", StaticFiles(packages=[("storyeval.server", "static")]), name="static")
    app.include_router(core.router)
    app.include_router(core.admin_router, prefix="/admin/{admin_token}")
    mounted: set[int] = set()
    for session in sessions:
        for router in session.routers:
            if id(router) not in mounted:
                app.include_router(router)
                mounted.add(id(router))
        for router in session.admin_routers:
            if id(router) not in mounted:
                app.include_router(router, prefix="/admin/{admin_token}")
                mounted.add(id(router))

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException) -> Response:
        titles = {403: "Forbidden", 404: "Not found", 409: "Conflict", 422: "Invalid answer"}
        return state.page(
            "message.html",
            {
                "title": titles.get(exc.status_code, "Error"),
                "message": str(exc.detail),
                "links": [],
            },
            status_code=exc.status_code,
        )

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> Response:
        return state.page(
            "message.html",
            {"title": "Invalid request", "message": "The request was malformed.", "links": []},
            status_code=422,
        )

    return app


def server_state(request: Request) -> ServerState:
    state: ServerState = request.app.state.storyeval
    return state
