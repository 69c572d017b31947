"""Core routes: health, participant links, open enrollment, the admin dashboard and links.

Open enrollment (``/join/<kind>/<name>?pid=ID``) binds each external id to the browser that
claimed it first (a cookie holding a secret whose hash the database keeps): the same id from
another browser does not get the participant's link, so knowing someone's id is not enough to
take over their work; the participant's personal link (``/p/<token>``, shown on their first
page) is how they continue elsewhere. Ids longer than 256 characters or with control
characters are refused, never cut. Joins are rate-limited per client.

Every join of a session is decided under the session's enrollment lock (an advisory lock on
PostgreSQL, the write lock on SQLite), so two simultaneous joins with one id cannot both get
the participant, and ``max_participants`` (counted over consented participants) cannot be
overshot. A browser screened out of a session is sent back to its screen-out page, whatever id
it brings; an anonymous browser that joined before gets its own participation back; a session
on a crowd platform refuses joins without the platform's id (unless its file says
``require_id: false``).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from fastapi import APIRouter, Form, HTTPException, Request
from fastapi.responses import RedirectResponse, Response
from pydantic import BaseModel
from sqlalchemy import Connection, select

from storyeval import __version__
from storyeval.base.io import csv_text
from storyeval.server.participants import (
    MAX_EXTERNAL_ID,
    Participant,
    bind_browser,
    browser_key,
    count_enrolled,
    create_participants,
    lock_session,
    participant_by_token,
    participant_for_external_id,
    participants,
    participants_of_browser,
    rater_id,
)
from storyeval.server.routers import attachment
from storyeval.server.security import tokens_match
from storyeval.server.sessions import EnrollmentPolicy, SessionPlugin
from storyeval.server.state import (
    NOT_FOUND,
    Admin,
    ServerState,
    clean_text,
    rate_limited,
    server_state,
    valid_token,
)

router = APIRouter()
admin_router = APIRouter()

MAX_LINKS_PER_REQUEST = 1000
COOKIE_PREFIX = "storyeval-"


class Health(BaseModel):
    """The health check's answer: status, version and database backend."""

    status: str
    version: str
    database: str


def base_url(state: ServerState, request: Request) -> str:
    """The server's public base URL (``--base-url``, else the request's)."""
    return state.settings.base_url or str(request.base_url).rstrip("/")


@router.get("/healthz", response_model=Health)
def health(request: Request) -> Health:
    """Health check for load balancers and tests."""
    state = server_state(request)
    with state.db.read() as conn:
        conn.execute(select(1))
    return Health(status="ok", version=__version__, database=state.db.backend)


@router.get("/")
def home(request: Request) -> Response:
    """The start page: the sessions this server runs."""
    return server_state(request).message(
        "storyeval study server",
        "This server runs evaluation studies. Please use the personal link you were given.",
    )


@router.get("/p/{token}")
def participant_link(request: Request, token: str) -> Response:
    """Open enrollment: give this browser a participant link (or its existing one), within the rate limit and the session's capacity."""
    state = server_state(request)
    if not valid_token(token):
        raise HTTPException(status_code=404, detail=NOT_FOUND)
    with state.db.read() as conn:
        participant = participant_by_token(conn, token)
    if participant is None:
        raise HTTPException(status_code=404, detail=NOT_FOUND)
    session = state.session(participant.kind, participant.session)
    if session is None:
        raise HTTPException(status_code=404, detail="This study is not being served at the moment.")
    return RedirectResponse(session.entry_path(participant), status_code=303)


def _parameter(request: Request, name: str) -> str | None:
    """A URL parameter, checked: refused (400) when repeated, too long or with control
    characters; ``None`` when absent or empty."""
    values = request.query_params.getlist(name)
    if len(values) > 1:
        raise HTTPException(status_code=400, detail=f"The address gives {name} more than once.")
    if not values or not values[0].strip():
        return None
    value = clean_text(values[0].strip(), f"parameter {name}")
    if len(value) > MAX_EXTERNAL_ID:
        raise HTTPException(
            status_code=400,
            detail=f"The {name} in the address is longer than {MAX_EXTERNAL_ID} characters.",
        )
    return value


def _cookie(session: SessionPlugin) -> str:
    return f"{COOKIE_PREFIX}{session.kind}-{session.name}"


def _full(state: ServerState) -> Response:
    return state.message("The study is full", "Thank you for your interest: all places are taken.")


def _missing_id(state: ServerState, policy: EnrollmentPolicy) -> Response:
    return state.message(
        "Open this study from the recruitment platform",
        f"This address lacks your participant id ({policy.external_id_param}). Please open the "
        "study from the platform that recruited you: its link adds your id.",
        status_code=400,
    )


def _claim(
    conn: Connection,
    session: SessionPlugin,
    request: JoinRequest,
    now: float,
) -> Participant | str:
    """Decide a join inside the session's enrollment lock: the participant to hand out to this
    browser, or ``"full"`` / ``"taken"``."""
    kind, name, policy = session.kind, session.name, session.enrollment()
    lock_session(conn, kind, name)
    mine = participants_of_browser(conn, kind, name, request.secret) if request.had_cookie else []
    screened = [p for p in mine if p.status == "screened_out"]
    if screened:  # screened out stays screened out, whatever id the browser brings now
        return screened[-1]
    if request.external is not None:
        found = conn.execute(
            select(participants).where(
                participants.c.kind == kind,
                participants.c.session == name,
                participants.c.external_id == request.external,
            )
        ).first()
        if found is not None:
            return _bound_to_browser(conn, Participant.from_row(found), request.secret)
    else:
        resumable = [p for p in mine if p.status is None]
        if resumable:  # an anonymous browser that joined before continues its participation
            return resumable[-1]
    cap = policy.max_participants
    if cap is not None and count_enrolled(conn, kind, name) >= cap:
        return "full"
    if not session.can_enroll(conn, now):
        return "full"
    if request.external is not None:
        person, created = participant_for_external_id(
            conn,
            kind,
            name,
            request.external,
            now=now,
            browser_secret=request.secret,
            platform=request.platform,
        )
        return person if created else _bound_to_browser(conn, person, request.secret)
    person = create_participants(conn, kind, name, 1, now=now)[0]
    bind_browser(conn, person.id, request.secret)
    return person


def _bound_to_browser(conn: Connection, person: Participant, secret: str) -> Participant | str:
    """``person`` if the browser holding ``secret`` may have them (it claimed them, or nobody
    did yet: bound now), else ``"taken"``."""
    if person.browser_key is None:
        bind_browser(conn, person.id, secret)  # made by the admin or before 0.2
        return person
    if tokens_match(browser_key(secret), person.browser_key):
        return person
    return "taken"


@dataclass(frozen=True)
class JoinRequest:
    """What a join brings: the external id, the platform's parameters and the browser's
    binding secret (``had_cookie``: the browser sent a valid one)."""

    external: str | None
    platform: dict[str, str]
    secret: str
    had_cookie: bool


@router.get("/join/{kind}/{name}")
def join(request: Request, kind: str, name: str) -> Response:
    """Open enrollment: create a participant (or find the one with this external id, in the
    browser that claimed it; a browser screened out of the session gets its screen-out page)."""
    state = server_state(request)
    session = state.session(kind, name)
    if session is None or not session.enrollment().open:
        raise HTTPException(status_code=404, detail="There is no open study at this address.")
    policy = session.enrollment()
    external = _parameter(request, policy.external_id_param)
    if external is None and policy.require_id:
        return _missing_id(state, policy)
    platform = {p: v for p in policy.platform_parameters if (v := _parameter(request, p))}
    cookie_name = _cookie(session)
    secret = request.cookies.get(cookie_name) or ""
    had_cookie = len(secret) == 43 and valid_token(secret)
    if not had_cookie:
        secret = secrets.token_urlsafe(32)
    rate_limited(request, "join")
    now = state.clock()
    joining = JoinRequest(external, platform, secret, had_cookie)
    outcome = state.db.run(lambda conn: _claim(conn, session, joining, now))
    if outcome == "full":
        return _full(state)
    if outcome == "taken":
        return state.message(
            "Already started in another browser",
            "This id has already started the study in another browser. To continue, open the "
            "personal link shown on your first page (the address of that page). If you did not "
            "start the study, contact the researcher.",
            status_code=403,
        )
    assert isinstance(outcome, Participant)
    response = RedirectResponse(f"/p/{outcome.token}", status_code=303)
    response.set_cookie(
        cookie_name,
        secret,
        max_age=30 * 24 * 3600,
        httponly=True,
        samesite="lax",
        secure=request.url.scheme == "https",
        path="/",
    )
    return response


@admin_router.get("/")
def dashboard(state: Admin) -> Response:
    """The admin's overview of every session (admin token required)."""
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
    state: Admin,
    kind: str = Form(),
    name: str = Form(),
    count: int = Form(),
) -> Response:
    """Make personal participant links (admin token required); CSV with formula-escaped cells."""
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
def links_csv(request: Request, state: Admin, kind: str, name: str) -> Response:
    """Every participant's link; cells a spreadsheet would run as formulas are made inert."""
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
                participants.c.status,
            )
            .where(participants.c.kind == kind, participants.c.session == name)
            .order_by(participants.c.id)
        ).all()
    root = base_url(state, request)
    body = csv_text(
        (
            [
                rater_id(row.id),
                f"{root}/p/{row.token}",
                row.external_id or "",
                "yes" if row.started_at else "no",
                "yes" if row.finished_at else "no",
                row.status or "",
            ]
            for row in rows
        ),
        header=["rater_id", "link", "external_id", "started", "finished", "status"],
        escape_formulas=True,
    )
    return attachment(body, f"{name}-links.csv", "text/csv; charset=utf-8")
