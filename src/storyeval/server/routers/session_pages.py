"""What every writing session's pages share (collaborative stories and slogans): where the
writer is, serving a page, applying a step once, and the routes every session has.

Each page re-derives where the writer is from the stored session; a request for another page
redirects there (303), and a form carries the step it was rendered for, so a double submission
is not applied twice. A step is committed before the browser is redirected, and the
suggestions it asks for are queued after the commit.
"""

# No ``from __future__ import annotations`` here: the shared routes are made in a function, and
# FastAPI reads their parameters' annotations (the router's ``Writer`` dependency) at run time.

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import FileResponse, RedirectResponse, Response
from sqlalchemy import Connection

from storyeval.collab.config import IMAGE_TYPES
from storyeval.server import writing_store
from storyeval.server.participants import Participant, touch
from storyeval.server.state import (
    BUSY,
    Form,
    FormData,
    ServerState,
    Who,
    admission,
    server_state,
)

#: What a page adds to the common context: ``fill(state, participant, session)``.
Fill = Callable[[ServerState, Participant, Any], dict[str, Any]]


def redirect(url: str) -> RedirectResponse:
    """See other (303): the browser GETs ``url`` after a POST."""
    return RedirectResponse(url, status_code=303)


@dataclass(frozen=True)
class SessionPages:
    """The pages of one kind of writing session.

    Attributes
    ----------
    templates : str
        The folder of its templates (``writing``, ``slogan``).
    pages : mapping
        The page of each session phase (``None``: not started).
    plugin_type : type
        The session plug-in that serves it (others get 404).
    context : callable
        ``context(plugin, participant, session)``: what every page shows.
    """

    templates: str
    pages: Mapping[str | None, str]
    plugin_type: type
    context: Callable[[Any, Participant, Any], dict[str, Any]]

    def parts(self, request: Request, who: Who) -> tuple[ServerState, Participant, Any]:
        """The server state, the writer and the session plug-in (404 if another serves it)."""
        plugin = who.session
        if not isinstance(plugin, self.plugin_type):
            raise HTTPException(status_code=404, detail="This session is not being served.")
        return server_state(request), who.participant, plugin

    @staticmethod
    def base(plugin: Any, participant: Participant) -> str:
        """The writer's pages: ``/<kind>/<token>``."""
        return f"/{plugin.kind}/{participant.token}"

    @staticmethod
    def load(state: ServerState, plugin: Any, participant: Participant) -> Any:
        """The writer's stored session (None before consent)."""
        with state.db.read() as conn:
            return writing_store.load(conn, plugin.config, participant.id)

    def page_of(self, session: Any) -> str:
        """The page of the session's phase."""
        return self.pages[session.phase if session is not None else None]

    def serve(
        self, state: ServerState, plugin: Any, participant: Participant, page: str
    ) -> tuple[Any, Response | None]:
        """Load the session; a redirect unless ``page`` is the writer's current page; note
        when a page is first delivered."""
        session = self.load(state, plugin, participant)
        current = self.page_of(session)
        if current != page:
            return session, redirect(f"{self.base(plugin, participant)}/{current}")
        if session is not None and session.needs_serving_note():
            now = state.clock()

            def work(conn: Connection) -> Any:
                touch(conn, participant.id, now)
                return writing_store.step(
                    conn, plugin.config, participant.id, now, lambda s: s.note_served(now)
                )

            stepped = state.db.run(work)
            if stepped is not None:
                session = stepped[0]
        return session, None

    def show(self, request: Request, who: Who, page: str, fill: Fill | None = None) -> Response:
        """The writer's page ``page`` with the common context and what ``fill`` adds, or a
        redirect to the page the writer is on."""
        state, participant, plugin = self.parts(request, who)
        session, moved = self.serve(state, plugin, participant, page)
        if moved is not None:
            return moved
        values = self.context(plugin, participant, session)
        if fill is not None:
            values.update(fill(state, participant, session))
        return state.page(f"{self.templates}/{page}.html", values)

    def again(
        self,
        state: ServerState,
        plugin: Any,
        participant: Participant,
        page: str,
        updates: Mapping[str, Any],
    ) -> Response:
        """The page again with the writer's input and a message (422), or a redirect where
        the writer is."""
        session = self.load(state, plugin, participant)
        if self.page_of(session) != page:
            return redirect(f"{self.base(plugin, participant)}/")
        values = self.context(plugin, participant, session)
        values.update(updates)
        return state.page(f"{self.templates}/{page}.html", values, status_code=422)

    def start(
        self, request: Request, form: FormData, plugin: Any, participant: Participant
    ) -> Response:
        """Start a writer's session once they consent; the consent page again (422) without
        the box ticked. Open-enrollment starts are rate limited per client."""
        state = server_state(request)
        now = state.clock()
        admit = admission(request, Who(participant, plugin), now)
        if form.get("consent") != "yes":
            values = self.context(plugin, participant, None)
            values["error"] = "Please confirm that you have read the information above."
            return state.page(f"{self.templates}/welcome.html", values, status_code=422)

        def work(conn: Connection) -> str | None:
            if (
                admit is not None
                and writing_store.load(conn, plugin.config, participant.id) is None
            ):
                verdict = admit(conn, participant)
                if verdict is not None:
                    return verdict
            writing_store.start(conn, plugin.config, participant, now)
            return None

        verdict = state.db.run(work)
        if verdict == "full":
            return state.message(
                "The study is full", "Thank you for your interest: all places are taken."
            )
        if verdict == "busy":
            return state.message("Too many participants from your network", BUSY, status_code=429)
        return redirect(f"{self.base(plugin, participant)}/")

    @staticmethod
    def act(
        state: ServerState,
        plugin: Any,
        participant: Participant,
        form: FormData,
        action: Callable[[Any, float], Any],
    ) -> tuple[str, Any]:
        """Apply ``action`` if the form was rendered for the current step; returns
        ``("ok" | "stale" | "missing", session)``. A TurnError propagates (rolled back).
        Suggestion requests the action makes are queued after the commit."""
        now = state.clock()
        outcome: dict[str, Any] = {}

        def work(conn: Connection) -> Any:
            touch(conn, participant.id, now)

            def apply(session: Any) -> Any:
                if form.get("step") != session.step_token():
                    outcome["stale"] = True
                    return None
                return action(session, now)

            return writing_store.step(conn, plugin.config, participant.id, now, apply)

        stepped = state.db.run(work)
        if stepped is None:
            return "missing", None
        session, result = stepped
        if outcome.get("stale"):
            return "stale", None
        if result:
            plugin.queue(participant.id, result)
        return "ok", session


def add_shared_routes(router: APIRouter, pages: SessionPages, writer: Any) -> None:
    """The routes every writing session has: its entry link, the consent page and its form,
    the waiting page and the prompt's picture (``writer``: the router's participant
    dependency)."""

    @router.get("/")
    def entry(request: Request, who: writer) -> Response:
        """A writer's link: send them to the page of their current step."""
        state, participant, plugin = pages.parts(request, who)
        session = pages.load(state, plugin, participant)
        return redirect(f"{pages.base(plugin, participant)}/{pages.page_of(session)}")

    @router.get("/welcome")
    def welcome(request: Request, who: writer) -> Response:
        """The consent page."""
        return pages.show(request, who, "welcome")

    @router.post("/start")
    def start_session(request: Request, who: writer, form: Form) -> Response:
        """Consent given: start the writer's session."""
        _, participant, plugin = pages.parts(request, who)
        return pages.start(request, form, plugin, participant)

    @router.get("/wait")
    def wait(request: Request, who: writer) -> Response:
        """Wait while the suggestions are made (refreshes itself)."""
        response = pages.show(request, who, "wait")
        if not isinstance(response, RedirectResponse):
            response.headers["Refresh"] = "1"  # as the page's <meta refresh>: no JavaScript
        return response

    @router.get("/image")
    def image(request: Request, who: writer) -> Response:
        """The picture of the current prompt."""
        state, participant, plugin = pages.parts(request, who)
        session = pages.load(state, plugin, participant)
        path = None
        with contextlib.suppress(KeyError, IndexError):
            path = plugin.image_path(session) if session is not None else None
        if path is None or not path.is_file():
            raise HTTPException(status_code=404, detail="There is no picture for this prompt.")
        return FileResponse(path, media_type=IMAGE_TYPES[path.suffix.lower()])
