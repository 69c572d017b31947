"""The participant state machine of a study, and every change it allows.

A participant moves through ``welcome`` (consent) -> ``comprehension`` (if the study has a
check; failing every attempt ends in ``screened_out``) -> ``training`` -> ``item`` pages
(each maybe followed by ``explain``) -> ``more`` (further batches, up to the cap) ->
``questions`` -> ``done``; declining consent ends in ``returned``; a study with no item left
shows ``full``. :func:`next_step` derives the step from the database; every change below runs
in one write transaction that first checks the participant is at the step the change belongs
to (a replay of the change just made is acknowledged as it was; anything else is a
:class:`Conflict`), so no request can skip, repeat or reopen a step, in any number of server
processes: the checks are database transactions, not in-process locks.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import Connection, bindparam, func, insert, select, update

from storyeval.human.assign import check_positions, condition_preferences, order_batch
from storyeval.human.model import Study
from storyeval.human.protocols import get_protocol
from storyeval.server.db import HotQuery
from storyeval.server.participants import (
    PARTICIPANT_COLUMNS,
    Participant,
    count_enrolled,
    first_view,
    mark_started,
    note_active,
    note_submission,
    note_view,
    set_status,
)
from storyeval.server.study_routing import record_routing, routed_slots, settle
from storyeval.server.study_tables import (
    comprehension_answers,
    members,
    page_key,
    responses,
    slots,
    training_answers,
)

TOUCH_EVERY_S = 15.0

# Statements of the hot path (item pages): hand-written (see HotQuery), or built once.
_SLOT_COLUMNS = (
    "id, kind, item_key, condition, layout, status, participant_id, batch, batch_pos, "
    "reserved_at, done_at"
)
_PARTICIPANT_MEMBER_SQL = (
    f"SELECT {', '.join('p.' + c.strip() for c in PARTICIPANT_COLUMNS.split(','))}, "
    "m.participant_id, m.seq, m.batches, m.items_closed, m.questions_done, "
    "m.comprehension_passed FROM participants p "
    "LEFT JOIN study_participants m ON m.participant_id = p.id WHERE p.id = :pid"
)
_PARTICIPANT_MEMBER = HotQuery(_PARTICIPANT_MEMBER_SQL)
_PARTICIPANT_MEMBER_LOCKED = HotQuery(_PARTICIPANT_MEMBER_SQL, postgresql_suffix=" FOR UPDATE OF p")
_MY_SLOTS = HotQuery(
    f"SELECT {_SLOT_COLUMNS} FROM study_slots WHERE participant_id = :pid ORDER BY batch_pos"
)
_MY_SLOT_SQL = f"SELECT {_SLOT_COLUMNS} FROM study_slots WHERE id = :sid AND participant_id = :pid"
_MY_SLOT = HotQuery(_MY_SLOT_SQL)
_MY_SLOT_LOCKED = HotQuery(_MY_SLOT_SQL, postgresql_suffix=" FOR UPDATE")
_SLOT_DONE = HotQuery("UPDATE study_slots SET status = 'done', done_at = :now WHERE id = :sid")
_ACTIVE = HotQuery("UPDATE participants SET last_seen_at = :now WHERE id = :pid")
_INSERT_JUDGMENTS = HotQuery(
    "INSERT INTO study_judgments (study, slot_id, participant_id, item_id, criterion, value, "
    "condition, served_at, submitted_at, time_s, gap_s, extra) VALUES (:study, :slot_id, "
    ":participant_id, :item_id, :criterion, :value, :condition, :served_at, :submitted_at, "
    ":time_s, :gap_s, :extra)"
)
_MEMBER = select(members).where(members.c.participant_id == bindparam("pid"))
_LOCK_STUDY = HotQuery(
    "SELECT name FROM studies WHERE name = :study", postgresql_suffix=" FOR UPDATE"
)
_OPEN_COUNT = HotQuery(
    "SELECT count(*) FROM study_slots WHERE study = :study AND status = 'open' AND kind = 'item'"
)
_ANY_OPEN = HotQuery(
    "SELECT 1 FROM study_slots WHERE study = :study AND status = 'open' AND kind = 'item' LIMIT 1"
)
# A reservation is kept by work (the last state-changing POST, ``active_at``), never by page
# loads: a client that reloads its page every few seconds does not keep its items.
_ANY_EXPIRED = HotQuery(
    "SELECT 1 FROM study_slots s JOIN participants p ON p.id = s.participant_id "
    "WHERE s.study = :study AND s.status = 'reserved' AND s.kind = 'item' "
    "AND COALESCE(p.active_at, p.last_seen_at) < :cutoff LIMIT 1"
)
_RELEASE = HotQuery(
    "UPDATE study_slots SET status = 'open', participant_id = NULL, batch = NULL, "
    "batch_pos = NULL, reserved_at = NULL WHERE study = :study AND status = 'reserved' "
    "AND kind = 'item' AND participant_id IN (SELECT id FROM participants WHERE kind = 'study' "
    "AND session = :study AND COALESCE(active_at, last_seen_at) < :cutoff)"
)
_MEMBER_COUNT = HotQuery("SELECT count(*) FROM study_participants WHERE study = :study")
_ADD_MEMBER = HotQuery(
    "INSERT INTO study_participants (participant_id, study, seq, batches, items_closed, "
    "questions_done, comprehension_passed) VALUES (:pid, :study, :seq, 0, 0, 0, NULL)"
)
_BATCHES = HotQuery("UPDATE study_participants SET batches = :batch WHERE participant_id = :pid")
_TRAINED = (
    select(func.count())
    .select_from(training_answers)
    .where(training_answers.c.participant_id == bindparam("pid"))
)
_ATTEMPTS = (
    select(func.count())
    .select_from(comprehension_answers)
    .where(comprehension_answers.c.participant_id == bindparam("pid"))
)
_EXPLAINED = select(responses.c.scope).where(
    responses.c.participant_id == bindparam("pid"), responses.c.question == "explanation"
)


class Conflict(Exception):
    """A change that does not belong to the participant's current step (HTTP 409)."""

    def __init__(self, step: Step) -> None:
        self.step = step
        super().__init__(f"not at this step (the participant is at {step.kind})")


@dataclass(frozen=True)
class Step:
    """Where a participant is in the study."""

    kind: str
    slot_id: int | None = None
    index: int | None = None


@dataclass(frozen=True)
class Member:
    """A participant's membership of a study: their condition order and status."""

    participant_id: int
    seq: int
    batches: int
    items_closed: bool
    questions_done: bool
    comprehension_passed: bool


@dataclass(frozen=True)
class SlotRow:
    """One reserved slot: the item, its position in the participant's batch and its state."""

    id: int
    kind: str
    item_key: str
    condition: str
    layout: tuple[int, ...]
    status: str
    participant_id: int | None
    batch: int | None
    batch_pos: int | None
    reserved_at: float | None
    done_at: float | None

    @classmethod
    def from_tuple(cls, row: Sequence[Any]) -> SlotRow:
        """From the columns of ``_SLOT_COLUMNS``, in order."""
        sid, kind, key, condition, layout, status, pid, batch, pos, reserved, done = row
        return cls(
            int(sid),
            str(kind),
            str(key),
            str(condition),
            tuple(int(v) for v in str(layout).split(",") if v != ""),
            str(status),
            pid,
            batch,
            pos,
            reserved,
            done,
        )

    @classmethod
    def from_row(cls, row: Any) -> SlotRow:
        """A slot from a row of the slots table."""
        return cls(
            int(row.id),
            str(row.kind),
            str(row.item_key),
            str(row.condition),
            tuple(int(v) for v in str(row.layout).split(",") if v != ""),
            str(row.status),
            row.participant_id,
            row.batch,
            row.batch_pos,
            row.reserved_at,
            row.done_at,
        )


@dataclass(frozen=True)
class Snapshot:
    """Everything :func:`step_of` needs about one participant, read in a few queries."""

    participant: Participant
    member: Member | None
    slots: tuple[SlotRow, ...]
    training_done: int
    comprehension_attempts: int
    pending_follow_up: int | None

    @property
    def items_done(self) -> int:
        """The number of items the participant has submitted."""
        return sum(1 for s in self.slots if s.kind == "item" and s.status == "done")


# ----------------------------------------------------------------------------- reading


def get_member(conn: Connection, participant_id: int) -> Member | None:
    """The participant's membership of the study (None before consent)."""
    row = conn.execute(_MEMBER, {"pid": participant_id}).first()
    if row is None:
        return None
    return Member(
        int(row.participant_id),
        int(row.seq),
        int(row.batches),
        bool(row.items_closed),
        bool(row.questions_done),
        bool(row.comprehension_passed),
    )


def participant_slots(conn: Connection, participant_id: int) -> list[SlotRow]:
    """The participant's slots in batch order."""
    return [SlotRow.from_tuple(r) for r in _MY_SLOTS.rows(conn, {"pid": participant_id})]


def slot_of(
    conn: Connection, participant_id: int, slot_id: int, *, lock: bool = False
) -> SlotRow | None:
    """The slot ``slot_id`` if (and only if) it belongs to this participant."""
    query = _MY_SLOT_LOCKED if lock else _MY_SLOT
    row = query.one(conn, {"sid": slot_id, "pid": participant_id})
    return None if row is None else SlotRow.from_tuple(row)


def items_done(conn: Connection, participant_id: int) -> int:
    """The number of items the participant has submitted."""
    return sum(
        1
        for s in participant_slots(conn, participant_id)
        if s.kind == "item" and s.status == "done"
    )


def _pending_follow_up(
    conn: Connection, study: Study, participant_id: int, mine: Sequence[SlotRow]
) -> int | None:
    if not get_protocol(study.protocol).wants_follow_up(study.config):
        return None
    done = [s.id for s in mine if s.status == "done"]
    if not done:
        return None
    answered = set(conn.execute(_EXPLAINED, {"pid": participant_id}).scalars())
    return next((slot_id for slot_id in done if page_key(slot_id) not in answered), None)


def snapshot(
    conn: Connection, study: Study, participant: Participant | int, *, lock: bool = False
) -> Snapshot:
    """Read the participant (locked with ``lock``, in a write transaction), their membership
    of the study and their pages: everything :func:`step_of` needs, in two to four queries."""
    pid = participant if isinstance(participant, int) else participant.id
    row = (_PARTICIPANT_MEMBER_LOCKED if lock else _PARTICIPANT_MEMBER).one(conn, {"pid": pid})
    if row is None:
        raise LookupError(f"no participant with id {pid}")
    n = len(Participant.__dataclass_fields__)
    current = Participant(*row[:n])
    member_id, seq, batches, closed, questions, comprehension = row[n:]
    member = (
        None
        if member_id is None
        else Member(pid, int(seq), int(batches), bool(closed), bool(questions), bool(comprehension))
    )
    mine = participant_slots(conn, pid) if member is not None else []
    trained = 0
    if member is not None and study.training:
        trained = int(conn.execute(_TRAINED, {"pid": pid}).scalar_one())
    attempts = 0
    if member is not None and study.config.comprehension is not None:
        attempts = int(conn.execute(_ATTEMPTS, {"pid": pid}).scalar_one())
    follow = _pending_follow_up(conn, study, pid, mine) if member else None
    return Snapshot(current, member, tuple(mine), trained, attempts, follow)


def reservation_cutoff(study: Study, now: float) -> float:
    """Participants last seen before this lose their reserved items."""
    return now - study.config.assignment.reservation_s


def has_available_slots(conn: Connection, study: Study, now: float) -> bool:
    """Whether an item slot is open, or reserved by a participant inactive for longer than the
    reservation time (it is released when someone claims)."""
    if _ANY_OPEN.one(conn, {"study": study.name}) is not None:
        return True
    cutoff = reservation_cutoff(study, now)
    return _ANY_EXPIRED.one(conn, {"study": study.name, "cutoff": cutoff}) is not None


def step_of(conn: Connection, study: Study, snap: Snapshot, now: float) -> Step:
    """The page the participant should see now."""
    participant, member = snap.participant, snap.member
    if participant.status in ("screened_out", "returned"):
        return Step(participant.status)
    if participant.finished_at is not None:
        return Step("done")
    if participant.started_at is None or member is None:
        if _places_taken(conn, study, participant):
            return Step("full")
        return Step("welcome") if has_available_slots(conn, study, now) else Step("full")
    if study.config.comprehension is not None and not member.comprehension_passed:
        return Step("comprehension", index=snap.comprehension_attempts)
    if snap.training_done < len(study.training):
        return Step("training", index=snap.training_done)
    if snap.pending_follow_up is not None:
        return Step("explain", slot_id=snap.pending_follow_up)
    pending = next((s for s in snap.slots if s.status == "reserved"), None)
    if pending is not None:
        return Step("item", slot_id=pending.id)
    done = snap.items_done
    if (
        not member.items_closed
        and member.batches > 0
        and done < study.max_items_per_participant
        and has_available_slots(conn, study, now)
    ):
        return Step("more")  # also after reservations were released while the participant was away
    if done == 0 and not member.items_closed:
        return Step("full")
    if study.config.questions and not member.questions_done:
        return Step("questions")
    return Step("done")


def _places_taken(conn: Connection, study: Study, participant: Participant) -> bool:
    """Whether ``max_participants`` others hold a place (for an open-enrollment participant
    who has not consented; admin links are invitations and are not capped)."""
    cap = study.config.enrollment.max_participants
    if cap is None or participant.browser_key is None:
        return False
    return count_enrolled(conn, "study", study.name, exclude=participant.id) >= cap


def next_step(
    conn: Connection, study: Study, participant: Participant, now: float | None = None
) -> Step:
    """The page the participant should see now (``now`` decides which reservations expired)."""
    import time

    return step_of(conn, study, snapshot(conn, study, participant), now or time.time())


# ----------------------------------------------------------------------------- claiming


def _lock_study(conn: Connection, study: Study) -> None:
    """Serialise the claims of a study (the row lock on PostgreSQL; SQLite's write lock is
    already held by every write transaction)."""
    _LOCK_STUDY.one(conn, {"study": study.name})


def open_slot_count(conn: Connection, study: Study) -> int:
    """The number of items that can still be reserved (expired reservations released)."""
    row = _OPEN_COUNT.one(conn, {"study": study.name})
    return int(row[0]) if row else 0


def release_expired(conn: Connection, study: Study, now: float) -> int:
    """Return to the pool the unanswered slots of participants inactive for longer than the
    reservation time; returns how many slots were released."""
    cutoff = reservation_cutoff(study, now)
    return _RELEASE.run(conn, {"study": study.name, "cutoff": cutoff})


_OPEN_SLOTS = HotQuery(
    "SELECT id, item_key, group_key, condition FROM study_slots "
    "WHERE study = :study AND status = 'open' AND kind = 'item' ORDER BY seq"
)
_MY_GROUPS = HotQuery(
    "SELECT group_key FROM study_slots WHERE participant_id = :pid AND study = :study"
)
_RESERVE = HotQuery(
    "UPDATE study_slots SET status = 'reserved', participant_id = :pid, reserved_at = :now, "
    "batch = :batch, batch_pos = :pos WHERE id = :sid AND status = 'open'"
)


def _choose_slots(
    open_slots: Sequence[tuple[Any, ...]], taken_groups: set[str], preferences: Sequence[str]
) -> list[tuple[Any, ...]]:
    """For each preferred condition, the first open slot (in claiming order) of that
    condition, else of any condition, never two of one group (prompt) for a participant."""
    groups = set(taken_groups)
    used: set[int] = set()
    chosen = []
    for preferred in preferences:
        pick = next(
            (
                s
                for s in open_slots
                if s[0] not in used and s[2] not in groups and s[3] == preferred
            ),
            None,
        ) or next((s for s in open_slots if s[0] not in used and s[2] not in groups), None)
        if pick is None:
            break
        used.add(pick[0])
        groups.add(pick[2])
        chosen.append(pick)
    return chosen


def claim_batch(conn: Connection, study: Study, participant: Participant, now: float) -> int:
    """Reserve the participant's next batch of items (and, in the first batch, the attention
    checks). Must run in a write transaction holding the study lock (so no other claim runs
    at the same time, in any process); returns the number of items reserved."""
    member = get_member(conn, participant.id)
    if member is None:
        raise RuntimeError("claim_batch needs a started participant")
    release_expired(conn, study, now)
    mine = participant_slots(conn, participant.id)
    held = sum(1 for s in mine if s.kind == "item")
    room = min(study.items_per_participant, study.max_items_per_participant - held)
    if room <= 0:
        return 0
    conditions = study.conditions
    preferences = condition_preferences(conditions, member.seq + member.batches, room)
    taken = {
        str(row[0]) for row in _MY_GROUPS.rows(conn, {"pid": participant.id, "study": study.name})
    }
    open_slots = _OPEN_SLOTS.rows(conn, {"study": study.name})
    states = None
    if study.config.assignment.adaptive is not None:
        open_slots, states = routed_slots(conn, study, open_slots)
    claimed = _choose_slots(open_slots, taken, preferences)
    if not claimed:
        return 0
    if states is not None:
        record_routing(conn, study, participant.id, claimed, open_slots, states, now)
    position = {item.key: i for i, item in enumerate(study.items)}
    claimed.sort(key=lambda r: position.get(str(r[1]), 0))
    order = order_batch(
        [str(r[3]) for r in claimed],
        conditions=conditions,
        mode=study.config.assignment.order,
        participant_seq=member.seq + member.batches,
        seed=study.config.assignment.seed,
    )
    sequence: list[tuple[str, Any]] = [("item", claimed[i]) for i in order]
    if member.batches == 0 and study.checks:
        places = check_positions(
            len(sequence),
            [c.position for c in study.checks],
            seed=study.config.assignment.seed,
            participant_seq=member.seq,
        )
        for check, place in sorted(zip(study.checks, places, strict=True), key=lambda p: p[1]):
            sequence.insert(min(place, len(sequence)), ("check", check))
    start = max((s.batch_pos or 0 for s in mine), default=0)
    batch = member.batches + 1
    reservations = []
    for offset, (kind, entry) in enumerate(sequence, start=1):
        if kind == "item":
            reservations.append(
                {
                    "pid": participant.id,
                    "now": now,
                    "batch": batch,
                    "pos": start + offset,
                    "sid": entry[0],
                }
            )
        else:
            conn.execute(
                insert(slots).values(
                    study=study.name,
                    seq=0,
                    kind="check",
                    item_key=f"check:{entry.id}",
                    group_key=f"check:{entry.id}",
                    condition="attention-check",
                    replicate=0,
                    layout=",".join(str(i) for i in range(len(entry.texts))),
                    status="reserved",
                    participant_id=participant.id,
                    batch=batch,
                    batch_pos=start + offset,
                    reserved_at=now,
                )
            )
    _RESERVE.run_many(conn, reservations)
    _BATCHES.run(conn, {"batch": batch, "pid": participant.id})
    return len(claimed)


# ----------------------------------------------------------------------------- changes


def _checked(
    conn: Connection, study: Study, participant: Participant, now: float
) -> tuple[Participant, Snapshot, Step]:
    """The participant (locked), their snapshot and their step, in one transaction."""
    snap = snapshot(conn, study, participant.id, lock=True)
    return snap.participant, snap, step_of(conn, study, snap, now)


def _view_next(
    conn: Connection,
    study: Study,
    participant: Participant,
    now: float,
    snap: Snapshot | None = None,
) -> Step:
    """The step after a change (from ``snap`` when the caller knows the new state); an item
    page is recorded as served now (the browser is sent there at once), so the GET that
    follows needs no write."""
    if snap is None:
        snap = snapshot(conn, study, participant)
    step = step_of(conn, study, snap, now)
    if step.kind == "item" and step.slot_id is not None:
        note_view(conn, participant.id, page_key(step.slot_id), now)
    return step


@dataclass(frozen=True)
class Started:
    """What consent led to: ``status`` is ``"started"``, ``"full"`` (no item left) or
    ``"replay"`` (already started); ``step`` is where the participant goes next."""

    status: str
    step: Step | None = None


def start(
    conn: Connection,
    study: Study,
    participant: Participant,
    now: float,
    *,
    admit: Callable[[Connection, Participant], str | None] | None = None,
) -> Started:
    """Consent given: register the participant in the study and, unless a comprehension check
    comes first, reserve their first batch.

    ``admit(conn, participant)`` decides open enrollment's limits first (see
    :meth:`storyeval.server.sessions.EnrollmentPolicy.admit`): ``"full"`` leads to the full
    page, ``"busy"`` (too many from the client's address) leaves the participant at consent
    (status ``"busy"``).

    Raises
    ------
    Conflict
        If the participant is past the welcome page in a way consent cannot apply to
        (finished, screened out, returned).
    """
    _lock_study(conn, study)
    current, _, step = _checked(conn, study, participant, now)
    if step.kind != "welcome":
        if current.started_at is not None and current.finished_at is None:
            return Started("replay", step)
        if step.kind == "full":
            return Started("full", step)
        raise Conflict(step)
    settle(conn, study)
    if open_slot_count(conn, study) == 0:
        release_expired(conn, study, now)
        if open_slot_count(conn, study) == 0:
            return Started("full", Step("full"))
    verdict = admit(conn, current) if admit is not None else None
    if verdict == "full":
        return Started("full", Step("full"))
    if verdict is not None:
        return Started(verdict, step)
    counted = _MEMBER_COUNT.one(conn, {"study": study.name})
    seq = int(counted[0]) if counted else 0
    _ADD_MEMBER.run(conn, {"pid": current.id, "study": study.name, "seq": seq})
    mark_started(conn, current.id, now)
    started = replace(current, started_at=current.started_at or now, last_seen_at=now)
    if study.config.comprehension is None:
        claim_batch(conn, study, started, now)
    return Started("started", _view_next(conn, study, started, now))


def decline(conn: Connection, study: Study, participant: Participant, now: float) -> str:
    """Consent declined: the participant returns the study (Prolific asks them to); returns
    the return code (may be empty)."""
    current, _, step = _checked(conn, study, participant, now)
    if step.kind == "returned":
        return current.completion_code or ""
    if step.kind not in ("welcome", "full"):
        raise Conflict(step)
    return set_status(conn, current.id, "returned", now, study.config.platform.return_code or "")


def comprehension_passed(study: Study, answers: Mapping[str, int]) -> bool:
    """Whether the participant passed the comprehension check."""
    check = study.config.comprehension
    if check is None:
        return True
    return all(answers.get(q.name) == q.answer for q in check.questions)


def submit_comprehension(
    conn: Connection,
    study: Study,
    participant: Participant,
    attempt: int,
    answers: Mapping[str, int],
    now: float,
) -> str:
    """Grade one attempt at the comprehension check: ``"passed"`` (the first batch is
    reserved), ``"retry"`` (another attempt is allowed), ``"screened_out"`` (no attempt
    left: the participant gets the screen-out code) or ``"replay"``."""
    check = study.config.comprehension
    if check is None:
        raise ValueError("this study has no comprehension check")
    _lock_study(conn, study)
    current, snap, step = _checked(conn, study, participant, now)
    if step.kind != "comprehension" or step.index != attempt:
        if attempt < snap.comprehension_attempts:
            return "replay"
        raise Conflict(step)
    passed = comprehension_passed(study, answers)
    note_active(conn, current.id, now)
    conn.execute(
        insert(comprehension_answers).values(
            participant_id=current.id,
            attempt=attempt,
            study=study.name,
            answers=json.dumps(dict(answers), sort_keys=True),
            passed=int(passed),
            submitted_at=now,
        )
    )
    if passed:
        conn.execute(
            update(members)
            .where(members.c.participant_id == current.id)
            .values(comprehension_passed=1)
        )
        claim_batch(conn, study, current, now)
        _view_next(conn, study, current, now)
        return "passed"
    if attempt + 1 < check.attempts:
        return "retry"
    code = study.config.platform.screen_out_code or secrets.token_hex(4).upper()
    set_status(conn, current.id, "screened_out", now, code)
    return "screened_out"


def training_correct(study: Study, index: int, answer: Mapping[str, int]) -> bool | None:
    """Whether a training answer matches the given answer (``None`` for ratings, where the
    reference ratings calibrate rather than grade)."""
    return get_protocol(study.protocol).training_correct(study, study.training[index], answer)


def submit_training(
    conn: Connection,
    study: Study,
    participant: Participant,
    index: int,
    answer: Mapping[str, int],
    now: float,
) -> str:
    """Store a training answer once: ``"saved"`` or ``"replay"`` (already stored)."""
    current, snap, step = _checked(conn, study, participant, now)
    if step.kind != "training" or step.index != index:
        if index < snap.training_done:
            return "replay"
        raise Conflict(step)
    correct = training_correct(study, index, answer)
    conn.execute(
        insert(training_answers).values(
            participant_id=current.id,
            idx=index,
            study=study.name,
            answer=json.dumps(dict(answer)),
            correct=None if correct is None else int(correct),
            served_at=first_view(conn, current.id, f"training:{index}"),
            submitted_at=now,
        )
    )
    note_submission(conn, current, now)
    return "saved"


def training_answer(conn: Connection, participant_id: int, index: int) -> dict[str, int] | None:
    """The participant's stored answer to a training example (None if not answered)."""
    value = conn.execute(
        select(training_answers.c.answer).where(
            training_answers.c.participant_id == participant_id, training_answers.c.idx == index
        )
    ).scalar_one_or_none()
    return None if value is None else {k: int(v) for k, v in json.loads(value).items()}
