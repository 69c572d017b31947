"""Session types: what the study server serves to participants.

The core (app factory, database, participants and their tokens, page timing, admin
authentication) knows nothing about studies. A *session type* adds its own tables (on
:data:`storyeval.server.db.metadata`), its own routers and templates, and registers a loader
for the ``kind:`` of its YAML files. Human evaluation studies are the session type ``study``
(:mod:`storyeval.server.study_session`); collaborative-writing sessions are added the same way,
without touching the core:

.. code-block:: python

    class WritingSession(SessionPlugin):
        kind = "cyoa"
        routers = (cyoa_router,)            # mounted once for the kind, e.g. under /cyoa/{token}
        admin_routers = (cyoa_admin_router,)  # mounted under /admin/{admin_token}
        template_packages = (("storyeval.server", "templates"),)
        ...

    register_kind("cyoa", WritingSession.from_file)

A participant's link is always ``/p/<token>``; the core redirects it to
:meth:`SessionPlugin.entry_path`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from fastapi import APIRouter
from sqlalchemy import Connection

from storyeval.errors import StoryevalError
from storyeval.server.db import Database
from storyeval.server.participants import Participant


@dataclass(frozen=True)
class EnrollmentPolicy:
    """Whether ``/join/<kind>/<name>`` creates participants, and with which limits."""

    open: bool = False
    external_id_param: str = "pid"
    max_participants: int | None = None


class SessionPlugin(ABC):
    """One session (a study, a writing session...) served by the app."""

    kind: ClassVar[str]
    routers: ClassVar[tuple[APIRouter, ...]] = ()
    admin_routers: ClassVar[tuple[APIRouter, ...]] = ()
    template_packages: ClassVar[tuple[tuple[str, str], ...]] = ()

    name: str
    title: str

    @abstractmethod
    def setup(self, db: Database, *, now: float) -> None:
        """Prepare the session's rows (the tables already exist); fail if the database holds an
        incompatible version of this session."""

    def enrollment(self) -> EnrollmentPolicy:
        return EnrollmentPolicy()

    def can_enroll(self, conn: Connection) -> bool:
        """Whether a new participant may join now (e.g. places left)."""
        return True

    def entry_path(self, participant: Participant) -> str:
        """Where the participant's link ``/p/<token>`` leads."""
        return f"/{self.kind}/{participant.token}/"

    def summary(self, conn: Connection) -> dict[str, Any]:
        """A few numbers for the admin dashboard."""
        return {}

    def admin_path(self, admin_token: str) -> str:
        return f"/admin/{admin_token}/{self.kind}/{self.name}/"


Loader = Callable[[Path], SessionPlugin]
_KINDS: dict[str, Loader] = {}


def register_kind(kind: str, loader: Loader) -> None:
    """Make ``storyeval serve`` accept YAML files whose ``kind:`` is ``kind``."""
    _KINDS[kind] = loader


def registered_kinds() -> list[str]:
    _ensure_builtin()
    return sorted(_KINDS)


def _ensure_builtin() -> None:
    if "study" not in _KINDS:
        from storyeval.server import study_session  # noqa: F401  (registers "study")
    if "cyoa" not in _KINDS:
        from storyeval.server import writing_session  # noqa: F401  (registers "cyoa", "mil")


def load_session(path: str | Path) -> SessionPlugin:
    """Load a session file, dispatching on its ``kind:`` (default ``study``)."""
    import yaml

    _ensure_builtin()
    file_path = Path(path)
    if not file_path.exists():
        raise FileNotFoundError(f"{file_path}: no such file")
    try:
        data = yaml.safe_load(file_path.read_text(encoding="utf-8"))
    except yaml.YAMLError:
        data = None  # the kind's loader reports the syntax error with its line
    kind = data.get("kind", "study") if isinstance(data, dict) else "study"
    if kind not in _KINDS:
        raise StoryevalError(
            f"{file_path}:1: kind: must be one of {', '.join(sorted(_KINDS))}; got {kind!r}"
        )
    return _KINDS[kind](file_path)
