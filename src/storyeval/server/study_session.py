"""The ``study`` session type: a human evaluation study served to participants."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

from sqlalchemy import Connection

from storyeval.human.model import Study
from storyeval.human.study import load_study
from storyeval.server import study_export, study_flow, study_tables
from storyeval.server.db import Database
from storyeval.server.participants import Participant
from storyeval.server.sessions import EnrollmentPolicy, SessionPlugin


class StudySession(SessionPlugin):
    """Serves one :class:`~storyeval.human.model.Study`."""

    kind: ClassVar[str] = "study"

    def __init__(self, study: Study) -> None:
        self.study = study
        self.name = study.name
        self.title = study.config.title

    @classmethod
    def from_file(cls, path: Path) -> StudySession:
        """The study session of a study file."""
        return cls(load_study(path))

    def setup(self, db: Database, *, now: float) -> None:
        study_tables.register_study(db, self.study, now=now)

    def enrollment(self) -> EnrollmentPolicy:
        """The study's open-enrollment settings."""
        config = self.study.config
        policy = EnrollmentPolicy.from_config(
            config.enrollment, platform_parameters=config.platform.parameters
        )
        return replace(policy, external_id_param=config.external_id_param)

    def template_names(self) -> list[str]:
        pages = ("welcome", "done", "more", "questions", "explain", "comprehension")
        return [
            f"protocols/{self.study.protocol}.html",
            f"protocols/{self.study.protocol}-feedback.html",
            "message.html",
            *(f"study/{page}.html" for page in pages),
        ]

    def entry_path(self, participant: Participant) -> str:
        # the welcome page sends anyone past it to where they are: one redirect less for
        # newcomers than the entry page
        return f"/study/{participant.token}/welcome"

    def can_enroll(self, conn: Connection, now: float) -> bool:
        return study_flow.has_available_slots(conn, self.study, now)

    def summary(self, conn: Connection) -> dict[str, Any]:
        p = study_export.progress(conn, self.study)
        return {
            "protocol": p["protocol"],
            "participants": p["participants"],
            "started": p["started"],
            "finished": p["finished"],
            "screened out / returned": p["screened_out_or_returned"],
            "judgments": p["judgments"],
            "slots done": f"{p['slots_done']} / {p['slots_total']}",
        }
