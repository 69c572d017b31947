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
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import Response

from storyeval.collab.config import (
    USE_AGAIN_CHOICES,
    USE_AGAIN_QUESTION,
    SloganConfig,
)
from storyeval.collab.session import TurnError, WritingSession
from storyeval.server.participants import Participant, mark_finished
from storyeval.server.routers.session_pages import SessionPages, add_shared_routes, redirect
from storyeval.server.state import (
    Form,
    FormData,
    ServerState,
    Who,
    parse_int,
    participant_of,
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
        "base": pages.base(plugin, participant),
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


pages = SessionPages("writing", PAGES, WritingSessionPlugin, _context)
add_shared_routes(router, pages, Writer)


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


# ----------------------------------------------------------------------------- writing alone


@router.get("/write")
def write(request: Request, who: Writer) -> Response:
    """The page where the writer writes the next part of the story."""
    return pages.show(request, who, "write")


@router.post("/write")
def write_submit(request: Request, who: Writer, form: Form) -> Response:
    """Store the writer's text and ask the generators for suggestions."""
    state, participant, plugin = pages.parts(request, who)
    text = form.get("text")
    signals = _typing(plugin, form, {"text": text}).get("text")
    try:
        status, _ = pages.act(
            state,
            plugin,
            participant,
            form,
            lambda s, now: s.submit_text(text, now=now, integrity=signals),
        )
    except TurnError as exc:
        page = _context(plugin, participant, pages.load(state, plugin, participant))
        page.update(error=str(exc), text=text)
        return state.page("writing/write.html", page, status_code=422)
    if status == "missing":
        return redirect(f"{pages.base(plugin, participant)}/welcome")
    return redirect(f"{pages.base(plugin, participant)}/")


# ----------------------------------------------------------------------------- waiting


@router.get("/failed")
def failed(request: Request, who: Writer) -> Response:
    """The page shown when generating a suggestion failed or timed out."""
    return pages.show(request, who, "failed")


@router.post("/retry")
def retry(request: Request, who: Writer, form: Form) -> Response:
    """Ask for the failed suggestions again."""
    state, participant, plugin = pages.parts(request, who)
    with contextlib.suppress(TurnError):  # not failed any more: the entry page shows where
        pages.act(state, plugin, participant, form, lambda s, now: s.retry(now=now))
    return redirect(f"{pages.base(plugin, participant)}/")


# ----------------------------------------------------------------------------- choosing (CYOA)


@router.get("/choose")
def choose(request: Request, who: Writer) -> Response:
    """The suggestions to choose from."""
    if who.participant.kind != "cyoa":
        raise HTTPException(status_code=404, detail="This session has no choices.")
    return pages.show(request, who, "choose", _suggestions)


@router.post("/choose")
def choose_submit(request: Request, who: Writer, form: Form) -> Response:
    """Store the chosen suggestion (and the switches between them)."""
    state, participant, plugin = pages.parts(request, who)
    if plugin.kind != "cyoa":
        raise HTTPException(status_code=404, detail="This session has no choices.")
    position = form.get("option")
    try:
        pages.act(
            state,
            plugin,
            participant,
            form,
            lambda s, now: s.choose(_generator_at(s, position), now=now),
        )
    except TurnError as exc:
        raise HTTPException(status_code=422, detail=str(exc)) from None
    return redirect(f"{pages.base(plugin, participant)}/")


# ----------------------------------------------------------------------------- editing


@router.get("/edit")
def edit(request: Request, who: Writer) -> Response:
    """The page where the writer edits the chosen suggestion."""
    return pages.show(request, who, "edit", _suggestions)


@router.post("/edit")
def edit_submit(request: Request, who: Writer, form: Form) -> Response:
    """Store the edited text."""
    state, participant, plugin = pages.parts(request, who)
    text = form.get("text")
    action = form.get("action", "add")
    try:
        if action.startswith("switch-") and plugin.kind == "cyoa":
            position = action.removeprefix("switch-")
            pages.act(
                state,
                plugin,
                participant,
                form,
                lambda s, now: s.choose(_generator_at(s, position), now=now, draft=text),
            )
        else:
            signals = _typing(plugin, form, {"text": text}).get("text")
            pages.act(
                state,
                plugin,
                participant,
                form,
                lambda s, now: s.submit_text(text, now=now, integrity=signals),
            )
    except TurnError as exc:
        session = pages.load(state, plugin, participant)
        if session is None or session.phase != "edit":
            return redirect(f"{pages.base(plugin, participant)}/")
        page = _context(plugin, participant, session)
        page.update(options=_options(session), text=text, error=str(exc))
        return state.page("writing/edit.html", page, status_code=422)
    return redirect(f"{pages.base(plugin, participant)}/")


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
    return pages.show(request, who, "survey", lambda *_: {"values": {}, "errors": []})


@router.post("/survey")
def survey_submit(request: Request, who: Writer, form: Form) -> Response:
    """Store the survey answers and finish."""
    state, participant, plugin = pages.parts(request, who)
    current = pages.load(state, plugin, participant)
    if current is None:
        return redirect(f"{pages.base(plugin, participant)}/")
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
        status, _ = pages.act(state, plugin, participant, form, finish)
    except TurnError as exc:
        raise HTTPException(status_code=422, detail=str(exc)) from None
    if status == "ok":
        now = state.clock()
        code = plugin.config.completion.code
        state.db.run(lambda conn: mark_finished(conn, participant.id, now, code=code))
    return redirect(f"{pages.base(plugin, participant)}/")


@router.get("/done")
def done(request: Request, who: Writer) -> Response:
    """The completion page of a writing session."""
    configured = pages.parts(request, who)[2].config.completion.code

    def fill(
        state: ServerState, participant: Participant, session: WritingSession | None
    ) -> dict[str, Any]:
        now = state.clock()
        code = state.db.run(lambda conn: mark_finished(conn, participant.id, now, code=configured))
        return {"code": code, "story": session.story() if session is not None else ""}

    return pages.show(request, who, "done", fill)
