"""One writer's slogan-writing session (Clark 2021, section 2.5, Figure 2.3), independent of
any server, and the suggester that serves it.

A :class:`SloganSession` is a state machine over plain JSON data (one database row, one
transaction a step), like :class:`~storyeval.collab.session.WritingSession`. A writer writes one
slogan per prompt of the session file, in an order rotated per writer (balanced), in the
condition assigned to them (``solo`` or ``mil``, in turn). Phases:

``write``
    The writer sees the prompt, a keywords field and a draft field. In the ``mil`` condition
    they may *pull* suggestions at any time: the draft and keywords are kept in the history
    and up to three suggestions are generated off the request path.
``generating``
    A pull is being served (the writer waits); then back to ``write``, the suggestions beside
    the draft (never in it) and every earlier pull in the history.
``survey``
    The final slogan is submitted: the slogan column of Table 2.2 and satisfaction.
``final``
    After the last slogan: enjoyment, and for ``mil`` writers the suggestion questions and
    "would you use it again"; open questions.
``done``

Examples
--------
>>> from storyeval.collab.config import parse_writing_config
>>> config = parse_writing_config({"kind": "slogan", "name": "demo", "title": "Slogans",
...     "prompts": [{"id": "her", "text": "The movie Her."}]})
>>> s = SloganSession.start(config, participant="p00002", now=0.0, prompt_index=1)
>>> s.condition, s.phase
('mil', 'write')
>>> [r] = s.pull(["love", "voice"], "A voice to love.", now=3.0)
>>> s.phase
'generating'
>>> _ = s.add_suggestion(r.request_id, SuggestionResult(text="Love finds a voice.",
...     signature="sig", seed=r.seed, started_at=3.0, finished_at=4.0,
...     extra={"suggestions": ["Love finds a voice."]}), now=4.0)
>>> s.phase, s.current_suggestions()
('write', ['Love finds a voice.'])
>>> s.submit_slogan("Her voice, your love.", now=9.0)
>>> s.phase
'survey'
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from storyeval.collab.config import LikertSpec, SloganConfig, resolve_path
from storyeval.collab.session import (
    SessionState,
    SuggestionRequest,
    SuggestionResult,
    TurnError,
    clean_text,
    derive_seed,
    duration,
    likert_answers,
    open_answers,
)

EXPORT_VERSION = 1
PHASES = ("write", "generating", "survey", "final", "done")


def _keywords(value: str | Sequence[str]) -> list[str]:
    """Keywords from a comma- or space-separated field (or a list)."""
    words = value if not isinstance(value, str) else re.split(r"[,;\s]+", value)
    return [w.strip() for w in words if w.strip()]


class SloganSession(SessionState):
    """One writer's slogan session over ``config`` (see the module docstring)."""

    config: SloganConfig

    # ------------------------------------------------------------------ construction

    @classmethod
    def start(
        cls,
        config: SloganConfig,
        *,
        participant: str,
        now: float,
        prompt_index: int | None = None,
    ) -> SloganSession:
        """A new session. ``prompt_index`` is the writer's arrival number (the server passes
        the count of earlier sessions): it assigns the condition in turn (balanced) and
        rotates the order of the prompts (each prompt first equally often)."""
        index = (
            prompt_index
            if prompt_index is not None
            else derive_seed(config.generation.seed, participant, "slogan")
        )
        conditions = list(config.conditions)
        condition = conditions[index % len(conditions)]
        prompts = [p.model_dump(mode="json") for p in config.prompts]
        shift = (index // len(conditions)) % len(prompts)
        order = prompts[shift:] + prompts[:shift]
        data: dict[str, Any] = {
            "participant": participant,
            "kind": "slogan",
            "session": config.name,
            "version": config.version(),
            "condition": condition,
            "phase": "write",
            "task": 0,
            "tasks": [
                {"prompt": prompt, "pulls": [], "final": None, "submitted_at": None, "survey": None}
                for prompt in order
            ],
            "started_at": now,
            "finished_at": None,
            "phase_since": now,
            "final_survey": None,
        }
        return cls(config, data)

    # ------------------------------------------------------------------ reading

    @property
    def kind(self) -> str:
        """``slogan``."""
        return "slogan"

    @property
    def condition(self) -> str:
        """``solo`` or ``mil``."""
        return str(self.data["condition"])

    @property
    def tasks(self) -> list[dict[str, Any]]:
        """One entry per prompt, in the writer's order."""
        tasks: list[dict[str, Any]] = self.data["tasks"]
        return tasks

    @property
    def task_number(self) -> int:
        """The slogan being written (1-based)."""
        return min(int(self.data["task"]), len(self.tasks) - 1) + 1

    def current_task(self) -> dict[str, Any]:
        """The task in progress (the last one once all are done)."""
        return self.tasks[self.task_number - 1]

    def last_pull(self) -> dict[str, Any] | None:
        """The latest pull of the current task, if any."""
        pulls = self.current_task()["pulls"]
        return pulls[-1] if pulls else None

    def current_suggestions(self) -> list[str]:
        """The suggestions of the latest pull (shown beside the draft)."""
        pull = self.last_pull()
        return list(pull["suggestions"]) if pull is not None and pull["suggestions"] else []

    def draft(self) -> tuple[str, str]:
        """The latest keywords (comma-separated) and draft, to fill the form again."""
        pull = self.last_pull()
        if pull is None:
            return "", ""
        return ", ".join(pull["keywords"]), str(pull["draft"])

    def pending_requests(self) -> list[SuggestionRequest]:
        """The pull still waiting for suggestions (e.g. after a restart)."""
        pull = self.last_pull()
        if self.phase != "generating" or pull is None or pull["finished_at"] is not None:
            return []
        return [self._request(pull)]

    def _request(self, pull: dict[str, Any]) -> SuggestionRequest:
        context = json.dumps({"keywords": pull["keywords"], "draft": pull["draft"]})
        return SuggestionRequest(
            pull["request_id"], self.task_number, "skeletons", context, pull["seed"]
        )

    def step_token(self) -> str:
        """Identifies the step a page was rendered for (a stale form is not applied twice)."""
        pulls = len(self.current_task()["pulls"])
        return f"{self.task_number}-{pulls}-{self.phase}"

    def note_served(self, now: float) -> None:
        """Note when the current page was first delivered (suggestions: when seen)."""
        if self.data.get("served_at") is None:
            self.data["served_at"] = now
            pull = self.last_pull()
            seen = pull is not None and pull.get("seen_at") is None and pull["finished_at"]
            if self.phase == "write" and pull is not None and seen:
                pull["seen_at"] = now

    # ------------------------------------------------------------------ actions

    def pull(
        self, keywords: str | Sequence[str], draft: str, *, now: float
    ) -> list[SuggestionRequest]:
        """Ask for suggestions for these keywords and draft (``mil`` condition only).

        Raises
        ------
        TurnError
            For a solo writer, without keywords or draft, over the length limits, or after
            ``max_pulls`` pulls on this slogan.
        """
        self._require("write")
        if self.condition != "mil":
            raise TurnError("Suggestions are not part of this task.")
        words = _keywords(keywords)
        cleaned = clean_text(draft)
        if not words and not cleaned:
            raise TurnError("Give a few keywords or a first version of your slogan.")
        if len(", ".join(words)) > self.config.max_keywords_chars:
            raise TurnError(f"Keywords: at most {self.config.max_keywords_chars} characters.")
        if len(cleaned) > self.config.max_chars:
            raise TurnError(f"A slogan has at most {self.config.max_chars} characters.")
        task = self.current_task()
        if len(task["pulls"]) >= self.config.max_pulls:
            raise TurnError("You have asked for as many suggestions as this task allows.")
        number = len(task["pulls"]) + 1
        pull = {
            "index": number,
            "keywords": words,
            "draft": cleaned,
            "request_id": f"t{self.task_number}-pull{number}",
            "seed": derive_seed(
                self.config.generation.seed, self.participant, self.task_number, number
            ),
            "requested_at": now,
            "started_at": None,
            "finished_at": None,
            "seen_at": None,
            "suggestions": [],
            "skeletons": [],
            "targets": [],
            "signature": None,
            "error": None,
        }
        task["pulls"].append(pull)
        self._set_phase("generating", now)
        return [self._request(pull)]

    def add_suggestion(self, request_id: str, result: SuggestionResult, *, now: float) -> bool:
        """Record a pull's suggestions (an error leaves none; the writer may pull again);
        returns False and changes nothing for a request that is not open."""
        pull = self.last_pull()
        if self.phase != "generating" or pull is None or pull["request_id"] != request_id:
            return False
        if pull["finished_at"] is not None:
            return False
        extra = dict(result.extra)
        pull.update(
            started_at=result.started_at,
            finished_at=result.finished_at,
            suggestions=list(extra.get("suggestions", [])) if result.text is not None else [],
            skeletons=list(extra.get("skeletons", [])),
            targets=list(extra.get("targets", [])),
            signature=result.signature,
            error=result.error,
        )
        self._set_phase("write", now)
        return True

    def submit_slogan(
        self,
        text: str,
        *,
        now: float,
        keywords: str | Sequence[str] = "",
        integrity: Mapping[str, Any] | None = None,
    ) -> None:
        """Submit the final slogan of the current prompt (with how its last draft was written,
        when the page measured it).

        Raises
        ------
        TurnError
            If it is empty or too long, or a pull is still being served.
        """
        self._require("write")
        cleaned = clean_text(text)
        if not cleaned:
            raise TurnError("Please write your slogan before submitting it.")
        if len(cleaned) > self.config.max_chars:
            raise TurnError(f"A slogan has at most {self.config.max_chars} characters.")
        task = self.current_task()
        task["final"] = cleaned
        task["final_keywords"] = _keywords(keywords)
        task["submitted_at"] = now
        if integrity:
            task["integrity"] = dict(integrity)
        self._set_phase("survey", now)

    def submit_survey(self, likert: Mapping[str, int], *, now: float) -> None:
        """The writing survey of the submitted slogan; then the next prompt or the final
        survey."""
        self._require("survey")
        task = self.current_task()
        task["survey"] = {
            "likert": likert_answers(self.config.likert, likert),
            "submitted_at": now,
        }
        if self.task_number < len(self.tasks):
            self.data["task"] = self.task_number  # the next one, 0-based
            self._set_phase("write", now)
        else:
            self._set_phase("final", now)

    def final_statements(self) -> LikertSpec:
        """The final survey's seven-point questions for this writer's condition."""
        statements = list(self.config.final_likert.statements)
        if self.condition == "mil":
            statements += list(self.config.suggestion_likert.statements)
        return self.config.final_likert.model_copy(update={"statements": statements})

    def final_questions(self) -> list[Any]:
        """The final survey's open questions for this writer's condition."""
        extra = self.config.solo_questions if self.condition == "solo" else []
        return [*self.config.questions, *extra]

    def submit_final(
        self,
        likert: Mapping[str, int],
        answers: Mapping[str, str],
        *,
        use_again: str | None,
        now: float,
        experience: str | None = None,
        integrity: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        """The final survey (with how each open answer was written, when measured); the
        session is then done.

        Raises
        ------
        TurnError
            Naming the first missing answer.
        """
        from storyeval.collab.config import EXPERIENCE_CHOICES, USE_AGAIN_CHOICES

        self._require("final")
        values = likert_answers(self.final_statements(), likert)
        if self.condition == "mil" and use_again not in USE_AGAIN_CHOICES:
            raise TurnError("Please answer: would you use the system again?")
        levels = [name for name, _ in EXPERIENCE_CHOICES]
        if self.config.ask_experience and experience not in levels:
            raise TurnError("Please answer: how much creative writing experience do you have?")
        self.data["final_survey"] = {
            "likert": values,
            "use_again": use_again if self.condition == "mil" else None,
            "experience": experience if self.config.ask_experience else None,
            "questions": open_answers(self.final_questions(), answers),
            "submitted_at": now,
        }
        if integrity:
            self.data["final_survey"]["integrity"] = {k: dict(v) for k, v in integrity.items()}
        self.data["finished_at"] = now
        self._set_phase("done", now)

    # ------------------------------------------------------------------ export

    def export(self, *, session_id: str | None = None) -> dict[str, Any]:
        """The session as one JSON record of the sessions file."""
        tasks = []
        for number, task in enumerate(self.tasks, start=1):
            pulls = [
                {
                    **{k: p[k] for k in ("index", "keywords", "draft", "suggestions", "skeletons")},
                    **{k: p[k] for k in ("targets", "signature", "error", "requested_at")},
                    "wait_s": duration(p["requested_at"], p["finished_at"]),
                    "generation_s": duration(p["started_at"], p["finished_at"]),
                    "seen_at": p.get("seen_at"),
                }
                for p in task["pulls"]
            ]
            tasks.append(
                {
                    "task": number,
                    "prompt": task["prompt"],
                    "pulls": pulls,
                    "final": task["final"],
                    "final_keywords": task.get("final_keywords", []),
                    "submitted_at": task["submitted_at"],
                    "survey": task["survey"],
                    "survival": suggestion_survival(task["final"], pulls)
                    if task["final"]
                    else None,
                    **({"integrity": task["integrity"]} if task.get("integrity") else {}),
                }
            )
        return {
            "format": "storyeval-slogan-session",
            "format_version": EXPORT_VERSION,
            "session_id": session_id or f"{self.config.name}/{self.participant}",
            "kind": "slogan",
            "session": self.config.name,
            "version": self.data["version"],
            "participant": self.participant,
            "condition": self.condition,
            "status": "complete" if self.phase == "done" else "incomplete",
            "phase": self.phase,
            "started_at": self.data["started_at"],
            "finished_at": self.data.get("finished_at"),
            "tasks": tasks,
            "final_survey": self.data.get("final_survey"),
        }


_WORD = re.compile(r"[a-z0-9']+")


def suggestion_survival(final: str, pulls: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """How much of a suggestion survived into the final slogan: for the suggestion sharing the
    most words with it, the share of the final slogan's words that came from that suggestion
    and not from the writer's own keywords and drafts (``new_words``), and the share of the
    suggestion's words kept (``kept``).

    >>> pulls = [{"keywords": ["coffee"], "draft": "Good coffee.",
    ...           "suggestions": ["Bright mornings start with coffee."]}]
    >>> suggestion_survival("Bright mornings, good coffee.", pulls)["new_words"]
    0.5
    """
    final_words = _WORD.findall(final.lower())
    own: set[str] = set()
    for pull in pulls:
        own.update(_WORD.findall(" ".join(pull.get("keywords", [])).lower()))
        own.update(_WORD.findall(str(pull.get("draft", "")).lower()))
    best: tuple[float, str | None, float] = (0.0, None, 0.0)
    for pull in pulls:
        for suggestion in pull.get("suggestions", []) or []:
            words = set(_WORD.findall(suggestion.lower()))
            if not words or not final_words:
                continue
            new = sum(1 for w in final_words if w in words and w not in own) / len(final_words)
            kept = len(words & set(final_words)) / len(words)
            if (new, kept) > (best[0], best[2]):
                best = (new, suggestion, kept)
    return {"new_words": round(best[0], 4), "kept": round(best[2], 4), "suggestion": best[1]}


# --------------------------------------------------------------------------- the suggester


class SloganEngine:
    """Serves pulls: ``engine(request) -> SuggestionResult`` with the suggestions in
    ``extra`` (see :func:`storyeval.generate.slogans.suggest`). The skeleton bank, the LM and
    spaCy are loaded once (:meth:`warm_up`) and shared by the worker threads."""

    def __init__(self, config: SloganConfig, *, config_path: str | Path | None = None) -> None:
        self.config = config
        self.config_path = config_path
        self._lock = threading.Lock()
        self._loaded: tuple[Any, Any, Any] | None = None

    def _models(self) -> tuple[Any, Any, Any]:
        with self._lock:
            if self._loaded is None:
                from storyeval.generate.slogans import SkeletonBank
                from storyeval.models import load_causal_lm, load_spacy

                spec = self.config.suggester
                skeletons = None
                if spec.skeletons is not None:
                    base = self.config_path if self.config_path is not None else Path.cwd() / "x"
                    skeletons = resolve_path(base, spec.skeletons)
                nlp = load_spacy()
                self._loaded = (
                    SkeletonBank.load(skeletons, nlp=nlp),
                    load_causal_lm(spec.model),
                    nlp,
                )
            return self._loaded

    def warm_up(self) -> dict[str, str]:
        """Load the models now; returns their identities."""
        bank, lm, _ = self._models()
        return {"skeletons": bank.identity, "lm": lm.identity}

    def __call__(self, request: SuggestionRequest) -> SuggestionResult:
        from storyeval.base.errors import StoryevalError
        from storyeval.generate.slogans import slogan_signature, suggest

        started = time.time()
        context = json.loads(request.context)
        try:
            bank, lm, nlp = self._models()
            settings = self.config.suggester.settings()
            found, targets = suggest(
                context["keywords"],
                context["draft"],
                bank=bank,
                lm=lm,
                nlp=nlp,
                seed=request.seed,
                settings=settings,
            )
            signature = str(slogan_signature(bank, lm, nlp, request.seed, settings))
        except StoryevalError as exc:  # no content word: no suggestion, said to the writer
            return SuggestionResult(
                text="",
                signature="",
                seed=request.seed,
                started_at=started,
                finished_at=time.time(),
                error=str(exc),
                extra={"suggestions": []},
            )
        return SuggestionResult(
            text="\n".join(s.text for s in found),
            signature=signature,
            seed=request.seed,
            started_at=started,
            finished_at=time.time(),
            extra={
                "suggestions": [s.text for s in found],
                "skeletons": [s.skeleton for s in found],
                "targets": targets,
            },
        )
