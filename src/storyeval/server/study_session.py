"""The ``study`` session type: a human evaluation study served to participants."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from fastapi import APIRouter
from sqlalchemy import Connection

from storyeval.human.study import Study, load_study
from storyeval.server import study_store
from storyeval.server.db import Database
from storyeval.server.sessions import EnrollmentPolicy, SessionPlugin, register_kind


class StudySession(SessionPlugin):
    """Serves one :class:`~storyeval.human.study.Study`."""

    kind: ClassVar[str] = "study"
    routers: ClassVar[tuple[APIRouter, ...]] = ()
    admin_routers: ClassVar[tuple[APIRouter, ...]] = ()

    def __init__(self, study: Study) -> None:
        self.study = study
        self.name = study.name
        self.title = study.config.title

    @classmethod
    def from_file(cls, path: Path) -> StudySession:
        return cls(load_study(path))

    def setup(self, db: Database, *, now: float) -> None:
        study_store.register_study(db, self.study, now=now)

    def enrollment(self) -> EnrollmentPolicy:
        e = self.study.config.enrollment
        return EnrollmentPolicy(e.open, e.external_id_param, e.max_participants)

    def can_enroll(self, conn: Connection) -> bool:
        return study_store.open_slot_count(conn, self.study) > 0

    def summary(self, conn: Connection) -> dict[str, Any]:
        p = study_store.progress(conn, self.study)
        return {
            "protocol": p["protocol"],
            "participants": p["participants"],
            "started": p["started"],
            "finished": p["finished"],
            "judgments": p["judgments"],
            "slots done": f"{p['slots_done']} / {p['slots_total']}",
        }


def _mount_routers() -> None:
    from storyeval.server.routers import study, study_admin

    StudySession.routers = (study.router,)
    StudySession.admin_routers = (study_admin.router,)


_mount_routers()
register_kind("study", StudySession.from_file)
