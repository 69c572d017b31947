"""The server's state and the typed dependencies every router uses: the state itself, the
participant behind a token, the admin check, strict form parsing and the per-client rate limit.

Routers import this module (never the app factory), so the server has no import cycle.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar
from urllib.parse import parse_qsl

import jinja2
from fastapi import Depends, HTTPException, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from storyeval import __version__
from storyeval.server.db import Database
from storyeval.server.participants import Participant, client_key, participant_by_token
from storyeval.server.security import tokens_match
from storyeval.server.sessions import SessionPlugin
from storyeval.server.settings import Settings
from storyeval.server.templating import render

log = logging.getLogger("storyeval.server")
_PROXY_WARNED = threading.Event()
NOT_FOUND = "This link is not valid. Check that you copied the whole address."
MAX_TEXT = 5000
"""Longest free-text answer accepted (characters); a longer one is refused, never cut."""
MAX_FIELDS = 200
KNOWN_TOKENS = 50_000
TOKEN_PATTERN = re.compile(r"^[A-Za-z0-9_-]{16,64}$")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


class RateLimiter:
    """A token bucket per client and action: ``rate`` requests per minute, bursts of ``burst``.

    In memory, per server process (with ``--workers N`` each worker keeps its own buckets, so
    a client gets at most N times the rate).
    """

    def __init__(self, rate_per_minute: float, burst: int, *, clock: Callable[[], float]) -> None:
        self.rate = rate_per_minute / 60.0
        self.burst = float(burst)
        self.clock = clock
        self._buckets: dict[tuple[str, str], tuple[float, float]] = {}
        self._lock = threading.Lock()

    def allow(self, client: str, action: str) -> bool:
        """Take one token for ``(client, action)``; False when the bucket is empty."""
        if self.rate <= 0:
            return True
        now = self.clock()
        key = (client, action)
        with self._lock:
            tokens, last = self._buckets.get(key, (self.burst, now))
            tokens = min(self.burst, tokens + (now - last) * self.rate)
            if tokens < 1.0:
                self._buckets[key] = (tokens, now)
                return False
            self._buckets[key] = (tokens - 1.0, now)
            if len(self._buckets) > 100_000:  # forget idle clients
                cutoff = now - self.burst / self.rate
                self._buckets = {k: v for k, v in self._buckets.items() if v[1] > cutoff}
            return True


@dataclass
class ServerState:
    """What request handlers reach through :func:`server_state`."""

    settings: Settings
    db: Database
    templates: jinja2.Environment
    sessions: dict[tuple[str, str], SessionPlugin]
    admin_token: str
    clock: Callable[[], float] = time.time
    client_salt: str = ""
    limiter: RateLimiter = field(init=False)
    known: dict[str, Participant] = field(init=False, default_factory=dict)
    #: computed admin tables (the live agreement page), keyed by what they were computed from
    computed: dict[tuple[Any, ...], Any] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.limiter = RateLimiter(
            self.settings.enroll_rate_per_minute, self.settings.enroll_burst, clock=self.clock
        )

    def participant(self, token: str) -> Participant | None:
        """The participant of ``token`` as first read by this process (id, token, kind and
        session never change; handlers re-read the rest inside their transactions)."""
        found = self.known.get(token)
        if found is None:
            with self.db.read() as conn:
                found = participant_by_token(conn, token)
            if found is not None:
                if len(self.known) >= KNOWN_TOKENS:
                    self.known.clear()
                self.known[token] = found
        return found

    def session(self, kind: str, name: str) -> SessionPlugin | None:
        """The session ``name``; an unknown name is a 404."""
        return self.sessions.get((kind, name))

    def page(self, name: str, context: dict[str, Any], *, status_code: int = 200) -> Response:
        """Render template ``name`` with ``context`` as an HTML response."""
        return render(
            self.templates, name, {"version": __version__, **context}, status_code=status_code
        )

    def message(
        self,
        title: str,
        message: str,
        *,
        status_code: int = 200,
        links: Sequence[tuple[str, str]] = (),
    ) -> Response:
        """The plain message page (errors use it too)."""
        return self.page(
            "message.html",
            {"title": title, "message": message, "links": list(links)},
            status_code=status_code,
        )


def server_state(request: Request) -> ServerState:
    """The server state of the running application (a FastAPI dependency)."""
    state: ServerState = request.app.state.storyeval
    return state


State = Annotated[ServerState, Depends(server_state)]


# ----------------------------------------------------------------------------- participants


def valid_token(token: str) -> bool:
    """Whether ``token`` has the shape of a participant token (checked before any query)."""
    return bool(TOKEN_PATTERN.match(token))


@dataclass(frozen=True)
class Who:
    """The participant a request is for, and the session serving them."""

    participant: Participant
    session: SessionPlugin


def participant_of(*kinds: str) -> Callable[[Request, str], Awaitable[Who]]:
    """A dependency resolving the ``token`` path parameter to a participant of one of ``kinds``.

    An unknown or malformed token, or one of another session type, is a plain 404: the
    response does not tell whether a token exists. Known tokens are answered from memory (no
    database round trip, no thread hop); the participant's changing fields (start, finish,
    activity) must be read again by the handler.
    """

    async def dependency(request: Request, token: str) -> Who:
        state = server_state(request)
        if not valid_token(token):
            raise HTTPException(status_code=404, detail=NOT_FOUND)
        participant = state.known.get(token)
        if participant is None:
            participant = await run_in_threadpool(state.participant, token)
        kind = request.path_params.get("kind")
        if participant is None or participant.kind not in kinds:
            raise HTTPException(status_code=404, detail=NOT_FOUND)
        if kind is not None and kind != participant.kind:
            raise HTTPException(status_code=404, detail=NOT_FOUND)
        session = state.session(participant.kind, participant.session)
        if session is None:
            raise HTTPException(
                status_code=404, detail="This study is not being served at the moment."
            )
        return Who(participant, session)

    return dependency


def require_admin(request: Request, admin_token: str) -> ServerState:
    """Refuse (403) unless the path carries the admin token."""
    state = server_state(request)
    if not tokens_match(admin_token, state.admin_token):
        raise HTTPException(status_code=403, detail="This page needs the admin link.")
    return state


Admin = Annotated[ServerState, Depends(require_admin)]


def client_address(request: Request) -> str:
    """The client's address (the first ``X-Forwarded-For`` hop when the settings trust a
    reverse proxy)."""
    state = server_state(request)
    forwarded = request.headers.get("x-forwarded-for", "")
    if state.settings.trust_proxy:
        first = forwarded.split(",")[0].strip()
        if first:
            return first
    elif forwarded and not _PROXY_WARNED.is_set():
        _PROXY_WARNED.set()
        log.warning(
            "requests carry X-Forwarded-For but --trust-proxy is off: every client behind the "
            "proxy shares one address, so the per-address limits of open enrollment apply to "
            "all of them together (serve with --trust-proxy behind a reverse proxy)"
        )
    return request.client.host if request.client is not None else "unknown"


BUSY = (
    "Too many people from your network address have started this study in the last hour. "
    "Please finish the study you started, or try again later."
)


def client_key_of(request: Request) -> str:
    """The keyed hash of the client's address that the database keeps (see
    :func:`storyeval.server.participants.client_key`)."""
    state = server_state(request)
    return client_key(client_address(request), state.client_salt or state.admin_token)


def admission(
    request: Request, who: Who, now: float
) -> Callable[[Any, Participant], str | None] | None:
    """Open enrollment's limits at consent: the rate (checked now, 429) and, returned as
    ``admit(conn, participant)`` to run inside the consent's transaction, the session's places
    and participants per address (:meth:`EnrollmentPolicy.admit`). ``None`` for participants who
    came through an admin link: invitations are not limited."""
    if who.participant.browser_key is None:
        return None
    rate_limited(request, "start")
    policy, client = who.session.enrollment(), client_key_of(request)

    def admit(conn: Any, current: Participant) -> str | None:
        return policy.admit(conn, current, client, now)

    return admit


def rate_limited(request: Request, action: str) -> None:
    """Refuse (429) a client that exceeded the enrollment rate for ``action``."""
    state = server_state(request)
    if not state.limiter.allow(client_address(request), action):
        raise HTTPException(
            status_code=429,
            detail="Too many attempts from your network in a short time. Please wait a minute "
            "and try again.",
        )


# ----------------------------------------------------------------------------- handlers

Handler = TypeVar("Handler", bound=Callable[..., Any])


def database_bound(handler: Handler) -> Handler:
    """Run a page handler, written as a plain function, on the event loop.

    Its work is a few short transactions: on SQLite each statement takes microseconds, on
    PostgreSQL a loopback round trip. A hop to the thread pool and the competition for the
    GIL between the loop and the threads cost more than that work: measured on the 2-core
    benchmark, running the handlers in threads lowered throughput by a fifth on SQLite and by
    a tenth on PostgreSQL, and doubled p99. Several server processes (``--workers``) use the
    cores. FastAPI sees the handler's parameters through ``functools.wraps``.
    """

    @functools.wraps(handler)
    async def endpoint(*args: Any, **kwargs: Any) -> Any:
        return handler(*args, **kwargs)

    return endpoint  # type: ignore[return-value]


# ----------------------------------------------------------------------------- forms


def clean_text(value: str, what: str) -> str:
    """``value`` if it holds no NUL or other control character (tabs and newlines are fine),
    else a 400."""
    if _CONTROL.search(value):
        raise HTTPException(status_code=400, detail=f"The {what} contains a control character.")
    return value


@dataclass(frozen=True)
class FormData:
    """A submitted form with one value per field (a repeated field is refused)."""

    values: dict[str, str]

    def get(self, key: str, default: str = "") -> str:
        """The value of field ``name`` (``default`` when absent)."""
        return self.values.get(key, default)

    def text(self, key: str) -> str:
        """A free-text answer, stripped (length checked by :func:`too_long`)."""
        return self.values.get(key, "").strip()


async def read_form(request: Request) -> FormData:
    """Parse a form strictly: a field sent twice (``grammar=1&grammar=5``), a file, more than
    :data:`MAX_FIELDS` fields, malformed encoding or a control character are refused (4xx), so
    nothing ambiguous is ever stored."""
    kind = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if kind in ("application/x-www-form-urlencoded", ""):
        body = await request.body()
        try:  # what browsers send for these forms: parsed directly, much faster than the
            # general multipart machinery
            items = parse_qsl(
                body.decode("utf-8"),
                keep_blank_values=True,
                strict_parsing=bool(body),
                errors="strict",
                max_num_fields=MAX_FIELDS,
            )
        except (UnicodeDecodeError, ValueError):
            raise HTTPException(status_code=400, detail="The form could not be read.") from None
    else:
        try:
            form = await request.form(max_files=0, max_fields=MAX_FIELDS)
        except HTTPException:
            raise
        except Exception:  # malformed body (starlette raises its own errors)
            raise HTTPException(status_code=400, detail="The form could not be read.") from None
        items = []
        for key, value in form.multi_items():
            if not isinstance(value, str):
                raise HTTPException(status_code=422, detail="This form takes no files.")
            items.append((key, value))
    repeated = sorted(k for k, n in Counter(k for k, _ in items).items() if n > 1)
    if repeated:
        raise HTTPException(
            status_code=422, detail=f"The form sent {repeated[0]!r} more than once."
        )
    return FormData({clean_text(k, "form"): clean_text(v, "answer") for k, v in items})


Form = Annotated[FormData, Depends(read_form)]


def too_long(text: str) -> str | None:
    """The message for a free-text answer over :data:`MAX_TEXT` characters, else ``None``."""
    if len(text) > MAX_TEXT:
        return f"Please shorten your answer to at most {MAX_TEXT} characters (it has {len(text)})."
    return None


def parse_int(raw: str) -> int | None:
    """An ASCII decimal integer, else ``None`` (``"²"`` and ``"1e3"`` are not numbers here)."""
    text = raw.strip()
    if not re.fullmatch(r"[+-]?[0-9]{1,9}", text):
        return None
    return int(text)
