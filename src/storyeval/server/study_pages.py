"""A participant's item pages: what each page shows, and storing its answers, responses and
follow-ups in one transaction (a judgment acknowledged is stored; nobody writes another's)."""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import Connection, insert, select, update

from storyeval.human.model import Item, Study, Text
from storyeval.human.protocols import PageView, get_protocol
from storyeval.server.participants import (
    Participant,
    first_view,
    mark_finished,
    note_active,
    note_submission,
    participants,
)
from storyeval.server.study_flow import (
    _INSERT_JUDGMENTS,
    _SLOT_DONE,
    TOUCH_EVERY_S,
    Conflict,
    SlotRow,
    Snapshot,
    Step,
    _checked,
    _lock_study,
    _view_next,
    claim_batch,
    participant_slots,
    slot_of,
)
from storyeval.server.study_tables import (
    judgments,
    members,
    page_key,
    responses,
)

# ----------------------------------------------------------------------------- item pages


@dataclass(frozen=True)
class Page:
    """An item page: the texts in display order, what to ask and where it is in the batch."""

    slot: SlotRow
    kind: str  # item | check
    item_key: str
    texts: tuple[Text, ...]
    item: Item | None
    position: int
    batch_size: int

    def view(self) -> PageView:
        """The page as the protocol sees it (attention checks have no item)."""
        item = self.item or Item(self.item_key, "attention-check", self.texts)
        return PageView(item, self.texts, self.slot.layout)


def page_for(study: Study, slot: SlotRow, mine: Sequence[SlotRow]) -> Page:
    """The page of ``slot``; ``mine`` are the participant's slots (for its place in the batch)."""
    if slot.kind == "check":
        check_id = slot.item_key.split(":", 1)[1]
        check = next(c for c in study.checks if c.id == check_id)
        texts = tuple(check.texts[i] for i in slot.layout)
        item = None
    else:
        item = study.item(slot.item_key)
        texts = tuple(item.texts[i] for i in slot.layout)
    batch = [s for s in mine if s.batch == slot.batch]
    position = 1 + sum(1 for s in batch if (s.batch_pos or 0) < (slot.batch_pos or 0))
    return Page(slot, slot.kind, slot.item_key, texts, item, position, len(batch))


@dataclass(frozen=True)
class SubmitResult:
    """What storing an item's answers did: stored, repeated (idempotent) or refused, and where to go next."""

    status: str  # saved | duplicate | answered | missing
    judgments: int = 0
    check_passed: bool | None = None
    step: Step | None = None


def _judgment_rows(
    study: Study, page: Page, answers: Mapping[str, int]
) -> tuple[list[dict[str, Any]], bool | None]:
    """The judgments one page produces: the protocol's, or an attention check's."""
    common: dict[str, Any] = {"protocol": study.protocol}
    if page.kind == "check":
        check = next(c for c in study.checks if c.id == page.item_key.split(":", 1)[1])
        passed = all(answers.get(key) in values for key, values in check.expect.items())
        return [
            {
                "item_id": page.item_key,
                "criterion": key,
                "value": float(given),
                "condition": "attention-check",
                "extra": {**common, "check": True, "check_passed": passed},
            }
            for key, given in answers.items()
        ], passed
    rows = get_protocol(study.protocol).judgment_rows(study, page.view(), answers)
    return [
        {
            "item_id": row.item_id,
            "criterion": row.criterion,
            "value": row.value,
            "condition": row.condition,
            "extra": {**common, **row.extra},
        }
        for row in rows
    ], None


def submit_page(
    conn: Connection,
    study: Study,
    participant: Participant,
    slot_id: int,
    answers: Mapping[str, int],
    now: float,
) -> SubmitResult:
    """Store the answers of one page, once. Must run in a write transaction.

    Returns ``saved`` (with the next step), ``duplicate`` (the same answers were stored
    already: acknowledge as before), ``answered`` (other answers were stored first: they are
    kept, and this request is told so) or ``missing`` (not this participant's slot).

    Raises
    ------
    Conflict
        If the page is not the participant's current page (not shown yet, another page due,
        or the participant finished).
    """
    slot = slot_of(conn, participant.id, slot_id, lock=True)
    if slot is None:
        return SubmitResult("missing")
    if slot.status == "done":
        return SubmitResult(_repeat_kind(conn, study, participant.id, slot, answers))
    current, snap, step = _checked(conn, study, participant, now)
    if step.kind != "item" or step.slot_id != slot_id or slot.status != "reserved":
        raise Conflict(step)
    served = first_view(conn, current.id, page_key(slot_id))
    if served is None:
        raise Conflict(step)  # a page is answered after it was shown
    page = page_for(study, slot, snap.slots)
    rows, check_passed = _judgment_rows(study, page, answers)
    gap = note_submission(conn, current, now)
    time_s = max(0.0, now - served)
    place = {"page": slot_id, "batch_position": page.position, "sequence": slot.batch_pos}
    if rows:
        _INSERT_JUDGMENTS.run_many(
            conn,
            [
                {
                    "study": study.name,
                    "slot_id": slot_id,
                    "participant_id": current.id,
                    "item_id": row["item_id"],
                    "criterion": row["criterion"],
                    "value": row["value"],
                    "condition": row["condition"],
                    "served_at": served,
                    "submitted_at": now,
                    "time_s": time_s,
                    "gap_s": gap,
                    "extra": json.dumps(
                        {**row["extra"], **place, "layout": list(slot.layout)}, ensure_ascii=False
                    ),
                }
                for row in rows
            ],
        )
    _SLOT_DONE.run(conn, {"sid": slot_id, "now": now})
    after = replace(current, last_submit_at=now, last_seen_at=now)
    answered = replace(slot, status="done", done_at=now)
    follow = get_protocol(study.protocol).wants_follow_up(study.config) and page.kind == "item"
    known = replace(
        snap,
        participant=after,
        slots=tuple(answered if s.id == slot_id else s for s in snap.slots),
        pending_follow_up=slot_id if follow else snap.pending_follow_up,
    )
    return SubmitResult(
        "saved", len(rows), check_passed, _view_next(conn, study, after, now, known)
    )


def _repeat_kind(
    conn: Connection, study: Study, participant_id: int, slot: SlotRow, answers: Mapping[str, int]
) -> str:
    """``duplicate`` when ``answers`` are what was stored for the answered ``slot``, else
    ``answered`` (a concurrent or later submission with other answers)."""
    page = page_for(study, slot, participant_slots(conn, participant_id))
    rows, _ = _judgment_rows(study, page, answers)
    given = {str(row["criterion"]): float(row["value"]) for row in rows}
    return "duplicate" if given == stored_answers(conn, participant_id, slot.id) else "answered"


def stored_answers(conn: Connection, participant_id: int, slot_id: int) -> dict[str, float]:
    """The stored judgments of one page, by criterion."""
    rows = conn.execute(
        select(judgments.c.criterion, judgments.c.value).where(
            judgments.c.slot_id == slot_id, judgments.c.participant_id == participant_id
        )
    ).all()
    return {str(c): float(v) for c, v in rows}


def submit_response(
    conn: Connection,
    study: Study,
    participant: Participant,
    *,
    scope: str,
    question: str,
    text: str,
    item_id: str | None,
    served_at: float | None,
    now: float,
    integrity: Mapping[str, Any] | None = None,
) -> bool:
    """Store one free-text answer once (with how it was produced, when measured); returns
    False if it was already stored."""
    present = conn.execute(
        select(responses.c.id).where(
            responses.c.participant_id == participant.id,
            responses.c.scope == scope,
            responses.c.question == question,
        )
    ).first()
    if present is not None:
        return False
    conn.execute(
        insert(responses).values(
            study=study.name,
            participant_id=participant.id,
            scope=scope,
            item_id=item_id,
            question=question,
            text=text,
            served_at=served_at,
            submitted_at=now,
            time_s=None if served_at is None else max(0.0, now - served_at),
            integrity=json.dumps(dict(integrity)) if integrity else None,
        )
    )
    return True


def submit_follow_up(
    conn: Connection,
    study: Study,
    participant: Participant,
    slot_id: int,
    text: str,
    now: float,
    integrity: Mapping[str, Any] | None = None,
) -> str:
    """Store the free-text answer that follows an item: ``"saved"``, ``"replay"`` or
    ``"missing"`` (not this participant's page)."""
    if slot_of(conn, participant.id, slot_id) is None:
        return "missing"
    current, snap, step = _checked(conn, study, participant, now)
    scope = page_key(slot_id)
    if step.kind != "explain" or step.slot_id != slot_id:
        exists_already = conn.execute(
            select(responses.c.id).where(
                responses.c.participant_id == current.id,
                responses.c.scope == scope,
                responses.c.question == "explanation",
            )
        ).first()
        if exists_already is not None:
            return "replay"
        raise Conflict(step)
    slot = next(s for s in snap.slots if s.id == slot_id)
    page = page_for(study, slot, snap.slots)
    submit_response(
        conn,
        study,
        current,
        scope=scope,
        question="explanation",
        text=text,
        item_id=page.texts[0].id if page.kind == "item" else page.item_key,
        served_at=first_view(conn, current.id, f"explain:{slot_id}"),
        now=now,
        integrity=integrity,
    )
    note_submission(conn, current, now)
    _view_next(conn, study, current, now)
    return "saved"


def more(conn: Connection, study: Study, participant: Participant, action: str, now: float) -> str:
    """At the end of a batch: ``continue`` reserves another batch (``"claimed"``; when none is
    left, items are closed: ``"closed"``), ``finish`` closes the items (``"closed"``)."""
    if action not in ("continue", "finish"):
        raise ValueError(f"action must be continue or finish; got {action!r}")
    _lock_study(conn, study)
    current, snap, step = _checked(conn, study, participant, now)
    if step.kind != "more":
        closed = snap.member is not None and snap.member.items_closed
        if step.kind == "item" and action == "continue":
            return "replay"  # the batch this request asked for is already reserved
        if closed and action == "finish" and current.finished_at is None:
            return "replay"
        if _items_ran_out(snap, step, current):
            # the page offered more items, but others took the last ones since: the answer
            # is honoured as far as it can be (no more items), not refused
            close_items(conn, current)
            return "closed"
        raise Conflict(step)
    note_active(conn, current.id, now)
    if action == "continue" and claim_batch(conn, study, current, now) > 0:
        _view_next(conn, study, current, now)
        return "claimed"
    close_items(conn, current)
    return "closed"


def _items_ran_out(snap: Snapshot, step: Step, participant: Participant) -> bool:
    """Whether a participant between batches lost the offer of more items because every
    open item was taken by others (not because they finished or closed their items)."""
    member = snap.member
    return (
        participant.finished_at is None
        and member is not None
        and not member.items_closed
        and member.batches > 0
        and step.kind in ("questions", "done")
    )


def close_items(conn: Connection, participant: Participant) -> None:
    """Mark items with all their judgments as closed (never reserved again)."""
    conn.execute(
        update(members).where(members.c.participant_id == participant.id).values(items_closed=1)
    )


def submit_questions(
    conn: Connection,
    study: Study,
    participant: Participant,
    answers: Mapping[str, str],
    now: float,
    integrity: Mapping[str, Mapping[str, Any]] | None = None,
) -> str:
    """Store the final free-text answers once (with how each was produced, when measured):
    ``"saved"`` or ``"replay"``."""
    current, snap, step = _checked(conn, study, participant, now)
    if step.kind != "questions":
        if snap.member is not None and snap.member.questions_done:
            return "replay"
        raise Conflict(step)
    served = first_view(conn, current.id, "questions")
    for question in study.config.questions:
        if answers.get(question.name):
            submit_response(
                conn,
                study,
                current,
                scope="end",
                question=question.name,
                text=answers[question.name],
                item_id=None,
                served_at=served,
                now=now,
                integrity=(integrity or {}).get(question.name),
            )
    conn.execute(
        update(members).where(members.c.participant_id == current.id).values(questions_done=1)
    )
    note_submission(conn, current, now)
    return "saved"


def finish(conn: Connection, study: Study, participant: Participant, now: float) -> str:
    """Mark the participant finished; return their completion code (the platform's or the
    study's, else a random one; see :func:`~storyeval.server.participants.mark_finished`)."""
    return mark_finished(conn, participant.id, now, code=study.config.completion_code)


# ----------------------------------------------------------------------------- viewing


def touch_due(participant: Participant, now: float) -> bool:
    """Whether the participant's last activity is old enough to be recorded again."""
    return participant.last_seen_at is None or participant.last_seen_at < now - TOUCH_EVERY_S


def record_activity(conn: Connection, participant: Participant, now: float) -> None:
    """Record that the participant is active (keeps their reservations)."""
    conn.execute(
        update(participants).where(participants.c.id == participant.id).values(last_seen_at=now)
    )


def shuffled_options(options: Sequence[str], seed: str) -> list[int]:
    """A per-participant order of multiple-choice options (1-based indices)."""
    order = list(range(1, len(options) + 1))
    random.Random(seed).shuffle(order)
    return order
