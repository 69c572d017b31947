"""Writer pages of a slogan-writing session (``/slogan/<token>/...``, Clark (2021), Figure 2.3).

Plain HTML forms, as the other writing sessions: the write page holds the keywords and the
draft (a), a *pull* button in the machine-in-the-loop condition (b), the latest suggestions
beside the draft (c) and the history of drafts and suggestions (d). A pull is stored, then
served off the request path while the page waits (``Refresh``); the final slogan leads to
the writing survey, and the last one to the final survey.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import Response

from storyeval.collab.config import (
    EXPERIENCE_CHOICES,
    USE_AGAIN_CHOICES,
    USE_AGAIN_QUESTION,
    LikertSpec,
)
from storyeval.collab.session import TurnError
from storyeval.server.participants import Participant, mark_finished
from storyeval.server.routers.session_pages import SessionPages, add_shared_routes, redirect
from storyeval.server.state import (
    Form,
    FormData,
    Who,
    parse_int,
    participant_of,
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


def _context(plugin: SloganSessionPlugin, participant: Participant, session: Any) -> dict[str, Any]:
    task = session.current_task() if session is not None else {}
    keywords, draft = session.draft() if session is not None else ("", "")
    return {
        "kind": "slogan",
        "config": plugin.config,
        "base": pages.base(plugin, participant),
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


pages = SessionPages("slogan", PAGES, SloganSessionPlugin, _context)
add_shared_routes(router, pages, Writer)


# ----------------------------------------------------------------------------- writing


@router.get("/write")
def write(request: Request, who: Writer) -> Response:
    """Keywords, draft, pulled suggestions beside it and the history."""
    return pages.show(request, who, "write")


@router.post("/write")
def write_submit(request: Request, who: Writer, form: Form) -> Response:
    """``action=pull`` asks for suggestions; ``action=submit`` submits the final slogan."""
    state, participant, plugin = pages.parts(request, who)
    keywords, draft = form.text("keywords"), form.text("draft")
    action = form.get("action", "submit")
    try:
        if action == "pull":
            status, _ = pages.act(
                state, plugin, participant, form, lambda s, now: s.pull(keywords, draft, now=now)
            )
        elif action == "submit":
            status, _ = pages.act(
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
        return pages.again(
            state,
            plugin,
            participant,
            "write",
            {"error": str(exc), "keywords": keywords, "draft": draft},
        )
    if status == "missing":
        return redirect(f"{pages.base(plugin, participant)}/welcome")
    return redirect(f"{pages.base(plugin, participant)}/")


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
    return pages.show(request, who, "survey")


@router.post("/survey")
def survey_submit(request: Request, who: Writer, form: Form) -> Response:
    """Store the writing survey; then the next prompt or the final survey."""
    state, participant, plugin = pages.parts(request, who)
    likert, errors = _likert(plugin.config.likert, form)
    if errors:
        return pages.again(
            state,
            plugin,
            participant,
            "survey",
            {"values": form.values, "errors": errors, "error": "Please answer every question."},
        )
    try:
        pages.act(state, plugin, participant, form, lambda s, now: s.submit_survey(likert, now=now))
    except TurnError as exc:
        raise HTTPException(status_code=422, detail=str(exc)) from None
    return redirect(f"{pages.base(plugin, participant)}/")


@router.get("/final")
def final(request: Request, who: Writer) -> Response:
    """The final survey."""
    return pages.show(request, who, "final")


@router.post("/final")
def final_submit(request: Request, who: Writer, form: Form) -> Response:
    """Store the final survey and finish (the completion code is issued)."""
    state, participant, plugin = pages.parts(request, who)
    session = pages.load(state, plugin, participant)
    if session is None or session.phase != "final":
        return redirect(f"{pages.base(plugin, participant)}/")
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
        return pages.again(
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
        status, _ = pages.act(
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
    return redirect(f"{pages.base(plugin, participant)}/")


@router.get("/done")
def done(request: Request, who: Writer) -> Response:
    """The completion page."""
    state, participant, plugin = pages.parts(request, who)
    session = pages.load(state, plugin, participant)
    if pages.page_of(session) != "done":
        return redirect(f"{pages.base(plugin, participant)}/{pages.page_of(session)}")
    now = state.clock()
    configured = plugin.config.completion.code
    code = state.db.run(lambda conn: mark_finished(conn, participant.id, now, code=configured))
    values = _context(plugin, participant, session)
    values.update(code=code, slogans=[t["final"] for t in session.tasks])
    return state.page("slogan/done.html", values)
