"""Session types: what the study server serves to participants.

The core (app factory, database, participants and their tokens, page timing, admin
authentication) knows nothing about studies. A *session type* adds its own tables (on
:data:`storyeval.server.db.metadata`), its own routers and templates, and a loader for the
``kind:`` of its YAML files, registered in :data:`storyeval.server.kinds.SESSION_KINDS`. Human
evaluation studies are the kind ``study``; collaborative-writing sessions are ``cyoa`` and
``mil``.

A participant's link is always ``/p/<token>``; the core redirects it to
:meth:`SessionPlugin.entry_path`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from sqlalchemy import Connection

from storyeval.base.yamlfile import Enrollment
from storyeval.server.db import Database
from storyeval.server.participants import (
    Participant,
    count_active_from_client,
    count_enrolled,
    lock_session,
    set_client_key,
)


@dataclass(frozen=True)
class EnrollmentPolicy:
    """Whether ``/join/<kind>/<name>`` creates participants, and with which limits.

    ``platform_parameters`` are URL parameters stored with the participant (e.g. Prolific's
    ``STUDY_ID`` and ``SESSION_ID``); ``require_id``: a join without the external id is
    refused; ``max_per_address`` unfinished participants may have consented from one network
    address within ``address_window_s`` (see :class:`storyeval.base.yamlfile.Enrollment`).
    """

    open: bool = False
    external_id_param: str = "pid"
    max_participants: int | None = None
    platform_parameters: tuple[str, ...] = ()
    require_id: bool = False
    max_per_address: int | None = None
    address_window_s: float = 3600.0

    @classmethod
    def from_config(
        cls, enrollment: Enrollment, *, platform_parameters: tuple[str, ...] = ()
    ) -> EnrollmentPolicy:
        """The policy of a file's ``enrollment`` section; a crowd platform (one that sends
        parameters) requires its id unless the file says ``require_id: false``."""
        require = enrollment.require_id
        return cls(
            enrollment.open,
            enrollment.external_id_param,
            enrollment.max_participants,
            platform_parameters,
            bool(platform_parameters) if require is None else require,
            enrollment.max_per_address,
            60.0 * enrollment.address_window_minutes,
        )

    def admit(
        self, conn: Connection, participant: Participant, client: str | None, now: float
    ) -> str | None:
        """Whether an open-enrollment participant may consent now: ``None`` (yes; the client's
        address key is stored with them), ``"full"`` (``max_participants`` hold a place) or
        ``"busy"`` (their address has ``max_per_address`` unfinished participants). Decided
        under the session's enrollment lock, so concurrent consents cannot overshoot."""
        lock_session(conn, participant.kind, participant.session)
        if self.max_participants is not None:
            held = count_enrolled(
                conn, participant.kind, participant.session, exclude=participant.id
            )
            if held >= self.max_participants:
                return "full"
        if client is not None and self.max_per_address is not None:
            active = count_active_from_client(
                conn,
                participant.kind,
                participant.session,
                client,
                since=now - self.address_window_s,
                exclude=participant.id,
            )
            if active >= self.max_per_address:
                return "busy"
        if client is not None:
            set_client_key(conn, participant.id, client)
        return None


class SessionPlugin:
    """One session (a study, a writing session...) served by the app."""

    kind: ClassVar[str]
    name: str
    title: str

    def setup(self, db: Database, *, now: float) -> None:
        """Prepare the session's rows (the tables already exist); fail if the database holds an
        incompatible version of this session."""
        raise NotImplementedError

    def shutdown(self) -> None:
        """Stop background work (e.g. generation workers) when the server stops."""

    def template_names(self) -> list[str]:
        """The templates its pages use, compiled when the server starts (so that the first
        participant does not wait for them)."""
        return []

    def enrollment(self) -> EnrollmentPolicy:
        """The open-enrollment settings of the session (None: personal links only)."""
        return EnrollmentPolicy()

    def can_enroll(self, conn: Connection, now: float) -> bool:
        """Whether a new participant may join now (e.g. places left)."""
        return True

    def entry_path(self, participant: Participant) -> str:
        """Where the participant's link ``/p/<token>`` leads."""
        return f"/{self.kind}/{participant.token}/"

    def summary(self, conn: Connection) -> dict[str, Any]:
        """A few numbers for the admin dashboard."""
        return {}

    def admin_path(self, admin_token: str) -> str:
        """The path of the session's admin page."""
        return f"/admin/{admin_token}/{self.kind}/{self.name}/"
