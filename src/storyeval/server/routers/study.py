"""Participant pages of a study: welcome and consent, training, items, explanations, more
items, final questions, completion. Plain HTML forms (no JavaScript): every answer is a POST
that is committed before the browser is redirected (303) to the next page.

Every page re-derives where the participant is (:func:`study_store.next_step`); a request for
any other page redirects there, so pages cannot be skipped or repeated.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import RedirectResponse, Response
from sqlalchemy import Connection

from storyeval.human.study import Study, answer_keys, detection_settings
from storyeval.server import study_store
from storyeval.server.app import ServerState, server_state
from storyeval.server.deps import participant_of
from storyeval.server.participants import Participant, participant_by_token, record_view, touch
from storyeval.server.sessions import SessionPlugin

router = APIRouter(prefix="/study/{token}")
Who = Annotated[tuple[Participant, SessionPlugin], Depends(participant_of("study"))]

MAX_TEXT = 5000


def _study(who: tuple[Participant, SessionPlugin]) -> tuple[Participant, Study]:
    participant, session = who
    study: Study = session.study  # type: ignore[attr-defined]
    return participant, study


def _url(token: str, step: study_store.Step) -> str:
    base = f"/study/{token}"
    if step.kind in ("welcome", "full", "more", "questions", "done"):
        return f"{base}/{step.kind}"
    if step.kind == "training":
        return f"{base}/training/{step.index}"
    if step.kind == "item":
        return f"{base}/item/{step.slot_id}"
    if step.kind == "explain":
        return f"{base}/item/{step.slot_id}/explain"
    raise AssertionError(step.kind)


def _redirect(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303)


def _fresh(conn: Connection, participant: Participant) -> Participant:
    current = participant_by_token(conn, participant.token)
    assert current is not None
    return current


def _step(
    state: ServerState, participant: Participant, study: Study
) -> tuple[Participant, study_store.Step]:
    now = state.clock()

    def work(conn: Connection) -> tuple[Participant, study_store.Step]:
        touch(conn, participant.id, now)
        current = _fresh(conn, participant)
        return current, study_store.next_step(conn, study, current)

    return state.db.run(work)


def _base_context(study: Study, participant: Participant) -> dict[str, Any]:
    return {
        "study": study,
        "config": study.config,
        "token": participant.token,
        "detection": detection_settings(study.config),
    }


async def _form(request: Request) -> dict[str, str]:
    form = await request.form()
    return {key: str(value) for key, value in form.items() if isinstance(value, str)}


def parse_answers(
    study: Study, form: dict[str, str], *, keys: dict[str, tuple[int, ...]] | None = None
) -> tuple[dict[str, int], list[str]]:
    """Read the answers of one page from a form; return them and the problems found."""
    keys = keys if keys is not None else answer_keys(study.config)
    required = _required_keys(study, keys)
    answers: dict[str, int] = {}
    problems: list[str] = []
    for key, allowed in keys.items():
        raw = form.get(key, "").strip()
        if raw == "":
            if key in required:
                problems.append(key)
            continue
        try:
            value = int(raw)
        except ValueError:
            problems.append(key)
            continue
        if value not in allowed:
            problems.append(key)
            continue
        answers[key] = value
    return answers, problems


def _required_keys(study: Study, keys: dict[str, tuple[int, ...]]) -> set[str]:
    optional = {c.name for c in study.criteria if not c.required}
    return {k for k in keys if k.split("@", 1)[0] not in optional}


# ----------------------------------------------------------------------------- entry and consent


@router.get("/")
def entry(request: Request, token: str, who: Who) -> Response:
    participant, study = _study(who)
    _, step = _step(server_state(request), participant, study)
    return _redirect(_url(token, step))


@router.get("/welcome")
def welcome(request: Request, token: str, who: Who) -> Response:
    participant, study = _study(who)
    state = server_state(request)
    participant, step = _step(state, participant, study)
    if step.kind != "welcome":
        return _redirect(_url(token, step))
    return state.page(
        "study/welcome.html",
        {
            **_base_context(study, participant),
            "n_items": study.items_per_participant,
            "error": None,
        },
    )


@router.post("/start")
async def start(request: Request, token: str, who: Who) -> Response:
    participant, study = _study(who)
    state = server_state(request)
    form = await _form(request)
    if form.get("consent") != "yes":
        return state.page(
            "study/welcome.html",
            {
                **_base_context(study, participant),
                "n_items": study.items_per_participant,
                "error": "Please confirm that you have read the information above.",
            },
            status_code=422,
        )
    now = state.clock()
    state.db.run(lambda conn: study_store.start(conn, study, _fresh(conn, participant), now))
    return _redirect(f"/study/{token}/")


@router.get("/full")
def full(request: Request, token: str, who: Who) -> Response:
    participant, study = _study(who)
    state = server_state(request)
    participant, step = _step(state, participant, study)
    if step.kind != "full":
        return _redirect(_url(token, step))
    return state.page(
        "message.html",
        {
            "title": "No items left",
            "message": "Thank you for your interest: every item of this study already has all the ratings it needs.",
            "links": [],
        },
    )


# ----------------------------------------------------------------------------- training


def _training_context(study: Study, participant: Participant, index: int) -> dict[str, Any]:
    example = study.training[index]
    return {
        **_base_context(study, participant),
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
def training(request: Request, token: str, index: int, who: Who) -> Response:
    participant, study = _study(who)
    state = server_state(request)
    participant, step = _step(state, participant, study)
    if step.kind != "training" or step.index != index:
        return _redirect(_url(token, step))
    now = state.clock()
    state.db.run(lambda conn: record_view(conn, participant.id, f"training:{index}", now))
    return state.page(f"study/{study.protocol}.html", _training_context(study, participant, index))


@router.post("/training/{index}")
async def training_submit(request: Request, token: str, index: int, who: Who) -> Response:
    participant, study = _study(who)
    state = server_state(request)
    if not 0 <= index < len(study.training):
        raise HTTPException(status_code=404, detail="There is no such training example.")
    form = await _form(request)
    answers, problems = parse_answers(study, form)
    if problems:
        context = _training_context(study, participant, index)
        context.update({"errors": problems, "values": form})
        return state.page(f"study/{study.protocol}.html", context, status_code=422)
    now = state.clock()

    def work(conn: Connection) -> bool:
        from storyeval.server.participants import first_view

        served = first_view(conn, participant.id, f"training:{index}")
        return study_store.submit_training(
            conn, study, _fresh(conn, participant), index, answers, served, now
        )

    state.db.run(work)
    return _redirect(f"/study/{token}/training/{index}/feedback")


@router.get("/training/{index}/feedback")
def training_feedback(request: Request, token: str, index: int, who: Who) -> Response:
    participant, study = _study(who)
    state = server_state(request)
    if not 0 <= index < len(study.training):
        raise HTTPException(status_code=404, detail="There is no such training example.")
    with state.db.read() as conn:
        given = study_store.training_answer(conn, participant.id, index)
    if given is None:
        return _redirect(f"/study/{token}/")
    example = study.training[index]
    context = _training_context(study, participant, index)
    context.update(
        {
            "given": given,
            "example": example,
            "correct": study_store.training_correct(study, index, given),
            "next": f"/study/{token}/",
        }
    )
    return state.page("study/feedback.html", context)


# ----------------------------------------------------------------------------- items


def _item_context(study: Study, participant: Participant, page: study_store.Page) -> dict[str, Any]:
    return {
        **_base_context(study, participant),
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


@router.get("/item/{slot_id}")
def item(request: Request, token: str, slot_id: int, who: Who) -> Response:
    participant, study = _study(who)
    state = server_state(request)
    now = state.clock()

    def work(conn: Connection) -> tuple[study_store.Step, study_store.Page | None]:
        touch(conn, participant.id, now)
        current = _fresh(conn, participant)
        step = study_store.next_step(conn, study, current)
        if step.kind != "item" or step.slot_id != slot_id:
            return step, None
        slot = study_store.slot_of(conn, participant.id, slot_id)
        assert slot is not None
        record_view(conn, participant.id, study_store.page_key(slot_id), now)
        return step, study_store.page_for(conn, study, participant.id, slot)

    step, page = state.db.run(work)
    if page is None:
        return _redirect(_url(token, step))
    return state.page(f"study/{study.protocol}.html", _item_context(study, participant, page))


@router.post("/item/{slot_id}")
async def item_submit(request: Request, token: str, slot_id: int, who: Who) -> Response:
    participant, study = _study(who)
    state = server_state(request)
    form = await _form(request)
    answers, problems = parse_answers(study, form)
    if problems:
        with state.db.read() as conn:
            slot = study_store.slot_of(conn, participant.id, slot_id)
            if slot is None:
                raise HTTPException(status_code=404, detail="This item is not assigned to you.")
            if slot.status == "done":
                return _redirect(f"/study/{token}/")
            page = study_store.page_for(conn, study, participant.id, slot)
        context = _item_context(study, participant, page)
        context.update({"errors": problems, "values": form})
        return state.page(f"study/{study.protocol}.html", context, status_code=422)
    now = state.clock()

    def work(conn: Connection) -> tuple[study_store.SubmitResult, study_store.Step | None]:
        current = _fresh(conn, participant)
        result = study_store.submit_page(conn, study, current, slot_id, answers, now)
        if result.status == "missing":
            return result, None
        return result, study_store.next_step(conn, study, current)

    _, step = state.db.run(work)
    if step is None:
        raise HTTPException(status_code=404, detail="This item is not assigned to you.")
    # committed (or already stored by an earlier identical request): acknowledge, and send the
    # browser straight to its next page
    return _redirect(_url(token, step))


@router.get("/item/{slot_id}/explain")
def explain(request: Request, token: str, slot_id: int, who: Who) -> Response:
    participant, study = _study(who)
    state = server_state(request)
    participant, step = _step(state, participant, study)
    if step.kind != "explain" or step.slot_id != slot_id:
        return _redirect(_url(token, step))
    now = state.clock()
    state.db.run(lambda conn: record_view(conn, participant.id, f"explain:{slot_id}", now))
    return state.page(
        "study/explain.html", _explain_context(state, study, participant, slot_id, None, "")
    )


def _explain_context(
    state: ServerState,
    study: Study,
    participant: Participant,
    slot_id: int,
    error: str | None,
    value: str,
) -> dict[str, Any]:
    settings = detection_settings(study.config)
    with state.db.read() as conn:
        slot = study_store.slot_of(conn, participant.id, slot_id)
        if slot is None:
            raise HTTPException(status_code=404, detail="This item is not assigned to you.")
        page = study_store.page_for(conn, study, participant.id, slot)
        rating = _rating_of(conn, participant.id, slot_id)
    question = settings.why_question if rating in settings.why_for else settings.change_question
    return {
        **_base_context(study, participant),
        "texts": list(page.texts),
        "rating": rating,
        "rating_label": settings.labels[rating - 1] if rating else "",
        "question": question,
        "action": f"/study/{participant.token}/item/{slot_id}/explain",
        "error": error,
        "value": value,
        "progress": (page.position, page.batch_size),
    }


def _rating_of(conn: Connection, participant_id: int, slot_id: int) -> int:
    from sqlalchemy import select

    value = (
        conn.execute(
            select(study_store.judgments.c.value).where(
                study_store.judgments.c.slot_id == slot_id,
                study_store.judgments.c.participant_id == participant_id,
            )
        )
        .scalars()
        .first()
    )
    return int(value) if value is not None else 0


@router.post("/item/{slot_id}/explain")
async def explain_submit(request: Request, token: str, slot_id: int, who: Who) -> Response:
    participant, study = _study(who)
    state = server_state(request)
    settings = detection_settings(study.config)
    form = await _form(request)
    text = form.get("explanation", "").strip()[:MAX_TEXT]
    if settings.explanation_required and not text:
        context = _explain_context(
            state, study, participant, slot_id, "Please answer the question.", text
        )
        return state.page("study/explain.html", context, status_code=422)
    now = state.clock()

    def work(conn: Connection) -> bool:
        from storyeval.server.participants import first_view

        slot = study_store.slot_of(conn, participant.id, slot_id)
        if slot is None or slot.status != "done":
            raise HTTPException(status_code=404, detail="This item is not assigned to you.")
        page = study_store.page_for(conn, study, participant.id, slot)
        return study_store.submit_response(
            conn,
            study,
            participant,
            scope=study_store.page_key(slot_id),
            question="explanation",
            text=text,
            item_id=page.texts[0].id if page.kind == "item" else page.item_key,
            served_at=first_view(conn, participant.id, f"explain:{slot_id}"),
            now=now,
        )

    state.db.run(work)
    return _redirect(f"/study/{token}/")


# ----------------------------------------------------------------------------- more, questions, done


@router.get("/more")
def more(request: Request, token: str, who: Who) -> Response:
    participant, study = _study(who)
    state = server_state(request)
    participant, step = _step(state, participant, study)
    if step.kind != "more":
        return _redirect(_url(token, step))
    with state.db.read() as conn:
        done = study_store.items_done(conn, participant.id)
    return state.page(
        "study/more.html",
        {
            **_base_context(study, participant),
            "done": done,
            "remaining": study.max_items_per_participant - done,
            "batch": min(study.items_per_participant, study.max_items_per_participant - done),
        },
    )


@router.post("/more")
async def more_submit(request: Request, token: str, who: Who) -> Response:
    participant, study = _study(who)
    state = server_state(request)
    form = await _form(request)
    now = state.clock()
    if form.get("action") == "continue":
        state.db.run(
            lambda conn: study_store.claim_more(conn, study, _fresh(conn, participant), now)
        )
    else:
        state.db.run(lambda conn: study_store.close_items(conn, participant))
    return _redirect(f"/study/{token}/")


@router.get("/questions")
def questions(request: Request, token: str, who: Who) -> Response:
    participant, study = _study(who)
    state = server_state(request)
    participant, step = _step(state, participant, study)
    if step.kind != "questions":
        return _redirect(_url(token, step))
    now = state.clock()
    state.db.run(lambda conn: record_view(conn, participant.id, "questions", now))
    return state.page(
        "study/questions.html", {**_base_context(study, participant), "errors": [], "values": {}}
    )


@router.post("/questions")
async def questions_submit(request: Request, token: str, who: Who) -> Response:
    participant, study = _study(who)
    state = server_state(request)
    form = await _form(request)
    values = {q.name: form.get(q.name, "").strip()[:MAX_TEXT] for q in study.config.questions}
    missing = [q.name for q in study.config.questions if q.required and not values[q.name]]
    if missing:
        return state.page(
            "study/questions.html",
            {**_base_context(study, participant), "errors": missing, "values": values},
            status_code=422,
        )
    now = state.clock()

    def work(conn: Connection) -> None:
        from storyeval.server.participants import first_view

        served = first_view(conn, participant.id, "questions")
        for question in study.config.questions:
            if values[question.name]:
                study_store.submit_response(
                    conn,
                    study,
                    participant,
                    scope="end",
                    question=question.name,
                    text=values[question.name],
                    item_id=None,
                    served_at=served,
                    now=now,
                )
        study_store.mark_questions_done(conn, participant)

    state.db.run(work)
    return _redirect(f"/study/{token}/")


@router.get("/done")
def done(request: Request, token: str, who: Who) -> Response:
    participant, study = _study(who)
    state = server_state(request)
    participant, step = _step(state, participant, study)
    if step.kind not in ("done",):
        return _redirect(_url(token, step))
    now = state.clock()
    code = state.db.run(
        lambda conn: study_store.finish(conn, study, _fresh(conn, participant), now)
    )
    return state.page("study/done.html", {**_base_context(study, participant), "code": code})
