"""Participant pages of a study: welcome and consent, comprehension check, training, items,
follow-up questions, more items, final questions, completion. Plain HTML forms (no
JavaScript): every answer is a POST that is committed before the browser is redirected (303)
to the next page.

Every page re-derives where the participant is (:func:`study_flow.next_step`); a GET of any
other page redirects there, and a POST that does not belong to the current step is refused
with 409 (a replay of the change just made is acknowledged like the original), so pages can
be neither skipped, repeated nor reopened after the end. A GET writes to the database only
when a page is served for the first time or the participant's activity is old enough to be
noted again; the POST that leads to an item page records it as served.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import RedirectResponse, Response
from sqlalchemy import Connection

from storyeval.human.model import Study
from storyeval.human.protocols import get_protocol
from storyeval.server import study_flow as flow
from storyeval.server import study_pages as pages
from storyeval.server.participants import Participant, first_view, record_view
from storyeval.server.state import (
    BUSY,
    MAX_TEXT,
    Form,
    FormData,
    ServerState,
    Who,
    admission,
    database_bound,
    parse_int,
    participant_of,
    server_state,
    too_long,
)
from storyeval.server.study_session import StudySession

router = APIRouter(prefix="/study/{token}")
Participation = Annotated[Who, Depends(participant_of("study"))]
T = TypeVar("T")

STALE = (
    "This page is no longer current: it was already answered, or the study moved on. "
    "Continue from where you are."
)


def _parts(request: Request, who: Who) -> tuple[ServerState, Participant, Study]:
    session = who.session
    if not isinstance(session, StudySession):
        raise HTTPException(status_code=404, detail="This study is not being served at the moment.")
    return server_state(request), who.participant, session.study


def _url(token: str, step: flow.Step) -> str:
    base = f"/study/{token}"
    if step.kind in ("training", "comprehension"):
        return f"{base}/{step.kind}/{step.index}"
    if step.kind == "item":
        return f"{base}/item/{step.slot_id}"
    if step.kind == "explain":
        return f"{base}/item/{step.slot_id}/explain"
    return f"{base}/{step.kind}"


def _redirect(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303)


def _look(
    state: ServerState, participant: Participant, study: Study, page: str | None = None
) -> tuple[flow.Step, flow.Snapshot]:
    """The participant's step (read-only; ``snap.participant`` is their current row); when
    ``page`` is given it is recorded as served (a write only the first time) and activity is
    noted when due."""
    now = state.clock()
    with state.db.read() as conn:
        snap = flow.snapshot(conn, study, participant.id)
        step = flow.step_of(conn, study, snap, now)
        seen = page is None or first_view(conn, participant.id, page) is not None
    if not seen or pages.touch_due(snap.participant, now):

        def note(conn: Connection) -> None:
            pages.record_activity(conn, participant, now)
            if page is not None:
                record_view(conn, participant.id, page, now)

        state.db.run(note)
    return step, snap


def _change(state: ServerState, token: str, work: Callable[[Connection], T]) -> T | Response:
    """Run a change in a write transaction; a conflict with the current step becomes a 409
    page with a link to the current step."""
    try:
        return state.db.run(work)
    except flow.Conflict as conflict:
        return state.message(
            "Already done",
            STALE,
            status_code=409,
            links=[(_url(token, conflict.step), "Continue")],
        )


def _context(study: Study, participant: Participant) -> dict[str, Any]:
    protocol = get_protocol(study.protocol)
    return {
        "study": study,
        "config": study.config,
        "token": participant.token,
        "protocol": protocol.name,
        "record_typing": study.config.quality.record_typing,
        **protocol.template_context(study),
    }


def parse_answers(
    study: Study,
    form: FormData | Mapping[str, str],
    *,
    keys: Mapping[str, tuple[int, ...]] | None = None,
) -> tuple[dict[str, int], list[str]]:
    """Read the answers of one page from a form; return them and the keys with a problem
    (missing, not a number, not an allowed value, or wrong together)."""
    protocol = get_protocol(study.protocol)
    keys = keys if keys is not None else study.keys
    required = protocol.required_keys(study.config) if keys is study.keys else set(keys)
    get = form.get
    answers: dict[str, int] = {}
    problems: list[str] = []
    for key, allowed in keys.items():
        raw = get(key, "").strip()
        if raw == "":
            if key in required:
                problems.append(key)
            continue
        value = parse_int(raw)
        if value is None or value not in allowed:
            problems.append(key)
            continue
        answers[key] = value
    problems += [k for k in protocol.answer_problems(study.config, answers) if k not in problems]
    return answers, problems


# ----------------------------------------------------------------------------- items (first: routes match in order)


def _item_context(study: Study, participant: Participant, page: pages.Page) -> dict[str, Any]:
    return {
        **_context(study, participant),
        "texts": list(page.texts),
        "positions": list(range(1, len(page.texts) + 1)),
        "action": f"/study/{participant.token}/item/{page.slot.id}",
        "mode": "item",
        "errors": [],
        "values": {},
        "progress": (page.position, page.batch_size),
        "index": None,
        "n_training": len(study.training),
    }


def _current_page(snap: flow.Snapshot, study: Study, slot_id: int) -> pages.Page | None:
    slot = next((s for s in snap.slots if s.id == slot_id), None)
    return None if slot is None else pages.page_for(study, slot, snap.slots)


@router.get("/item/{slot_id}")
@database_bound
def item(request: Request, token: str, slot_id: int, who: Participation) -> Response:
    """The participant's current item page."""
    state, participant, study = _parts(request, who)
    step, snap = _look(state, participant, study, flow.page_key(slot_id))
    if step.kind != "item" or step.slot_id != slot_id:
        return _redirect(_url(token, step))
    page = _current_page(snap, study, slot_id)
    if page is None:
        return _redirect(f"/study/{token}/")
    return state.page(f"protocols/{study.protocol}.html", _item_context(study, participant, page))


@router.post("/item/{slot_id}")
@database_bound
def item_submit(
    request: Request, token: str, slot_id: int, who: Participation, form: Form
) -> Response:
    """Store the answers to an item (idempotent; 409 when the item is not the participant's current one)."""
    state, participant, study = _parts(request, who)
    answers, problems = parse_answers(study, form)
    if problems:
        return _refuse_item(state, study, participant, slot_id, problems, form)
    now = state.clock()
    outcome = _change(
        state, token, lambda c: pages.submit_page(c, study, participant, slot_id, answers, now)
    )
    if isinstance(outcome, Response):
        return outcome
    if outcome.status == "missing":
        raise HTTPException(status_code=404, detail="This item is not assigned to you.")
    if outcome.status == "answered":
        return state.message(
            "Already answered",
            "This item was already answered with other ratings (perhaps in another tab); the "
            "first answer is kept and this one was not stored.",
            status_code=409,
            links=[(f"/study/{token}/", "Continue")],
        )
    # committed (or already stored by an earlier identical request): acknowledge, and send the
    # browser straight to its next page
    if outcome.step is not None:
        return _redirect(_url(token, outcome.step))
    return _redirect(f"/study/{token}/")


def _refuse_item(
    state: ServerState,
    study: Study,
    participant: Participant,
    slot_id: int,
    problems: list[str],
    form: FormData,
) -> Response:
    with state.db.read() as conn:
        mine = flow.participant_slots(conn, participant.id)
    slot = next((s for s in mine if s.id == slot_id), None)
    if slot is None:
        raise HTTPException(status_code=404, detail="This item is not assigned to you.")
    if slot.status == "done":
        return _redirect(f"/study/{participant.token}/")
    context = _item_context(study, participant, pages.page_for(study, slot, mine))
    context.update({"errors": problems, "values": form.values})
    return state.page(f"protocols/{study.protocol}.html", context, status_code=422)


def _explain_context(
    state: ServerState,
    study: Study,
    participant: Participant,
    slot_id: int,
    error: str | None,
    value: str,
) -> dict[str, Any]:
    protocol = get_protocol(study.protocol)
    with state.db.read() as conn:
        mine = flow.participant_slots(conn, participant.id)
        answers = pages.stored_answers(conn, participant.id, slot_id)
    slot = next((s for s in mine if s.id == slot_id), None)
    if slot is None:
        raise HTTPException(status_code=404, detail="This item is not assigned to you.")
    page = pages.page_for(study, slot, mine)
    rating = int(next(iter(answers.values()), 0))
    labels = getattr(protocol.options(study.config), "labels", ())
    return {
        **_context(study, participant),
        "texts": list(page.texts),
        "text_labels": list(labels) if len(page.texts) == 2 and len(labels) == 2 else [],
        "rating": rating,
        "rating_label": protocol.answer_summary(study, page.view(), answers),
        "question": protocol.follow_up(study, answers) or "",
        "action": f"/study/{participant.token}/item/{slot_id}/explain",
        "error": error,
        "value": value,
        "progress": (page.position, page.batch_size),
    }


@router.get("/item/{slot_id}/explain")
@database_bound
def explain(request: Request, token: str, slot_id: int, who: Participation) -> Response:
    """The follow-up question of an answer (e.g. why a story seemed machine-written)."""
    state, participant, study = _parts(request, who)
    step, _ = _look(state, participant, study, f"explain:{slot_id}")
    if step.kind != "explain" or step.slot_id != slot_id:
        return _redirect(_url(token, step))
    return state.page(
        "study/explain.html", _explain_context(state, study, participant, slot_id, None, "")
    )


@router.post("/item/{slot_id}/explain")
@database_bound
def explain_submit(
    request: Request, token: str, slot_id: int, who: Participation, form: Form
) -> Response:
    """Store the follow-up answer."""
    state, participant, study = _parts(request, who)
    text = form.text("explanation")
    error = too_long(text)
    if error is None and not text and get_protocol(study.protocol).follow_up_required(study):
        error = "Please answer the question."
    if error is not None:
        context = _explain_context(state, study, participant, slot_id, error, text[: MAX_TEXT * 2])
        return state.page("study/explain.html", context, status_code=422)
    now = state.clock()
    signals = _typing(study, form, {"explanation": text}).get("explanation")
    outcome = _change(
        state,
        token,
        lambda c: pages.submit_follow_up(c, study, participant, slot_id, text, now, signals),
    )
    if outcome == "missing":
        raise HTTPException(status_code=404, detail="This item is not assigned to you.")
    return outcome if isinstance(outcome, Response) else _redirect(f"/study/{token}/")


# ----------------------------------------------------------------------------- entry and consent


@router.get("/")
@database_bound
def entry(request: Request, token: str, who: Participation) -> Response:
    """A participant link: send the participant to the page of their current step."""
    state, participant, study = _parts(request, who)
    step, _ = _look(state, participant, study)
    return _redirect(_url(token, step))


def _welcome(
    state: ServerState, study: Study, participant: Participant, error: str | None, status: int
) -> Response:
    return state.page(
        "study/welcome.html",
        {**_context(study, participant), "n_items": study.items_per_participant, "error": error},
        status_code=status,
    )


@router.get("/welcome")
@database_bound
def welcome(request: Request, token: str, who: Participation) -> Response:
    """The consent page (and content warning)."""
    state, participant, study = _parts(request, who)
    step, _ = _look(state, participant, study)
    if step.kind != "welcome":
        return _redirect(_url(token, step))
    return _welcome(state, study, participant, None, 200)


@router.post("/start")
@database_bound
def start(request: Request, token: str, who: Participation, form: Form) -> Response:
    """Consent given (or declined): reserve the participant's items or return them."""
    state, participant, study = _parts(request, who)
    now = state.clock()
    admit = admission(request, who, now)
    if form.get("consent") == "no":
        declined = _change(state, token, lambda c: flow.decline(c, study, participant, now))
        return declined if isinstance(declined, Response) else _redirect(f"/study/{token}/returned")
    if form.get("consent") != "yes":
        message = "Please confirm that you have read the information above."
        return _welcome(state, study, participant, message, 422)
    started = _change(state, token, lambda c: flow.start(c, study, participant, now, admit=admit))
    if isinstance(started, Response):
        return started
    if started.status == "busy":
        return state.message("Too many participants from your network", BUSY, status_code=429)
    return _redirect(_url(token, started.step) if started.step else f"/study/{token}/")


@router.get("/full")
@database_bound
def full(request: Request, token: str, who: Participation) -> Response:
    """The page shown when the study has no item left for a new participant."""
    state, participant, study = _parts(request, who)
    step, _ = _look(state, participant, study)
    if step.kind != "full":
        return _redirect(_url(token, step))
    return state.message(
        "The study is full",
        "Thank you for your interest: all places in this study are taken (every item has the "
        "ratings it needs, or every participant place is filled).",
    )


@router.get("/returned")
@database_bound
def returned(request: Request, token: str, who: Participation) -> Response:
    """The page shown after declining consent (with the platform's return code)."""
    state, participant, study = _parts(request, who)
    step, snap = _look(state, participant, study)
    if step.kind != "returned":
        return _redirect(_url(token, step))
    return state.page(
        "study/returned.html",
        {**_context(study, participant), "code": snap.participant.completion_code or ""},
    )


# ----------------------------------------------------------------------------- comprehension


def _comprehension_page(
    state: ServerState,
    study: Study,
    participant: Participant,
    attempt: int,
    errors: list[str],
    values: Mapping[str, str],
    status: int = 200,
) -> Response:
    check = study.config.comprehension
    assert check is not None  # the step exists only for studies with a check
    orders = {
        q.name: pages.shuffled_options(q.options, f"{participant.token}:{q.name}")
        for q in check.questions
    }
    return state.page(
        "study/comprehension.html",
        {
            **_context(study, participant),
            "check": check,
            "attempt": attempt,
            "orders": orders,
            "errors": errors,
            "values": dict(values),
            "action": f"/study/{participant.token}/comprehension/{attempt}",
        },
        status_code=status,
    )


@router.get("/comprehension/{attempt}")
@database_bound
def comprehension(request: Request, token: str, attempt: int, who: Participation) -> Response:
    """The comprehension check before the task."""
    state, participant, study = _parts(request, who)
    step, _ = _look(state, participant, study, f"comprehension:{attempt}")
    if step.kind != "comprehension" or step.index != attempt:
        return _redirect(_url(token, step))
    return _comprehension_page(state, study, participant, attempt, [], {})


@router.post("/comprehension/{attempt}")
@database_bound
def comprehension_submit(
    request: Request, token: str, attempt: int, who: Participation, form: Form
) -> Response:
    """Grade the comprehension check: pass, a second attempt, or screen-out."""
    state, participant, study = _parts(request, who)
    check = study.config.comprehension
    if check is None:
        raise HTTPException(status_code=404, detail="This study has no comprehension check.")
    keys = {q.name: tuple(range(1, len(q.options) + 1)) for q in check.questions}
    answers, problems = parse_answers(study, form, keys=keys)
    if problems:
        return _comprehension_page(state, study, participant, attempt, problems, form.values, 422)
    now = state.clock()
    outcome = _change(
        state,
        token,
        lambda c: flow.submit_comprehension(c, study, participant, attempt, answers, now),
    )
    return outcome if isinstance(outcome, Response) else _redirect(f"/study/{token}/")


@router.get("/screened_out")
@database_bound
def screened_out(request: Request, token: str, who: Participation) -> Response:
    """The page shown after failing the comprehension check twice (with the screen-out code)."""
    state, participant, study = _parts(request, who)
    step, snap = _look(state, participant, study)
    if step.kind != "screened_out":
        return _redirect(_url(token, step))
    code = snap.participant.completion_code or ""
    response = state.page(
        "study/screened_out.html",
        {
            **_context(study, participant),
            "code": code,
            "redirect": study.config.platform.redirect_url(code),
        },
    )
    return response


# ----------------------------------------------------------------------------- training


def _training_context(study: Study, participant: Participant, index: int) -> dict[str, Any]:
    example = study.training[index]
    return {
        **_context(study, participant),
        "texts": list(example.texts),
        "positions": list(range(1, len(example.texts) + 1)),
        "index": index,
        "n_training": len(study.training),
        "action": f"/study/{participant.token}/training/{index}",
        "mode": "training",
        "errors": [],
        "values": {},
        "progress": None,
    }


@router.get("/training/{index}")
@database_bound
def training(request: Request, token: str, index: int, who: Participation) -> Response:
    """A training example."""
    state, participant, study = _parts(request, who)
    step, _ = _look(state, participant, study, f"training:{index}")
    if step.kind != "training" or step.index != index:
        return _redirect(_url(token, step))
    return state.page(
        f"protocols/{study.protocol}.html", _training_context(study, participant, index)
    )


@router.post("/training/{index}")
@database_bound
def training_submit(
    request: Request, token: str, index: int, who: Participation, form: Form
) -> Response:
    """Store the answer to a training example."""
    state, participant, study = _parts(request, who)
    if not 0 <= index < len(study.training):
        raise HTTPException(status_code=404, detail="There is no such training example.")
    keys = get_protocol(study.protocol).training_keys(study.config, study.training[index])
    answers, problems = parse_answers(study, form, keys=keys)
    if problems:
        context = _training_context(study, participant, index)
        context.update({"errors": problems, "values": form.values})
        return state.page(f"protocols/{study.protocol}.html", context, status_code=422)
    now = state.clock()
    outcome = _change(
        state, token, lambda c: flow.submit_training(c, study, participant, index, answers, now)
    )
    if isinstance(outcome, Response):
        return outcome
    return _redirect(f"/study/{token}/training/{index}/feedback")


@router.get("/training/{index}/feedback")
@database_bound
def training_feedback(request: Request, token: str, index: int, who: Participation) -> Response:
    """The expected answer of a training example, after the participant's."""
    state, participant, study = _parts(request, who)
    if not 0 <= index < len(study.training):
        raise HTTPException(status_code=404, detail="There is no such training example.")
    with state.db.read() as conn:
        given = flow.training_answer(conn, participant.id, index)
    if given is None:
        return _redirect(f"/study/{token}/")
    context = _training_context(study, participant, index)
    context.update(
        {
            "given": given,
            "example": study.training[index],
            "correct": flow.training_correct(study, index, given),
            "next": f"/study/{token}/",
        }
    )
    return state.page(f"protocols/{study.protocol}-feedback.html", context)


# ----------------------------------------------------------------------------- more, questions, done


@router.get("/more")
@database_bound
def more(request: Request, token: str, who: Participation) -> Response:
    """Offer another batch of items (when the study allows more than one)."""
    state, participant, study = _parts(request, who)
    step, snap = _look(state, participant, study)
    if step.kind != "more":
        return _redirect(_url(token, step))
    done = snap.items_done
    return state.page(
        "study/more.html",
        {
            **_context(study, participant),
            "done": done,
            "remaining": study.max_items_per_participant - done,
            "batch": min(study.items_per_participant, study.max_items_per_participant - done),
        },
    )


@router.post("/more")
@database_bound
def more_submit(request: Request, token: str, who: Participation, form: Form) -> Response:
    """Reserve another batch, or finish."""
    state, participant, study = _parts(request, who)
    action = form.get("action")
    if action not in ("continue", "finish"):
        raise HTTPException(status_code=422, detail="Choose to continue or to finish.")
    now = state.clock()
    outcome = _change(state, token, lambda c: pages.more(c, study, participant, action, now))
    return outcome if isinstance(outcome, Response) else _redirect(f"/study/{token}/")


def _typing(study: Study, form: Any, texts: dict[str, str]) -> dict[str, Any]:
    """How each free-text answer was produced, when the study records it."""
    if not study.config.quality.record_typing:
        return {}
    from storyeval.server.integrity import form_signals

    return form_signals(form, texts, texts)


@router.get("/questions")
@database_bound
def questions(request: Request, token: str, who: Participation) -> Response:
    """The questions at the end of the study."""
    state, participant, study = _parts(request, who)
    step, _ = _look(state, participant, study, "questions")
    if step.kind != "questions":
        return _redirect(_url(token, step))
    return state.page(
        "study/questions.html",
        {**_context(study, participant), "errors": [], "values": {}, "messages": {}},
    )


@router.post("/questions")
@database_bound
def questions_submit(request: Request, token: str, who: Participation, form: Form) -> Response:
    """Store the end questions and finish."""
    state, participant, study = _parts(request, who)
    values = {q.name: form.text(q.name) for q in study.config.questions}
    messages = {name: too_long(text) for name, text in values.items()}
    errors = [name for name, message in messages.items() if message is not None]
    errors += [
        q.name
        for q in study.config.questions
        if q.required and not values[q.name] and q.name not in errors
    ]
    if errors:
        return state.page(
            "study/questions.html",
            {
                **_context(study, participant),
                "errors": errors,
                "values": values,
                "messages": {k: v for k, v in messages.items() if v},
            },
            status_code=422,
        )
    now = state.clock()
    signals = _typing(study, form, values)
    outcome = _change(
        state, token, lambda c: pages.submit_questions(c, study, participant, values, now, signals)
    )
    return outcome if isinstance(outcome, Response) else _redirect(f"/study/{token}/")


@router.get("/done")
@database_bound
def done(request: Request, token: str, who: Participation) -> Response:
    """The completion page (code and/or redirect to the platform)."""
    state, participant, study = _parts(request, who)
    step, _ = _look(state, participant, study)
    if step.kind != "done":
        return _redirect(_url(token, step))
    now = state.clock()
    code = state.db.run(lambda conn: pages.finish(conn, study, participant, now))
    redirect = study.config.platform.redirect_url(code)
    response = state.page(
        "study/done.html", {**_context(study, participant), "code": code, "redirect": redirect}
    )
    if redirect is not None:
        response.headers["Refresh"] = f"5; url={redirect}"
    return response
