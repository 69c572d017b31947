"""Core routes: health, participant links, open enrollment, the admin dashboard and links."""

from __future__ import annotations

import csv
import io
from typing import Annotated

from fastapi import APIRouter, Depends, Form, HTTPException, Request
from fastapi.responses import RedirectResponse, Response
from pydantic import BaseModel
from sqlalchemy import Connection, select

from storyeval import __version__
from storyeval.server.app import ServerState, server_state
from storyeval.server.deps import NOT_FOUND, require_admin
from storyeval.server.participants import (
    count_participants,
    create_participants,
    participant_by_token,
    participant_for_external_id,
    participants,
    rater_id,
)
from storyeval.server.routers import attachment

router = APIRouter()
admin_router = APIRouter()

MAX_LINKS_PER_REQUEST = 1000


class Health(BaseModel):
    status: str
    version: str
    database: str


def base_url(state: ServerState, request: Request) -> str:
    return state.settings.base_url or str(request.base_url).rstrip("/")


@router.get("/healthz", response_model=Health)
def health(request: Request) -> Health:
    state = server_state(request)
    with state.db.read() as conn:
        conn.execute(select(1))
    return Health(status="ok", version=__version__, database=state.db.backend)


@router.get("/")
def home(request: Request) -> Response:
    state = server_state(request)
    return state.page(
        "message.html",
        {
            "title": "storyeval study server",
            "message": "This server runs evaluation studies. Please use the personal link you were given.",
            "links": [],
        },
    )


@router.get("/p/{token}")
def participant_link(request: Request, token: str) -> Response:
    state = server_state(request)
    with state.db.read() as conn:
        participant = participant_by_token(conn, token)
    if participant is None:
        raise HTTPException(status_code=404, detail=NOT_FOUND)
    session = state.session(participant.kind, participant.session)
    if session is None:
        raise HTTPException(status_code=404, detail="This study is not being served at the moment.")
    return RedirectResponse(session.entry_path(participant), status_code=303)


@router.get("/join/{kind}/{name}")
def join(request: Request, kind: str, name: str) -> Response:
    """Open enrollment: create a participant (or find the one with this external id)."""
    state = server_state(request)
    session = state.session(kind, name)
    if session is None or not session.enrollment().open:
        raise HTTPException(status_code=404, detail="There is no open study at this address.")
    policy = session.enrollment()
    external = request.query_params.get(policy.external_id_param)
    if external is not None:
        external = external.strip()[:256] or None
    now = state.clock()

    def work(conn: Connection) -> str | None:
        if external is not None:
            found = conn.execute(
                select(participants.c.token).where(
                    participants.c.kind == kind,
                    participants.c.session == name,
                    participants.c.external_id == external,
                )
            ).scalar_one_or_none()
            if found is not None:
                return str(found)
        if (
            policy.max_participants is not None
            and count_participants(conn, kind, name) >= policy.max_participants
        ):
            return None
        if not session.can_enroll(conn):
            return None
        if external is not None:
            participant, _ = participant_for_external_id(conn, kind, name, external, now=now)
        else:
            participant = create_participants(conn, kind, name, 1, now=now)[0]
        return participant.token

    token = state.db.run(work)
    if token is None:
        return state.page(
            "message.html",
            {
                "title": "The study is full",
                "message": "Thank you for your interest: all places are taken.",
                "links": [],
            },
            status_code=200,
        )
    return RedirectResponse(f"/p/{token}", status_code=303)


@admin_router.get("/")
def dashboard(state: Annotated[ServerState, Depends(require_admin)]) -> Response:
    with state.db.read() as conn:
        entries = [
            {
                "kind": s.kind,
                "name": s.name,
                "title": s.title,
                "summary": s.summary(conn),
                "path": s.admin_path(state.admin_token),
                "enrollment": s.enrollment(),
            }
            for s in state.sessions.values()
        ]
    return state.page(
        "admin/dashboard.html", {"sessions": entries, "admin_token": state.admin_token}
    )


@admin_router.post("/links")
def new_links(
    request: Request,
    state: Annotated[ServerState, Depends(require_admin)],
    kind: Annotated[str, Form()],
    name: Annotated[str, Form()],
    count: Annotated[int, Form()],
) -> Response:
    session = state.session(kind, name)
    if session is None:
        raise HTTPException(status_code=404, detail=f"No session {kind}/{name} is served here.")
    if not 1 <= count <= MAX_LINKS_PER_REQUEST:
        raise HTTPException(
            status_code=422, detail=f"count must be between 1 and {MAX_LINKS_PER_REQUEST}"
        )
    now = state.clock()
    created = state.db.run(lambda conn: create_participants(conn, kind, name, count, now=now))
    root = base_url(state, request)
    return state.page(
        "admin/links.html",
        {
            "session": session,
            "links": [f"{root}/p/{p.token}" for p in created],
            "csv_path": f"/admin/{state.admin_token}/links/{kind}/{name}.csv",
            "back": f"/admin/{state.admin_token}/",
        },
    )


@admin_router.get("/links/{kind}/{name}.csv")
def links_csv(
    request: Request, state: Annotated[ServerState, Depends(require_admin)], kind: str, name: str
) -> Response:
    if state.session(kind, name) is None:
        raise HTTPException(status_code=404, detail=f"No session {kind}/{name} is served here.")
    with state.db.read() as conn:
        rows = conn.execute(
            select(
                participants.c.id,
                participants.c.token,
                participants.c.external_id,
                participants.c.started_at,
                participants.c.finished_at,
            )
            .where(participants.c.kind == kind, participants.c.session == name)
            .order_by(participants.c.id)
        ).all()
    root = base_url(state, request)
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["rater_id", "link", "external_id", "started", "finished"])
    for row in rows:
        writer.writerow(
            [
                rater_id(row.id),
                f"{root}/p/{row.token}",
                row.external_id or "",
                "yes" if row.started_at else "no",
                "yes" if row.finished_at else "no",
            ]
        )
    return attachment(buffer.getvalue(), f"{name}-links.csv", "text/csv; charset=utf-8")
