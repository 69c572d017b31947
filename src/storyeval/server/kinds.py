"""The registry of session kinds the server can run: ``study`` (human evaluation studies),
``cyoa``, ``mil`` and ``slogan`` (collaborative writing). Each kind has a loader for its YAML files and
the routers it mounts (participant pages, admin pages).

A package adds a kind with ``SESSION_KINDS.register("mykind", SessionKind(...))`` in a module
named by an entry point of the group ``storyeval.session_kinds``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fastapi import APIRouter

from storyeval.base.errors import StoryevalError
from storyeval.base.registry import Registry
from storyeval.base.yamlfile import YamlFileError, read_yaml
from storyeval.server.routers import slogan, study_admin, writing, writing_admin
from storyeval.server.routers import study as study_pages
from storyeval.server.sessions import SessionPlugin
from storyeval.server.study_session import StudySession
from storyeval.server.writing_session import WritingSessionPlugin


@dataclass(frozen=True)
class SessionKind:
    """How to load a kind's files and which routers serve it (mounted once per app).

    ``first``: the participant routers are matched before the core's (they must not shadow
    ``/``, ``/healthz``, ``/p/...`` or ``/join/...``: give them a fixed first path segment).
    """

    load: Callable[[Path], SessionPlugin]
    routers: tuple[APIRouter, ...] = ()
    admin_routers: tuple[APIRouter, ...] = ()
    first: bool = False


SESSION_KINDS: Registry[SessionKind] = Registry(
    "session kind", entry_point_group="storyeval.session_kinds"
)
_WRITING = SessionKind(WritingSessionPlugin.from_file, (writing.router,), (writing_admin.router,))
SESSION_KINDS.register(
    "study",
    SessionKind(StudySession.from_file, (study_pages.router,), (study_admin.router,), first=True),
)
SESSION_KINDS.register("cyoa", _WRITING)
SESSION_KINDS.register("mil", _WRITING)
# fixed first path segment (/slogan/...): matched before the writing routers' /{kind}/...
SESSION_KINDS.register(
    "slogan",
    SessionKind(
        WritingSessionPlugin.from_file, (slogan.router,), (writing_admin.router,), first=True
    ),
)


def load_session(path: str | Path) -> SessionPlugin:
    """Load a session file, dispatching on its ``kind:`` (default ``study``)."""
    file_path = Path(path)
    try:
        data = read_yaml(file_path, what="a session file").data
    except YamlFileError:
        data = None  # the kind's loader reports the problem with its line
    kind = data.get("kind", "study") if isinstance(data, dict) else "study"
    if kind not in SESSION_KINDS:
        raise StoryevalError(
            f"{file_path}:1: kind: must be one of {', '.join(SESSION_KINDS.names())}; got {kind!r}"
        )
    return SESSION_KINDS.get(kind).load(file_path)
