"""Persistence of collaborative-writing sessions (CYOA and machine-in-the-loop).

One row per participant in ``writing_sessions`` holds the JSON state of their
:class:`~storyeval.collab.session.WritingSession`; every step (a submitted turn, a choice, a
switch, a generated suggestion) is one write transaction that locks the row, applies the
step with the library, and stores the new state, so concurrent requests and the generation
worker never overwrite each other's changes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from sqlalchemy import (
    Column,
    Connection,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Table,
    Text,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError

from storyeval.collab.config import CyoaConfig, MilConfig, SloganConfig
from storyeval.collab.session import WritingSession
from storyeval.collab.slogan import SloganSession
from storyeval.server.db import metadata
from storyeval.server.participants import (
    Participant,
    count_participants,
    get_meta,
    mark_started,
    participants,
    rater_id,
    set_meta,
)

T = TypeVar("T")
AnyConfig = CyoaConfig | MilConfig | SloganConfig
AnySession = WritingSession | SloganSession


def _session(config: AnyConfig, data: dict[str, Any]) -> AnySession:
    """The stored state as the session class of the config's kind."""
    if isinstance(config, SloganConfig):
        return SloganSession.from_dict(config, data)
    return WritingSession.from_dict(config, data)


def _new_session(config: AnyConfig, participant: str, now: float, prompt_index: int) -> AnySession:
    if isinstance(config, SloganConfig):
        return SloganSession.start(
            config, participant=participant, now=now, prompt_index=prompt_index
        )
    return WritingSession.start(config, participant=participant, now=now, prompt_index=prompt_index)


writing_sessions = Table(
    "writing_sessions",
    metadata,
    Column("participant_id", Integer, ForeignKey("participants.id"), primary_key=True),
    Column("kind", String(32), nullable=False),
    Column("session", String(128), nullable=False),
    Column("version", String(32), nullable=False),
    Column("phase", String(16), nullable=False),
    Column("state", Text, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Index("ix_writing_sessions_session", "kind", "session"),
)


class VersionConflict(ValueError):
    """The database holds sessions of another version of this session file."""


def register(conn: Connection, config: AnyConfig) -> None:
    """Record the session file's version; refuse a changed file once writers have started."""
    key = f"writing:{config.kind}:{config.name}:version"
    stored = get_meta(conn, key)
    version = config.version()
    if stored is not None and stored != version:
        count = conn.execute(
            select(func.count())
            .select_from(writing_sessions)
            .where(
                writing_sessions.c.kind == config.kind, writing_sessions.c.session == config.name
            )
        ).scalar_one()
        if count:
            raise VersionConflict(
                f"the database already holds {count} {config.kind} session(s) of {config.name!r} "
                f"written with another version of the file ({stored}, now {version}); give the "
                "changed file a new name, or use another database"
            )
    set_meta(conn, key, version)


def load(
    conn: Connection, config: AnyConfig, participant_id: int, *, lock: bool = False
) -> AnySession | None:
    """The participant's session (``None`` before they start); ``lock`` takes the row lock."""
    query = select(writing_sessions.c.state).where(
        writing_sessions.c.participant_id == participant_id
    )
    if lock:
        query = query.with_for_update()
    state = conn.execute(query).scalar_one_or_none()
    if state is None:
        return None
    return _session(config, json.loads(state))


def save(conn: Connection, session: AnySession, participant_id: int, now: float) -> None:
    """Store a writer's session (its JSON), creating or replacing the row."""
    conn.execute(
        update(writing_sessions)
        .where(writing_sessions.c.participant_id == participant_id)
        .values(phase=session.phase, state=json.dumps(session.data), updated_at=now)
    )


def start(conn: Connection, config: AnyConfig, participant: Participant, now: float) -> AnySession:
    """Create the participant's session (idempotent: an existing one is returned)."""
    existing = load(conn, config, participant.id, lock=True)
    if existing is not None:
        return existing
    count = conn.execute(
        select(func.count())
        .select_from(writing_sessions)
        .where(writing_sessions.c.kind == config.kind, writing_sessions.c.session == config.name)
    ).scalar_one()
    session = _new_session(config, rater_id(participant.id), now, int(count))
    try:
        with conn.begin_nested():
            conn.execute(
                insert(writing_sessions).values(
                    participant_id=participant.id,
                    kind=config.kind,
                    session=config.name,
                    version=config.version(),
                    phase=session.phase,
                    state=json.dumps(session.data),
                    created_at=now,
                    updated_at=now,
                )
            )
    except IntegrityError:  # a concurrent request started it first
        found = load(conn, config, participant.id, lock=True)
        assert found is not None
        return found
    mark_started(conn, participant.id, now)
    return session


def step(
    conn: Connection,
    config: AnyConfig,
    participant_id: int,
    now: float,
    action: Callable[[Any], T],
) -> tuple[AnySession, T] | None:
    """Lock the session row, apply ``action`` and store the result; ``None`` if the participant
    has no session. An exception in ``action`` rolls the transaction back."""
    session = load(conn, config, participant_id, lock=True)
    if session is None:
        return None
    result = action(session)
    save(conn, session, participant_id, now)
    return session, result


def sessions_of(conn: Connection, config: AnyConfig) -> Iterator[tuple[int, AnySession]]:
    """Every stored session of this session file, by participant id."""
    rows = conn.execute(
        select(writing_sessions.c.participant_id, writing_sessions.c.state)
        .where(writing_sessions.c.kind == config.kind, writing_sessions.c.session == config.name)
        .order_by(writing_sessions.c.participant_id)
    )
    for row in rows:
        yield int(row.participant_id), _session(config, json.loads(row.state))


def export(conn: Connection, config: AnyConfig) -> list[dict[str, Any]]:
    """Every session as a record of the sessions file (see :mod:`storyeval.collab.records`),
    with the participant's external id and completion code."""
    people = {
        int(row.id): row
        for row in conn.execute(
            select(
                participants.c.id, participants.c.external_id, participants.c.completion_code
            ).where(participants.c.kind == config.kind, participants.c.session == config.name)
        )
    }
    records = []
    for participant_id, session in sessions_of(conn, config):
        record = session.export()
        person = people.get(participant_id)
        record["external_id"] = person.external_id if person is not None else None
        record["completion_code"] = person.completion_code if person is not None else None
        records.append(record)
    return records


def progress(conn: Connection, config: AnyConfig) -> dict[str, Any]:
    """Counts for the admin pages: links, started, finished, sessions by phase, turns."""
    links = count_participants(conn, config.kind, config.name)
    phases: dict[str, int] = {}
    suggestion_turns = 0
    choices: dict[str, int] = {}
    for _, session in sessions_of(conn, config):
        phases[session.phase] = phases.get(session.phase, 0) + 1
        if isinstance(session, SloganSession):
            pulls = sum(len(task["pulls"]) for task in session.tasks)
            suggestion_turns += pulls
            choices[session.condition] = choices.get(session.condition, 0) + 1
            continue
        for turn in session.submitted_turns():
            if turn["author"] == "suggestion":
                suggestion_turns += 1
                choices[turn["chosen"]] = choices.get(turn["chosen"], 0) + 1
    return {
        "links": int(links),
        "started": sum(phases.values()),
        "finished": phases.get("done", 0),
        "phases": phases,
        "suggestion_turns": suggestion_turns,
        "choices": choices,
    }
