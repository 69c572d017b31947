"""Writer pages of a collaborative-writing session (``/cyoa/<token>/...`` and ``/mil/<token>/...``).

Plain HTML forms, no JavaScript: every step is a POST committed before the browser is
redirected (303) to the next page, and the waiting page refreshes itself (``<meta refresh>``)
until the suggestions are ready. Every page re-derives where the writer is from the stored
session; a request for another page redirects there, and a form carries the step it was
rendered for, so a double submission is not applied twice.

CYOA (seed 000, Fig. A.1): write a line (20-260 characters) -> wait -> choose one of two
suggestions shown in random order -> edit it (switching to the other is allowed) -> add it;
five rounds; then the Likert statements and open questions. MIL (chapter 2): write a sentence
-> the machine's next sentence appears in the edit box -> edit it -> add it; ten sentences.
"""

# No ``from __future__ import annotations`` here: FastAPI resolves the dependency annotations
# of the handlers, which refer to the local ``Who`` alias, at definition time.
import contextlib
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import FileResponse, RedirectResponse, Response
from sqlalchemy import Connection

from storyeval.collab.config import IMAGE_TYPES
from storyeval.collab.session import TurnError, WritingSession
from storyeval.server import writing_store
from storyeval.server.app import ServerState, server_state
from storyeval.server.deps import participant_of
from storyeval.server.participants import Participant, mark_finished, touch
from storyeval.server.sessions import SessionPlugin

MAX_FORM_TEXT = 5000
PAGES = {
    None: "welcome",
    "write": "write",
    "generating": "wait",
    "choose": "choose",
    "edit": "edit",
    "failed": "failed",
    "survey": "survey",
    "done": "done",
}


def _redirect(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303)


async def _form(request: Request) -> dict[str, str]:
    form = await request.form()
    return {k: str(v)[:MAX_FORM_TEXT] for k, v in form.items() if isinstance(v, str)}


def make_router(kind: str) -> APIRouter:
    """The writer pages for session type ``kind`` (``cyoa`` or ``mil``)."""
    router = APIRouter(prefix=f"/{kind}/{{token}}")
    Who = Annotated[tuple[Participant, SessionPlugin], Depends(participant_of(kind))]

    def plugin_of(who: tuple[Participant, SessionPlugin]) -> tuple[Participant, Any]:
        participant, plugin = who
        return participant, plugin

    def url(token: str, page: str) -> str:
        return f"/{kind}/{token}/{page}" if page != "welcome" else f"/{kind}/{token}/welcome"

    def load(state: ServerState, plugin: Any, participant: Participant) -> WritingSession | None:
        with state.db.read() as conn:
            return writing_store.load(conn, plugin.config, participant.id)

    def where(session: WritingSession | None) -> str:
        return PAGES[session.phase if session is not None else None]

    def serve(
        state: ServerState, plugin: Any, participant: Participant, page: str
    ) -> tuple[WritingSession | None, Response | None]:
        """Load the session; redirect unless ``page`` is the writer's current page; note when
        a page is first delivered."""
        session = load(state, plugin, participant)
        current = where(session)
        if current != page:
            return session, _redirect(url(participant.token, current))
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

    def context(
        plugin: Any, participant: Participant, session: WritingSession | None
    ) -> dict[str, Any]:
        config = plugin.config
        prompt = (session.data.get("prompt") if session is not None else None) or {}
        turns = session.submitted_turns() if session is not None else []
        return {
            "kind": kind,
            "config": config,
            "token": participant.token,
            "base": f"/{kind}/{participant.token}",
            "session": session,
            "turns": turns,
            "prompt": prompt,
            "has_image": bool(prompt.get("image")),
            "min_chars": config.min_chars,
            "max_chars": config.max_chars,
            "round": session.round if session is not None else 1,
            "total_rounds": config.rounds,
            "sentences": getattr(config, "sentences", None),
            "step": session.step_token() if session is not None else "",
            "error": None,
            "text": "",
        }

    def show(
        request: Request,
        who: tuple[Participant, SessionPlugin],
        page: str,
        fill: Callable[[ServerState, Participant, WritingSession | None], dict[str, Any]]
        | None = None,
    ) -> Response:
        """The writer's page ``page`` (``templates/writing/<page>.html``) with the common context
        and what ``fill`` adds, or a redirect to the page the writer is on."""
        participant, plugin = plugin_of(who)
        state = server_state(request)
        session, redirect = serve(state, plugin, participant, page)
        if redirect is not None:
            return redirect
        values = context(plugin, participant, session)
        if fill is not None:
            values.update(fill(state, participant, session))
        return state.page(f"writing/{page}.html", values)

    def act(
        state: ServerState,
        plugin: Any,
        participant: Participant,
        form: dict[str, str],
        action: Callable[[WritingSession, float], Any],
    ) -> tuple[str, Any]:
        """Apply ``action`` if the form was rendered for the current step; returns
        ``("ok" | "stale" | "missing", result)``. TurnError propagates (rolled back)."""
        now = state.clock()
        outcome: dict[str, Any] = {}

        def work(conn: Connection) -> Any:
            touch(conn, participant.id, now)

            def apply(session: WritingSession) -> Any:
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
            plugin.queue(participant.id, result)  # suggestion requests, after the commit
        return "ok", session

    # ----------------------------------------------------------------- entry and consent

    @router.get("/")
    def entry(request: Request, token: str, who: Who) -> Response:
        participant, plugin = plugin_of(who)
        session = load(server_state(request), plugin, participant)
        return _redirect(url(token, where(session)))

    @router.get("/welcome")
    def welcome(request: Request, token: str, who: Who) -> Response:
        return show(request, who, "welcome")

    @router.post("/start")
    async def start(request: Request, token: str, who: Who) -> Response:
        participant, plugin = plugin_of(who)
        state = server_state(request)
        form = await _form(request)
        if form.get("consent") != "yes":
            page = context(plugin, participant, None)
            page["error"] = "Please confirm that you have read the information above."
            return state.page("writing/welcome.html", page, status_code=422)
        now = state.clock()
        state.db.run(lambda conn: writing_store.start(conn, plugin.config, participant, now))
        return _redirect(f"/{kind}/{token}/")

    # ----------------------------------------------------------------- writing alone

    @router.get("/write")
    def write(request: Request, token: str, who: Who) -> Response:
        return show(request, who, "write")

    @router.post("/write")
    async def write_submit(request: Request, token: str, who: Who) -> Response:
        participant, plugin = plugin_of(who)
        state = server_state(request)
        form = await _form(request)
        text = form.get("text", "")
        try:
            status, _ = act(
                state, plugin, participant, form, lambda s, now: s.submit_text(text, now=now)
            )
        except TurnError as exc:
            page = context(plugin, participant, load(state, plugin, participant))
            page.update(error=str(exc), text=text)
            return state.page("writing/write.html", page, status_code=422)
        if status == "missing":
            return _redirect(url(token, "welcome"))
        return _redirect(f"/{kind}/{token}/")

    # ----------------------------------------------------------------- waiting for suggestions

    @router.get("/wait")
    def wait(request: Request, token: str, who: Who) -> Response:
        response = show(request, who, "wait")
        if not isinstance(response, RedirectResponse):
            response.headers["Refresh"] = "1"  # as the page's <meta refresh>: no JavaScript
        return response

    @router.get("/failed")
    def failed(request: Request, token: str, who: Who) -> Response:
        return show(request, who, "failed")

    @router.post("/retry")
    async def retry(request: Request, token: str, who: Who) -> Response:
        participant, plugin = plugin_of(who)
        state = server_state(request)
        form = await _form(request)
        with contextlib.suppress(TurnError):  # not failed any more: the entry page shows where
            act(state, plugin, participant, form, lambda s, now: s.retry(now=now))
        return _redirect(f"/{kind}/{token}/")

    # ----------------------------------------------------------------- choosing (CYOA)

    def options(session: WritingSession) -> list[dict[str, Any]]:
        labels = getattr(session.config, "option_labels", ("Option 1", "Option 2"))
        turn = session.current_turn() or {}
        return [
            {
                "position": s["position"],
                "label": labels[s["position"] - 1]
                if s["position"] <= len(labels)
                else f"Option {s['position']}",
                "text": s["text"],
                "chosen": s["generator"] == turn.get("chosen"),
            }
            for s in session.ordered_suggestions()
        ]

    def generator_at(session: WritingSession, position: str) -> str:
        for suggestion in session.ordered_suggestions():
            if str(suggestion["position"]) == position:
                return str(suggestion["generator"])
        raise TurnError("There is no such suggestion.")

    def suggestions_page(
        _: ServerState, __: Participant, session: WritingSession | None
    ) -> dict[str, Any]:
        """The suggestions of the current turn and the text for the edit box."""
        if session is None:  # the choose and edit pages are reached only inside a session
            return {}
        return {"options": options(session), "text": session.edit_text()}

    if kind == "cyoa":

        @router.get("/choose")
        def choose(request: Request, token: str, who: Who) -> Response:
            return show(request, who, "choose", suggestions_page)

        @router.post("/choose")
        async def choose_submit(request: Request, token: str, who: Who) -> Response:
            participant, plugin = plugin_of(who)
            state = server_state(request)
            form = await _form(request)
            position = form.get("option", "")
            try:
                act(
                    state,
                    plugin,
                    participant,
                    form,
                    lambda s, now: s.choose(generator_at(s, position), now=now),
                )
            except TurnError as exc:
                raise HTTPException(status_code=422, detail=str(exc)) from None
            return _redirect(f"/{kind}/{token}/")

    # ----------------------------------------------------------------- editing

    @router.get("/edit")
    def edit(request: Request, token: str, who: Who) -> Response:
        return show(request, who, "edit", suggestions_page)

    @router.post("/edit")
    async def edit_submit(request: Request, token: str, who: Who) -> Response:
        participant, plugin = plugin_of(who)
        state = server_state(request)
        form = await _form(request)
        text = form.get("text", "")
        action = form.get("action", "add")
        try:
            if action.startswith("switch-") and kind == "cyoa":
                position = action.removeprefix("switch-")
                act(
                    state,
                    plugin,
                    participant,
                    form,
                    lambda s, now: s.choose(generator_at(s, position), now=now, draft=text),
                )
            else:
                act(state, plugin, participant, form, lambda s, now: s.submit_text(text, now=now))
        except TurnError as exc:
            session = load(state, plugin, participant)
            if session is None or session.phase != "edit":
                return _redirect(f"/{kind}/{token}/")
            page = context(plugin, participant, session)
            page.update(options=options(session), text=text, error=str(exc))
            return state.page("writing/edit.html", page, status_code=422)
        return _redirect(f"/{kind}/{token}/")

    # ----------------------------------------------------------------- survey and completion

    @router.get("/survey")
    def survey(request: Request, token: str, who: Who) -> Response:
        return show(request, who, "survey", lambda *_: {"values": {}, "errors": []})

    @router.post("/survey")
    async def survey_submit(request: Request, token: str, who: Who) -> Response:
        participant, plugin = plugin_of(who)
        state = server_state(request)
        form = await _form(request)
        config = plugin.config
        likert: dict[str, int] = {}
        errors = []
        for statement in config.likert.statements:
            raw = form.get(f"likert-{statement.name}", "")
            if raw.isdigit() and 1 <= int(raw) <= config.likert.scale:
                likert[statement.name] = int(raw)
            else:
                errors.append(f"likert-{statement.name}")
        answers = {q.name: form.get(f"q-{q.name}", "") for q in config.questions}
        errors += [
            f"q-{q.name}" for q in config.questions if q.required and not answers[q.name].strip()
        ]
        if errors:
            page = context(plugin, participant, load(state, plugin, participant))
            page.update(
                values=form, errors=errors, error="Please answer every question marked below."
            )
            return state.page("writing/survey.html", page, status_code=422)

        def finish(session: WritingSession, now: float) -> None:
            session.submit_survey(likert, answers, now=now)

        try:
            status, _ = act(state, plugin, participant, form, finish)
        except TurnError as exc:
            raise HTTPException(status_code=422, detail=str(exc)) from None
        if status == "ok":
            now = state.clock()
            state.db.run(
                lambda conn: mark_finished(conn, participant.id, now, code=config.completion.code)
            )
        return _redirect(f"/{kind}/{token}/")

    @router.get("/done")
    def done(request: Request, token: str, who: Who) -> Response:
        configured = plugin_of(who)[1].config.completion.code

        def fill(
            state: ServerState, participant: Participant, session: WritingSession | None
        ) -> dict[str, Any]:
            now = state.clock()
            code = state.db.run(
                lambda conn: mark_finished(conn, participant.id, now, code=configured)
            )
            return {"code": code, "story": session.story() if session is not None else ""}

        return show(request, who, "done", fill)

    # ----------------------------------------------------------------- picture prompt

    @router.get("/image")
    def image(request: Request, token: str, who: Who) -> Response:
        participant, plugin = plugin_of(who)
        state = server_state(request)
        session = load(state, plugin, participant)
        path = plugin.image_path(session) if session is not None else None
        if path is None or not path.is_file():
            raise HTTPException(status_code=404, detail="There is no picture for this story.")
        return FileResponse(path, media_type=IMAGE_TYPES[path.suffix.lower()])

    return router
