"""Writer pages of a slogan-writing session (``/slogan/<token>/...``, Clark (2021), Figure 2.3).

Plain HTML forms, as the other writing sessions: the write page holds the keywords and the
draft (a), a *pull* button in the machine-in-the-loop condition (b), the latest suggestions
beside the draft (c) and the history of drafts and suggestions (d). A pull is stored, then
served off the request path while the page waits (``Refresh``); the final slogan leads to
the writing survey, and the last one to the final survey.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import FileResponse, RedirectResponse, Response
from sqlalchemy import Connection

from storyeval.collab.config import (
    EXPERIENCE_CHOICES,
    IMAGE_TYPES,
    USE_AGAIN_CHOICES,
    USE_AGAIN_QUESTION,
    LikertSpec,
)
from storyeval.collab.session import TurnError
from storyeval.collab.slogan import SloganSession
from storyeval.server import writing_store
from storyeval.server.participants import Participant, mark_finished, touch
from storyeval.server.routers.writing import consent_and_start
from storyeval.server.state import (
    Form,
    FormData,
    ServerState,
    Who,
    parse_int,
    participant_of,
    server_state,
    too_long,
)
from storyeval.server.writing_session import SloganSessionPlugin

router = APIRouter(prefix="/slogan/{token}")
Writer = Annotated[Who, Depends(participant_of("slogan"))]

PAGES = {
    None: "welcome",
    "write": "write",
    "generating": "wait",
    "survey": "survey",
    "final": "final",
    "done": "done",
}


def _redirect(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303)


def _parts(request: Request, who: Who) -> tuple[ServerState, Participant, SloganSessionPlugin]:
    plugin = who.session
    if not isinstance(plugin, SloganSessionPlugin):
        raise HTTPException(status_code=404, detail="This session is not being served.")
    return server_state(request), who.participant, plugin


def _base(participant: Participant) -> str:
    return f"/slogan/{participant.token}"


def _load(state: ServerState, plugin: SloganSessionPlugin, participant: Participant) -> Any:
    with state.db.read() as conn:
        return writing_store.load(conn, plugin.config, participant.id)


def _page_of(session: SloganSession | None) -> str:
    return PAGES[session.phase if session is not None else None]


def _typing(plugin: SloganSessionPlugin, form: Any, draft: str) -> dict[str, Any] | None:
    """How the final draft was written (on its last page), when the session records it."""
    if not plugin.config.record_typing:
        return None
    from storyeval.server.integrity import measure_typing

    return measure_typing(form.get("integrity:draft"), draft)


def _answers_typing(
    plugin: SloganSessionPlugin, form: Any, answers: dict[str, str]
) -> dict[str, Any]:
    """How each open answer of the final survey was written, when recorded."""
    if not plugin.config.record_typing:
        return {}
    from storyeval.server.integrity import form_signals

    typed = form_signals(
        form, [f"q-{n}" for n in answers], {f"q-{n}": t for n, t in answers.items()}
    )
    return {name: typed[f"q-{name}"] for name in answers if f"q-{name}" in typed}


def _context(participant: Participant, plugin: SloganSessionPlugin, session: Any) -> dict[str, Any]:
    task = session.current_task() if session is not None else {}
    keywords, draft = session.draft() if session is not None else ("", "")
    return {
        "kind": "slogan",
        "config": plugin.config,
        "base": _base(participant),
        "session": session,
        "task": task,
        "prompt": task.get("prompt") or {},
        "has_image": bool((task.get("prompt") or {}).get("image")),
        "history": list(reversed(task.get("pulls", [])[:-1])),
        "latest": session.last_pull() if session is not None else None,
        "keywords": keywords,
        "draft": draft,
        "step": session.step_token() if session is not None else "",
        "error": None,
        "values": {},
        "errors": [],
        "use_again_question": USE_AGAIN_QUESTION,
        "use_again_choices": USE_AGAIN_CHOICES,
        "experience_choices": EXPERIENCE_CHOICES,
        "record_typing": plugin.config.record_typing,
    }


def _show(request: Request, who: Who, page: str) -> Response:
    """The writer's page ``page``, or a redirect to the page the writer is on; notes when a
    page is first delivered."""
    state, participant, plugin = _parts(request, who)
    session = _load(state, plugin, participant)
    current = _page_of(session)
    if current != page:
        return _redirect(f"{_base(participant)}/{current}")
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
    return state.page(f"slogan/{page}.html", _context(participant, plugin, session))


def _act(
    state: ServerState,
    plugin: SloganSessionPlugin,
    participant: Participant,
    form: FormData,
    action: Callable[[SloganSession, float], Any],
) -> str:
    """Apply ``action`` if the form was rendered for the current step (``ok``, ``stale`` or
    ``missing``); a TurnError rolls back and propagates; pulls are queued after the commit."""
    now = state.clock()
    outcome: dict[str, Any] = {}

    def work(conn: Connection) -> Any:
        touch(conn, participant.id, now)

        def apply(session: SloganSession) -> Any:
            if form.get("step") != session.step_token():
                outcome["stale"] = True
                return None
            return action(session, now)

        return writing_store.step(conn, plugin.config, participant.id, now, apply)

    stepped = state.db.run(work)
    if stepped is None:
        return "missing"
    if outcome.get("stale"):
        return "stale"
    if stepped[1]:
        plugin.queue(participant.id, stepped[1])
    return "ok"


def _again(
    state: ServerState,
    plugin: SloganSessionPlugin,
    participant: Participant,
    page: str,
    updates: dict[str, Any],
) -> Response:
    """The page again with the writer's input and a message (422), or where the writer is."""
    session = _load(state, plugin, participant)
    if _page_of(session) != page:
        return _redirect(f"{_base(participant)}/")
    values = _context(participant, plugin, session)
    values.update(updates)
    return state.page(f"slogan/{page}.html", values, status_code=422)


# ----------------------------------------------------------------------------- entry and consent


@router.get("/")
def entry(request: Request, who: Writer) -> Response:
    """A writer's link: send them to the page of their current step."""
    state, participant, plugin = _parts(request, who)
    return _redirect(f"{_base(participant)}/{_page_of(_load(state, plugin, participant))}")


@router.get("/welcome")
def welcome(request: Request, who: Writer) -> Response:
    """The consent page."""
    return _show(request, who, "welcome")


@router.post("/start")
def start(request: Request, who: Writer, form: Form) -> Response:
    """Consent given: start the session (the condition and prompt order are assigned)."""
    _, participant, plugin = _parts(request, who)
    return consent_and_start(
        request,
        form,
        plugin,
        participant,
        "slogan/welcome.html",
        lambda: _context(participant, plugin, None),
    )


# ----------------------------------------------------------------------------- writing


@router.get("/write")
def write(request: Request, who: Writer) -> Response:
    """Keywords, draft, pulled suggestions beside it and the history."""
    return _show(request, who, "write")


@router.post("/write")
def write_submit(request: Request, who: Writer, form: Form) -> Response:
    """``action=pull`` asks for suggestions; ``action=submit`` submits the final slogan."""
    state, participant, plugin = _parts(request, who)
    keywords, draft = form.text("keywords"), form.text("draft")
    action = form.get("action", "submit")
    try:
        if action == "pull":
            status = _act(
                state, plugin, participant, form, lambda s, now: s.pull(keywords, draft, now=now)
            )
        elif action == "submit":
            status = _act(
                state,
                plugin,
                participant,
                form,
                lambda s, now: s.submit_slogan(
                    draft, keywords=keywords, now=now, integrity=_typing(plugin, form, draft)
                ),
            )
        else:
            raise HTTPException(status_code=422, detail="Unknown action.")
    except TurnError as exc:
        return _again(
            state,
            plugin,
            participant,
            "write",
            {"error": str(exc), "keywords": keywords, "draft": draft},
        )
    if status == "missing":
        return _redirect(f"{_base(participant)}/welcome")
    return _redirect(f"{_base(participant)}/")


@router.get("/wait")
def wait(request: Request, who: Writer) -> Response:
    """Wait while suggestions are made (refreshes itself)."""
    response = _show(request, who, "wait")
    if not isinstance(response, RedirectResponse):
        response.headers["Refresh"] = "1"
    return response


# ----------------------------------------------------------------------------- surveys


def _likert(spec: LikertSpec, form: FormData) -> tuple[dict[str, int], list[str]]:
    """The answers within the scale, and the fields missing or out of it."""
    values: dict[str, int] = {}
    errors = []
    for statement in spec.statements:
        key = f"likert-{statement.name}"
        value = parse_int(form.get(key))
        if value is not None and 1 <= value <= spec.scale:
            values[statement.name] = value
        else:
            errors.append(key)
    return values, errors


@router.get("/survey")
def survey(request: Request, who: Writer) -> Response:
    """The writing survey of the slogan just submitted."""
    return _show(request, who, "survey")


@router.post("/survey")
def survey_submit(request: Request, who: Writer, form: Form) -> Response:
    """Store the writing survey; then the next prompt or the final survey."""
    state, participant, plugin = _parts(request, who)
    likert, errors = _likert(plugin.config.likert, form)
    if errors:
        return _again(
            state,
            plugin,
            participant,
            "survey",
            {"values": form.values, "errors": errors, "error": "Please answer every question."},
        )
    try:
        _act(state, plugin, participant, form, lambda s, now: s.submit_survey(likert, now=now))
    except TurnError as exc:
        raise HTTPException(status_code=422, detail=str(exc)) from None
    return _redirect(f"{_base(participant)}/")


@router.get("/final")
def final(request: Request, who: Writer) -> Response:
    """The final survey."""
    return _show(request, who, "final")


@router.post("/final")
def final_submit(request: Request, who: Writer, form: Form) -> Response:
    """Store the final survey and finish (the completion code is issued)."""
    state, participant, plugin = _parts(request, who)
    session = _load(state, plugin, participant)
    if session is None or session.phase != "final":
        return _redirect(f"{_base(participant)}/")
    likert, errors = _likert(session.final_statements(), form)
    answers = {q.name: form.text(f"q-{q.name}") for q in session.final_questions()}
    message = None
    for name, answer in answers.items():
        long = too_long(answer)
        if long is not None:
            errors.append(f"q-{name}")
            message = long
    use_again = form.get("use_again") or None
    if session.condition == "mil" and use_again not in USE_AGAIN_CHOICES:
        errors.append("use_again")
    experience = form.get("experience") or None
    if session.config.ask_experience and experience not in dict(EXPERIENCE_CHOICES):
        errors.append("experience")
    if errors:
        return _again(
            state,
            plugin,
            participant,
            "final",
            {
                "values": form.values,
                "errors": errors,
                "error": message or "Please answer every question marked below.",
            },
        )
    try:
        status = _act(
            state,
            plugin,
            participant,
            form,
            lambda s, now: s.submit_final(
                likert,
                answers,
                use_again=use_again,
                experience=experience,
                now=now,
                integrity=_answers_typing(plugin, form, answers),
            ),
        )
    except TurnError as exc:
        raise HTTPException(status_code=422, detail=str(exc)) from None
    if status == "ok":
        now = state.clock()
        code = plugin.config.completion.code
        state.db.run(lambda conn: mark_finished(conn, participant.id, now, code=code))
    return _redirect(f"{_base(participant)}/")


@router.get("/done")
def done(request: Request, who: Writer) -> Response:
    """The completion page."""
    state, participant, plugin = _parts(request, who)
    session = _load(state, plugin, participant)
    if _page_of(session) != "done":
        return _redirect(f"{_base(participant)}/{_page_of(session)}")
    now = state.clock()
    configured = plugin.config.completion.code
    code = state.db.run(lambda conn: mark_finished(conn, participant.id, now, code=configured))
    values = _context(participant, plugin, session)
    values.update(code=code, slogans=[t["final"] for t in session.tasks])
    return state.page("slogan/done.html", values)


@router.get("/image")
def image(request: Request, who: Writer) -> Response:
    """The picture of the current prompt."""
    state, participant, plugin = _parts(request, who)
    session = _load(state, plugin, participant)
    path = None
    with contextlib.suppress(KeyError, IndexError):
        path = plugin.image_path(session) if session is not None else None
    if path is None or not path.is_file():
        raise HTTPException(status_code=404, detail="There is no picture for this prompt.")
    return FileResponse(path, media_type=IMAGE_TYPES[path.suffix.lower()])
