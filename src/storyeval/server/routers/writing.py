"""Writer pages of a collaborative-writing session (``/cyoa/<token>/...`` and ``/mil/<token>/...``).

Plain HTML forms, no JavaScript: every step is a POST committed before the browser is
redirected (303) to the next page, and the waiting page refreshes itself (``Refresh``
header) until the suggestions are ready. Every page re-derives where the writer is from the
stored session; a request for another page redirects there, and a form carries the step it was
rendered for, so a double submission is not applied twice.

CYOA (Clark 2021, Fig. A.1): write a line (20-260 characters) -> wait -> choose one of two
suggestions shown in random order -> edit it (switching to the other is allowed) -> add it;
five rounds; then the Likert statements and open questions. MIL (chapter 2): write a sentence
-> the machine's next sentence appears in the edit box -> edit it -> add it; ten sentences.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import FileResponse, RedirectResponse, Response
from sqlalchemy import Connection

from storyeval.collab.config import (
    IMAGE_TYPES,
    USE_AGAIN_CHOICES,
    USE_AGAIN_QUESTION,
    SloganConfig,
)
from storyeval.collab.session import TurnError, WritingSession
from storyeval.server import writing_store
from storyeval.server.participants import Participant, mark_finished, touch
from storyeval.server.state import (
    BUSY,
    Form,
    FormData,
    ServerState,
    Who,
    admission,
    parse_int,
    participant_of,
    server_state,
    too_long,
)
from storyeval.server.writing_session import WRITING_KINDS, WritingSessionPlugin

router = APIRouter(prefix="/{kind}/{token}")
Writer = Annotated[Who, Depends(participant_of(*WRITING_KINDS))]

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


def _parts(request: Request, who: Who) -> tuple[ServerState, Participant, WritingSessionPlugin]:
    plugin = who.session
    if not isinstance(plugin, WritingSessionPlugin):
        raise HTTPException(status_code=404, detail="This session is not being served.")
    return server_state(request), who.participant, plugin


def _base(plugin: WritingSessionPlugin, participant: Participant) -> str:
    return f"/{plugin.kind}/{participant.token}"


def _load(state: ServerState, plugin: WritingSessionPlugin, participant: Participant) -> Any:
    with state.db.read() as conn:
        return writing_store.load(conn, plugin.config, participant.id)


def _page_of(session: WritingSession | None) -> str:
    return PAGES[session.phase if session is not None else None]


def _serve(
    state: ServerState, plugin: WritingSessionPlugin, participant: Participant, page: str
) -> tuple[WritingSession | None, Response | None]:
    """Load the session; redirect unless ``page`` is the writer's current page; note when a
    page is first delivered."""
    session = _load(state, plugin, participant)
    current = _page_of(session)
    if current != page:
        return session, _redirect(f"{_base(plugin, participant)}/{current}")
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


def _context(
    plugin: WritingSessionPlugin, participant: Participant, session: WritingSession | None
) -> dict[str, Any]:
    config = plugin.config
    assert not isinstance(config, SloganConfig)  # slogan sessions have their own router
    prompt = (session.data.get("prompt") if session is not None else None) or {}
    return {
        "kind": plugin.kind,
        "config": config,
        "token": participant.token,
        "base": _base(plugin, participant),
        "session": session,
        "turns": session.submitted_turns() if session is not None else [],
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
        "record_typing": config.record_typing,
        "use_again_question": USE_AGAIN_QUESTION,
        "use_again_choices": USE_AGAIN_CHOICES,
    }


def _typing(plugin: WritingSessionPlugin, form: FormData, texts: dict[str, str]) -> dict[str, Any]:
    """How each free-text field was written, when the session records it."""
    if not plugin.config.record_typing:
        return {}
    from storyeval.server.integrity import form_signals

    return form_signals(form, texts, texts)


Fill = Callable[[ServerState, Participant, WritingSession | None], dict[str, Any]]


def _show(request: Request, who: Who, page: str, fill: Fill | None = None) -> Response:
    """The writer's page ``page`` (``templates/writing/<page>.html``) with the common context
    and what ``fill`` adds, or a redirect to the page the writer is on."""
    state, participant, plugin = _parts(request, who)
    session, redirect = _serve(state, plugin, participant, page)
    if redirect is not None:
        return redirect
    values = _context(plugin, participant, session)
    if fill is not None:
        values.update(fill(state, participant, session))
    return state.page(f"writing/{page}.html", values)


def _act(
    state: ServerState,
    plugin: WritingSessionPlugin,
    participant: Participant,
    form: FormData,
    action: Callable[[WritingSession, float], Any],
) -> tuple[str, Any]:
    """Apply ``action`` if the form was rendered for the current step; returns
    ``("ok" | "stale" | "missing", result)``. TurnError propagates (rolled back). Suggestion
    requests the action makes are queued after the commit."""
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
        plugin.queue(participant.id, result)
    return "ok", session


def _options(session: WritingSession) -> list[dict[str, Any]]:
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


def _generator_at(session: WritingSession, position: str) -> str:
    for suggestion in session.ordered_suggestions():
        if str(suggestion["position"]) == position:
            return str(suggestion["generator"])
    raise TurnError("There is no such suggestion.")


def _suggestions(_: ServerState, __: Participant, session: WritingSession | None) -> dict[str, Any]:
    """The suggestions of the current turn and the text for the edit box."""
    if session is None:  # the choose and edit pages are reached only inside a session
        return {}
    return {"options": _options(session), "text": session.edit_text()}


# ----------------------------------------------------------------------------- entry and consent


def consent_and_start(
    request: Request,
    form: FormData,
    plugin: WritingSessionPlugin,
    participant: Participant,
    page: str,
    context: Callable[[], dict[str, Any]],
) -> Response:
    """Start a writer's session once they consent (every writing kind); the consent page
    again (422) without the box ticked. Open-enrollment starts are rate limited per client."""
    state = server_state(request)
    now = state.clock()
    admit = admission(request, Who(participant, plugin), now)
    if form.get("consent") != "yes":
        values = context()
        values["error"] = "Please confirm that you have read the information above."
        return state.page(page, values, status_code=422)

    def work(conn: Connection) -> str | None:
        if admit is not None and writing_store.load(conn, plugin.config, participant.id) is None:
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
    return _redirect(f"/{plugin.kind}/{participant.token}/")


@router.get("/")
def entry(request: Request, who: Writer) -> Response:
    """A writer's link: send them to the page of their current step."""
    state, participant, plugin = _parts(request, who)
    session = _load(state, plugin, participant)
    return _redirect(f"{_base(plugin, participant)}/{_page_of(session)}")


@router.get("/welcome")
def welcome(request: Request, who: Writer) -> Response:
    """The consent page of a writing session."""
    return _show(request, who, "welcome")


@router.post("/start")
def start(request: Request, who: Writer, form: Form) -> Response:
    """Consent given: start the writer's session."""
    _, participant, plugin = _parts(request, who)
    return consent_and_start(
        request,
        form,
        plugin,
        participant,
        "writing/welcome.html",
        lambda: _context(plugin, participant, None),
    )


# ----------------------------------------------------------------------------- writing alone


@router.get("/write")
def write(request: Request, who: Writer) -> Response:
    """The page where the writer writes the next part of the story."""
    return _show(request, who, "write")


@router.post("/write")
def write_submit(request: Request, who: Writer, form: Form) -> Response:
    """Store the writer's text and ask the generators for suggestions."""
    state, participant, plugin = _parts(request, who)
    text = form.get("text")
    signals = _typing(plugin, form, {"text": text}).get("text")
    try:
        status, _ = _act(
            state,
            plugin,
            participant,
            form,
            lambda s, now: s.submit_text(text, now=now, integrity=signals),
        )
    except TurnError as exc:
        page = _context(plugin, participant, _load(state, plugin, participant))
        page.update(error=str(exc), text=text)
        return state.page("writing/write.html", page, status_code=422)
    if status == "missing":
        return _redirect(f"{_base(plugin, participant)}/welcome")
    return _redirect(f"{_base(plugin, participant)}/")


# ----------------------------------------------------------------------------- waiting


@router.get("/wait")
def wait(request: Request, who: Writer) -> Response:
    """Wait while the suggestions are generated (refreshes itself)."""
    response = _show(request, who, "wait")
    if not isinstance(response, RedirectResponse):
        response.headers["Refresh"] = "1"  # as the page's <meta refresh>: no JavaScript
    return response


@router.get("/failed")
def failed(request: Request, who: Writer) -> Response:
    """The page shown when generating a suggestion failed or timed out."""
    return _show(request, who, "failed")


@router.post("/retry")
def retry(request: Request, who: Writer, form: Form) -> Response:
    """Ask for the failed suggestions again."""
    state, participant, plugin = _parts(request, who)
    with contextlib.suppress(TurnError):  # not failed any more: the entry page shows where
        _act(state, plugin, participant, form, lambda s, now: s.retry(now=now))
    return _redirect(f"{_base(plugin, participant)}/")


# ----------------------------------------------------------------------------- choosing (CYOA)


@router.get("/choose")
def choose(request: Request, who: Writer) -> Response:
    """The suggestions to choose from."""
    if who.participant.kind != "cyoa":
        raise HTTPException(status_code=404, detail="This session has no choices.")
    return _show(request, who, "choose", _suggestions)


@router.post("/choose")
def choose_submit(request: Request, who: Writer, form: Form) -> Response:
    """Store the chosen suggestion (and the switches between them)."""
    state, participant, plugin = _parts(request, who)
    if plugin.kind != "cyoa":
        raise HTTPException(status_code=404, detail="This session has no choices.")
    position = form.get("option")
    try:
        _act(
            state,
            plugin,
            participant,
            form,
            lambda s, now: s.choose(_generator_at(s, position), now=now),
        )
    except TurnError as exc:
        raise HTTPException(status_code=422, detail=str(exc)) from None
    return _redirect(f"{_base(plugin, participant)}/")


# ----------------------------------------------------------------------------- editing


@router.get("/edit")
def edit(request: Request, who: Writer) -> Response:
    """The page where the writer edits the chosen suggestion."""
    return _show(request, who, "edit", _suggestions)


@router.post("/edit")
def edit_submit(request: Request, who: Writer, form: Form) -> Response:
    """Store the edited text."""
    state, participant, plugin = _parts(request, who)
    text = form.get("text")
    action = form.get("action", "add")
    try:
        if action.startswith("switch-") and plugin.kind == "cyoa":
            position = action.removeprefix("switch-")
            _act(
                state,
                plugin,
                participant,
                form,
                lambda s, now: s.choose(_generator_at(s, position), now=now, draft=text),
            )
        else:
            signals = _typing(plugin, form, {"text": text}).get("text")
            _act(
                state,
                plugin,
                participant,
                form,
                lambda s, now: s.submit_text(text, now=now, integrity=signals),
            )
    except TurnError as exc:
        session = _load(state, plugin, participant)
        if session is None or session.phase != "edit":
            return _redirect(f"{_base(plugin, participant)}/")
        page = _context(plugin, participant, session)
        page.update(options=_options(session), text=text, error=str(exc))
        return state.page("writing/edit.html", page, status_code=422)
    return _redirect(f"{_base(plugin, participant)}/")


# ----------------------------------------------------------------------------- survey and completion


def _survey_answers(
    plugin: WritingSessionPlugin, session: WritingSession, form: FormData
) -> tuple[dict[str, int], dict[str, str], list[str], str | None]:
    """The Likert answers (ASCII digits within the scale), the open answers, the fields with a
    problem and a message."""
    config = plugin.config
    likert: dict[str, int] = {}
    errors = []
    if session.asks_use_again and form.get("use_again") not in USE_AGAIN_CHOICES:
        errors.append("use_again")
    for statement in session.survey_statements():
        key = f"likert-{statement.name}"
        value = parse_int(form.get(key))
        if value is not None and 1 <= value <= config.likert.scale:
            likert[statement.name] = value
        else:
            errors.append(key)
    questions = session.survey_questions()
    answers = {q.name: form.text(f"q-{q.name}") for q in questions}
    message = None
    for q in questions:
        long = too_long(answers[q.name])
        if long is not None:
            errors.append(f"q-{q.name}")
            message = long
        elif q.required and not answers[q.name]:
            errors.append(f"q-{q.name}")
    return likert, answers, errors, message


@router.get("/survey")
def survey(request: Request, who: Writer) -> Response:
    """The writing survey at the end."""
    return _show(request, who, "survey", lambda *_: {"values": {}, "errors": []})


@router.post("/survey")
def survey_submit(request: Request, who: Writer, form: Form) -> Response:
    """Store the survey answers and finish."""
    state, participant, plugin = _parts(request, who)
    current = _load(state, plugin, participant)
    if current is None:
        return _redirect(f"{_base(plugin, participant)}/")
    likert, answers, errors, message = _survey_answers(plugin, current, form)
    use_again = form.get("use_again") or None
    if errors:
        page = _context(plugin, participant, current)
        page.update(
            values=form.values,
            errors=errors,
            error=message or "Please answer every question marked below.",
        )
        return state.page("writing/survey.html", page, status_code=422)

    typed = _typing(plugin, form, {f"q-{name}": text for name, text in answers.items()})
    signals = {name: typed[f"q-{name}"] for name in answers if f"q-{name}" in typed}

    def finish(session: WritingSession, now: float) -> None:
        session.submit_survey(likert, answers, now=now, integrity=signals, use_again=use_again)

    try:
        status, _ = _act(state, plugin, participant, form, finish)
    except TurnError as exc:
        raise HTTPException(status_code=422, detail=str(exc)) from None
    if status == "ok":
        now = state.clock()
        code = plugin.config.completion.code
        state.db.run(lambda conn: mark_finished(conn, participant.id, now, code=code))
    return _redirect(f"{_base(plugin, participant)}/")


@router.get("/done")
def done(request: Request, who: Writer) -> Response:
    """The completion page of a writing session."""
    configured = _parts(request, who)[2].config.completion.code

    def fill(
        state: ServerState, participant: Participant, session: WritingSession | None
    ) -> dict[str, Any]:
        now = state.clock()
        code = state.db.run(lambda conn: mark_finished(conn, participant.id, now, code=configured))
        return {"code": code, "story": session.story() if session is not None else ""}

    return _show(request, who, "done", fill)


# ----------------------------------------------------------------------------- picture prompt


@router.get("/image")
def image(request: Request, who: Writer) -> Response:
    """An image prompt of the session."""
    state, participant, plugin = _parts(request, who)
    session = _load(state, plugin, participant)
    path = plugin.image_path(session) if session is not None else None
    if path is None or not path.is_file():
        raise HTTPException(status_code=404, detail="There is no picture for this story.")
    return FileResponse(path, media_type=IMAGE_TYPES[path.suffix.lower()])
