"""Request dependencies: the server state, participant and admin authentication."""

from __future__ import annotations

from collections.abc import Callable

from fastapi import HTTPException, Request

from storyeval.server.app import ServerState, server_state
from storyeval.server.participants import Participant, participant_by_token
from storyeval.server.security import tokens_match
from storyeval.server.sessions import SessionPlugin

NOT_FOUND = "This link is not valid. Check that you copied the whole address."


def participant_of(kind: str) -> Callable[[Request, str], tuple[Participant, SessionPlugin]]:
    """A dependency resolving the ``token`` path parameter to a participant of ``kind``.

    An unknown token, or one of another session type, is a plain 404: the response does not
    tell whether a token exists.
    """

    def dependency(request: Request, token: str) -> tuple[Participant, SessionPlugin]:
        state = server_state(request)
        with state.db.read() as conn:
            participant = participant_by_token(conn, token)
        if participant is None or participant.kind != kind:
            raise HTTPException(status_code=404, detail=NOT_FOUND)
        session = state.session(kind, participant.session)
        if session is None:
            raise HTTPException(
                status_code=404, detail="This study is not being served at the moment."
            )
        return participant, session

    return dependency


def require_admin(request: Request, admin_token: str) -> ServerState:
    """Refuse (403) unless the path carries the admin token."""
    state = server_state(request)
    if not tokens_match(admin_token, state.admin_token):
        raise HTTPException(status_code=403, detail="This page needs the admin link.")
    return state


__all__ = ["NOT_FOUND", "ServerState", "participant_of", "require_admin"]
