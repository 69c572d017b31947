"""The state of one writer's collaborative-writing session, independent of any server.

A :class:`WritingSession` is a small state machine over plain JSON data, so the study server
stores it in one database row and every step is one transaction. Its phases:

``write``
    The writer writes a turn alone (CYOA: 20-260 characters; MIL: one sentence).
``generating``
    Suggestions for the next turn are being generated (off the request path); the writer
    waits.
``choose`` (CYOA)
    Both suggestions are ready, shown in a random order recorded per round; the writer picks
    one.
``edit``
    The chosen (CYOA) or pushed (MIL) suggestion is in the edit box. A CYOA writer may switch
    to the other suggestion; every choice and switch is logged with its time. Submitting adds
    the edited text to the story and locks the turn.
``failed``
    A generator could not produce a suggestion; the writer may ask again.
``survey``
    The story is finished: Likert statements and open questions.
``done``

Every turn keeps its timestamps; every suggestion keeps its generator, text, position,
signature (model identity and every decoding setting) and seed.

Examples
--------
>>> from storyeval.collab.config import parse_writing_config
>>> config = parse_writing_config({"kind": "cyoa", "name": "demo", "title": "Demo",
...     "rounds": 1, "generators": [{"name": "a"}, {"name": "b"}]})
>>> s = WritingSession.start(config, participant="p00001", now=0.0)
>>> requests = s.submit_text("Gerald woke up early and ran to the window.", now=5.0)
>>> s.phase, sorted(r.generator for r in requests)
('generating', ['a', 'b'])
>>> for r in requests:
...     _ = s.add_suggestion(r.request_id, SuggestionResult(text=f"Text from {r.generator}.",
...                      signature="sig", seed=r.seed, started_at=5.0, finished_at=7.0), now=7.0)
>>> s.phase
'choose'
>>> s.choose("a", now=9.0); s.choose("b", now=12.0)  # chose a, then switched to b
>>> _ = s.submit_text("Text from b, edited by the writer.", now=20.0)
>>> s.phase, s.current_turn()["chosen"] if s.current_turn() else None
('survey', None)
>>> s.story()
'Gerald woke up early and ran to the window. Text from b, edited by the writer.'
"""

from __future__ import annotations

import copy
import hashlib
import random
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Self

from storyeval.base.errors import StoryevalError
from storyeval.collab.config import (
    SUGGESTION_QUESTIONS,
    USE_AGAIN_CHOICES,
    CyoaConfig,
    MilConfig,
)

EXPORT_VERSION = 1
PHASES = ("write", "generating", "choose", "edit", "failed", "survey", "done")


class TurnError(StoryevalError, ValueError):
    """An action the session cannot accept now (a turn too short, a locked turn, a choice of
    an unknown generator...). The message is written for the writer."""


def derive_seed(*parts: object) -> int:
    """A stable 31-bit seed from any values (the same values always give the same seed).

    >>> derive_seed("study", 1, "nucleus") == derive_seed("study", 1, "nucleus")
    True
    """
    digest = hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


@dataclass(frozen=True)
class SuggestionRequest:
    """One continuation to generate: which generator, for which round, from which context."""

    request_id: str
    round: int
    generator: str
    context: str
    seed: int


@dataclass(frozen=True)
class SuggestionResult:
    """What the generation worker produced for a request (``text`` None with an ``error``)."""

    text: str | None
    signature: str
    seed: int
    started_at: float
    finished_at: float
    attempts: int = 1
    dropped: Mapping[str, int] = field(default_factory=dict)
    error: str | None = None
    complete: bool = True
    #: what a session kind needs beyond one text (slogans: the suggestions, skeletons, targets)
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The result as a JSON-ready mapping."""
        data = asdict(self)
        data["dropped"] = dict(self.dropped)
        data["extra"] = dict(self.extra)
        return data


def clean_text(text: str) -> str:
    """Whitespace collapsed to single spaces, ends stripped."""
    return " ".join(str(text).split())


def likert_answers(spec: Any, likert: Mapping[str, int]) -> list[dict[str, Any]]:
    """Every statement of ``spec`` (a LikertSpec) with its answer (1..scale) and label.

    Raises
    ------
    TurnError
        Naming the first statement without a valid answer.
    """
    values = []
    for statement in spec.statements:
        value = likert.get(statement.name)
        if value is None or not isinstance(value, int) or not 1 <= value <= spec.scale:
            raise TurnError(f"Please answer: {statement.statement}")
        values.append(
            {
                "name": statement.name,
                "statement": statement.statement,
                "value": value,
                "scale": spec.scale,
                "label": spec.labels[value - 1],
            }
        )
    return values


def open_answers(questions: Sequence[Any], answers: Mapping[str, str]) -> list[dict[str, str]]:
    """Each open question with its answer (whitespace collapsed, at most 5,000 characters).

    Raises
    ------
    TurnError
        Naming the first required question left empty.
    """
    found = []
    for question in questions:
        answer = clean_text(str(answers.get(question.name, "")))[:5000]
        if question.required and not answer:
            raise TurnError(f"Please answer: {question.question}")
        found.append({"name": question.name, "question": question.question, "answer": answer})
    return found


class SessionState:
    """What every writing-session kind keeps: its configuration and one JSON-ready mapping
    (stored in one database row), the phase the writer is at, and the checks and bookkeeping
    of moving between phases. Subclasses add the kind's steps."""

    def __init__(self, config: Any, data: dict[str, Any]) -> None:
        self.config = config
        self.data = data

    @classmethod
    def from_dict(cls, config: Any, data: Mapping[str, Any]) -> Self:
        """A session from :meth:`to_dict`'s mapping (as stored by the server)."""
        return cls(config, copy.deepcopy(dict(data)))

    def to_dict(self) -> dict[str, Any]:
        """The session as a JSON-ready mapping."""
        return copy.deepcopy(self.data)

    @property
    def phase(self) -> str:
        """Where the writer is."""
        return str(self.data["phase"])

    @property
    def participant(self) -> str:
        """The participant id of the writer."""
        return str(self.data["participant"])

    def needs_serving_note(self) -> bool:
        """Whether the page of the current phase has not been served yet."""
        return self.data.get("served_at") is None

    def _require(self, *phases: str) -> None:
        if self.phase not in phases:
            raise TurnError(
                f"This step is not possible now (the session is at '{self.phase}', expected "
                f"{' or '.join(repr(p) for p in phases)})."
            )

    def _set_phase(self, phase: str, now: float) -> None:
        self.data["phase"] = phase
        self.data["phase_since"] = now
        self.data["served_at"] = None


class WritingSession(SessionState):
    """One writer's session over ``config`` (see the module docstring).

    Build a new one with :meth:`start`, restore a stored one with :meth:`from_dict`, store it
    with :meth:`to_dict`, and export it with :meth:`export`.
    """

    config: CyoaConfig | MilConfig

    # ------------------------------------------------------------------ construction

    @classmethod
    def start(
        cls,
        config: CyoaConfig | MilConfig,
        *,
        participant: str,
        now: float,
        prompt_index: int | None = None,
    ) -> WritingSession:
        """A new session for ``participant`` (a stable id such as ``p00001``).

        The prompt (if the file lists any) is ``prompt_index`` modulo the number of prompts,
        by default chosen from the participant id and the configured seed.
        """
        prompt = None
        index = (
            prompt_index
            if prompt_index is not None
            else derive_seed(config.generation.seed, participant, "prompt")
        )
        conditions = list(getattr(config, "conditions", ["mil"]))
        if config.prompts:
            # with two conditions the arrival number assigns the condition in turn, so the
            # prompt follows the number of earlier writers *in that condition*
            prompt_number = index // len(conditions)
            prompt = config.prompts[prompt_number % len(config.prompts)].model_dump(mode="json")
        data: dict[str, Any] = {
            "participant": participant,
            "kind": config.kind,
            "session": config.name,
            "version": config.version(),
            "phase": "write",
            "prompt": prompt,
            "started_at": now,
            "finished_at": None,
            "phase_since": now,
            "turns": [],
            "survey": None,
        }
        if isinstance(config, MilConfig):
            data["condition"] = conditions[index % len(conditions)]
        return cls(config, data)

    # ------------------------------------------------------------------ reading

    @property
    def kind(self) -> str:
        """``cyoa`` or ``mil``."""
        return self.config.kind

    @property
    def condition(self) -> str | None:
        """``solo`` or ``mil`` for a machine-in-the-loop story; None for CYOA."""
        if self.kind != "mil":
            return None
        return str(self.data.get("condition") or "mil")

    def survey_statements(self) -> list[Any]:
        """The Likert statements this writer answers (solo writers are not asked about
        suggestions)."""
        statements = list(self.config.likert.statements)
        if self.condition == "solo":
            statements = [s for s in statements if s.name not in SUGGESTION_QUESTIONS]
        return statements

    def survey_questions(self) -> list[Any]:
        """The open questions this writer answers (solo writers also say what tools could
        have helped)."""
        questions = list(self.config.questions)
        if self.condition == "solo" and isinstance(self.config, MilConfig):
            questions += list(self.config.solo_questions)
        return questions

    @property
    def asks_use_again(self) -> bool:
        """Whether the survey asks "Would you use this system again?" (MIL writers)."""
        return self.condition == "mil"

    @property
    def turns(self) -> list[dict[str, Any]]:
        """Every turn so far, open ones included."""
        turns: list[dict[str, Any]] = self.data["turns"]
        return turns

    def submitted_turns(self) -> list[dict[str, Any]]:
        """The turns the writer has submitted."""
        return [t for t in self.turns if t.get("submitted_at") is not None]

    def current_turn(self) -> dict[str, Any] | None:
        """The open suggestion turn (not yet submitted), if any."""
        if self.turns and self.turns[-1].get("submitted_at") is None:
            return self.turns[-1]
        return None

    def story(self) -> str:
        """The story so far: every submitted turn, joined by spaces."""
        return " ".join(t["text"] for t in self.submitted_turns())

    def context(self) -> str:
        """What the generators continue: the text prompt (when ``in_context``) and the whole
        story so far."""
        prompt = self.data.get("prompt") or {}
        parts = []
        if prompt.get("text") and prompt.get("in_context", True):
            parts.append(clean_text(prompt["text"]))
        story = self.story()
        if story:
            parts.append(story)
        return " ".join(parts)

    @property
    def round(self) -> int:
        """The round in progress (1-based): writer turns submitted so far, or the next one."""
        writer_turns = sum(1 for t in self.submitted_turns() if t["author"] == "writer")
        if self.phase == "write":
            return writer_turns + 1
        return max(writer_turns, 1)

    @property
    def total_rounds(self) -> int:
        """The number of rounds of this session."""
        return int(self.config.rounds)

    def sentences_written(self) -> int:
        """Turns in the story (MIL counts sentences this way)."""
        return len(self.submitted_turns())

    def ordered_suggestions(self) -> list[dict[str, Any]]:
        """The open turn's suggestions in the order shown to the writer."""
        turn = self.current_turn()
        if turn is None:
            return []
        return sorted(turn["suggestions"], key=lambda s: s["position"])

    def pending_requests(self) -> list[SuggestionRequest]:
        """Requests of the open turn still waiting for a result (e.g. after a restart)."""
        turn = self.current_turn()
        if turn is None or self.phase != "generating":
            return []
        return [
            SuggestionRequest(
                s["request_id"], turn["round"], s["generator"], turn["context"], s["seed"]
            )
            for s in turn["suggestions"]
            if s.get("finished_at") is None
        ]

    def limits(self) -> tuple[int, int]:
        """The (min, max) characters of a turn."""
        return int(self.config.min_chars), int(self.config.max_chars)

    # ------------------------------------------------------------------ actions

    def note_served(self, now: float) -> None:
        """Note when the page of the current phase was first delivered to the writer: the
        writer's time on a turn runs from then to the submission."""
        if self.data.get("served_at") is None:
            self.data["served_at"] = now
            turn = self.current_turn()
            if (
                turn is not None
                and self.phase in ("choose", "edit")
                and turn.get("shown_at") is None
            ):
                turn["shown_at"] = now

    def step_token(self) -> str:
        """Identifies the step a page was rendered for; a form posted with an older token (a
        double submission, a stale tab) is not applied twice."""
        return f"{len(self.turns)}-{self.phase}"

    def _check_length(self, text: str) -> str:
        cleaned = clean_text(text)
        low, high = self.limits()
        if not low <= len(cleaned) <= high:
            raise TurnError(
                f"A turn must be between {low} and {high} characters; this one has {len(cleaned)}."
            )
        return cleaned

    def submit_text(
        self, text: str, *, now: float, integrity: Mapping[str, Any] | None = None
    ) -> list[SuggestionRequest]:
        """Submit the writer's own turn (phase ``write``) or the edited suggestion (phase
        ``edit``), with how the text was produced when the page measured it (kept as the
        turn's ``integrity``). Returns the suggestion requests to generate next (empty when
        none).

        Raises
        ------
        TurnError
            If the text is too short or too long, or no turn is open for writing.
        """
        self._require("write", "edit")
        cleaned = self._check_length(text)
        if self.phase == "write":
            self.turns.append(
                {
                    "index": len(self.turns) + 1,
                    "round": self.round,
                    "author": "writer",
                    "text": cleaned,
                    "shown_at": self.data.get("served_at") or self.data["phase_since"],
                    "submitted_at": now,
                    **({"integrity": dict(integrity)} if integrity else {}),
                }
            )
            if self._story_complete():
                self._set_phase("survey", now)
                return []
            if self.condition == "solo":
                self._set_phase("write", now)
                return []
            return self._open_suggestion_turn(now)
        turn = self.current_turn()
        assert turn is not None
        turn["text"] = cleaned
        turn["submitted_at"] = now
        if integrity:
            turn["integrity"] = dict(integrity)
        turn["events"].append({"t": now, "action": "submit", "generator": turn["chosen"]})
        if self._story_complete():
            self._set_phase("survey", now)
        else:
            self._set_phase("write", now)
        return []

    def _story_complete(self) -> bool:
        if isinstance(self.config, MilConfig):
            return self.sentences_written() >= self.config.sentences
        suggestion_turns = sum(1 for t in self.submitted_turns() if t["author"] == "suggestion")
        return suggestion_turns >= self.config.rounds

    def _open_suggestion_turn(self, now: float, *, attempt: int = 1) -> list[SuggestionRequest]:
        round_number = sum(1 for t in self.submitted_turns() if t["author"] == "writer")
        names = list(self.config.generator_names)
        seed = self.config.generation.seed
        order = list(names)
        if len(order) > 1:
            random.Random(derive_seed(seed, self.participant, round_number, "order")).shuffle(order)
        context = self.context()
        suggestions = []
        for name in names:
            suggestions.append(
                {
                    "request_id": f"r{round_number}-{name}-a{attempt}",
                    "generator": name,
                    "position": order.index(name) + 1,
                    "seed": derive_seed(seed, self.participant, round_number, name, attempt),
                    "requested_at": now,
                    "started_at": None,
                    "finished_at": None,
                    "text": None,
                    "signature": None,
                    "attempts": None,
                    "dropped": None,
                    "error": None,
                }
            )
        self.turns.append(
            {
                "index": len(self.turns) + 1,
                "round": round_number,
                "author": "suggestion",
                "context": context,
                "suggestions": suggestions,
                "attempt": attempt,
                "events": [],
                "chosen": None,
                "text": None,
                "requested_at": now,
                "ready_at": None,
                "shown_at": None,
                "submitted_at": None,
            }
        )
        self._set_phase("generating", now)
        return self.pending_requests()

    def add_suggestion(self, request_id: str, result: SuggestionResult, *, now: float) -> bool:
        """Record a generation result; returns False (and changes nothing) when the request
        is not open any more (a stale result after a retry or a restart)."""
        turn = self.current_turn()
        if turn is None or self.phase != "generating":
            return False
        match = next((s for s in turn["suggestions"] if s["request_id"] == request_id), None)
        if match is None or match["finished_at"] is not None:
            return False
        match.update(
            text=result.text,
            signature=result.signature,
            seed=result.seed,
            started_at=result.started_at,
            finished_at=result.finished_at,
            attempts=result.attempts,
            dropped=dict(result.dropped),
            error=result.error,
            complete=result.complete,
        )
        if all(s["finished_at"] is not None for s in turn["suggestions"]):
            turn["ready_at"] = now
            if any(s["text"] is None for s in turn["suggestions"]):
                self._set_phase("failed", now)
            elif isinstance(self.config, MilConfig):
                only = turn["suggestions"][0]
                turn["chosen"] = only["generator"]
                turn["events"].append({"t": now, "action": "push", "generator": only["generator"]})
                self._set_phase("edit", now)
            else:
                self._set_phase("choose", now)
        return True

    def retry(self, *, now: float) -> list[SuggestionRequest]:
        """After a failure, discard the failed turn's suggestions and generate again."""
        self._require("failed")
        turn = self.current_turn()
        assert turn is not None
        failed = self.turns.pop()
        self.data.setdefault("failed_generations", []).append(failed)
        return self._open_suggestion_turn(now, attempt=int(turn["attempt"]) + 1)

    def choose(self, generator: str, *, now: float, draft: str | None = None) -> None:
        """Choose (phase ``choose``) or switch to (phase ``edit``) a generator's suggestion.

        ``draft`` is what the edit box held when the writer switched (kept in the log).

        Raises
        ------
        TurnError
            Outside those phases, for an unknown generator, or for a MIL session.
        """
        if isinstance(self.config, MilConfig):
            raise TurnError("A machine-in-the-loop turn has a single suggestion.")
        self._require("choose", "edit")
        turn = self.current_turn()
        assert turn is not None
        if generator not in {s["generator"] for s in turn["suggestions"]}:
            raise TurnError("There is no such suggestion.")
        if self.phase == "choose":
            action = "choose"
        elif generator == turn["chosen"]:
            return  # re-selecting the suggestion being edited is not a switch
        else:
            action = "switch"
        event: dict[str, Any] = {"t": now, "action": action, "generator": generator}
        if action == "switch" and draft is not None:
            event["draft"] = clean_text(draft)[:5000]
        turn["events"].append(event)
        turn["chosen"] = generator
        if self.phase == "choose":
            self._set_phase("edit", now)

    def edit_text(self) -> str:
        """The text for the edit box: the chosen (or pushed) suggestion."""
        turn = self.current_turn()
        if turn is None or turn["chosen"] is None:
            return ""
        chosen = next(s for s in turn["suggestions"] if s["generator"] == turn["chosen"])
        return str(chosen["text"] or "")

    def submit_survey(
        self,
        likert: Mapping[str, int],
        answers: Mapping[str, str],
        *,
        now: float,
        integrity: Mapping[str, Mapping[str, Any]] | None = None,
        use_again: str | None = None,
    ) -> None:
        """Record the Likert answers (every statement, 1..scale), the open answers (with
        how each was written, when the page measured it) and, for a machine-in-the-loop
        writer, whether they would use the system again (one of ``USE_AGAIN_CHOICES``).

        Raises
        ------
        TurnError
            Naming the first missing or invalid answer.
        """
        self._require("survey")
        spec = self.config.likert.model_copy(update={"statements": self.survey_statements()})
        values = likert_answers(spec, likert)
        questions = open_answers(self.survey_questions(), answers)
        if self.asks_use_again and use_again not in USE_AGAIN_CHOICES:
            raise TurnError(f"use_again: choose one of {list(USE_AGAIN_CHOICES)}")
        self.data["survey"] = {"likert": values, "questions": questions, "submitted_at": now}
        if self.asks_use_again:
            self.data["survey"]["use_again"] = use_again
        if integrity:
            self.data["survey"]["integrity"] = {k: dict(v) for k, v in integrity.items()}
        self.data["finished_at"] = now
        self._set_phase("done", now)

    # ------------------------------------------------------------------ export

    def export(self, *, session_id: str | None = None) -> dict[str, Any]:
        """The session as one JSON record of the sessions file (see
        :mod:`storyeval.collab.records`)."""
        turns = [
            _writer_turn(turn) if turn["author"] == "writer" else _suggestion_turn(turn)
            for turn in self.turns
        ]
        generators = {g.name: g.describe() for g in self.config.generators}
        return {
            "format": "storyeval-writing-session",
            "format_version": EXPORT_VERSION,
            "session_id": session_id or f"{self.config.name}/{self.participant}",
            "kind": self.config.kind,
            "session": self.config.name,
            "version": self.data["version"],
            **({"condition": self.condition} if self.condition is not None else {}),
            "participant": self.participant,
            "status": "complete" if self.phase == "done" else "incomplete",
            "phase": self.phase,
            "prompt": self.data.get("prompt"),
            "generators": generators,
            "started_at": self.data["started_at"],
            "finished_at": self.data.get("finished_at"),
            "turns": turns,
            "story": self.story(),
            "survey": self.data.get("survey"),
            "failed_generations": len(self.data.get("failed_generations", [])),
        }


_WRITER_FIELDS = ("index", "round", "author", "text", "shown_at", "submitted_at")


def _writer_turn(turn: dict[str, Any]) -> dict[str, Any]:
    """A writer's turn as exported: what they wrote, how long it took and (when measured)
    how it was produced."""
    return {
        **{key: turn[key] for key in _WRITER_FIELDS},
        "time_s": duration(turn["shown_at"], turn["submitted_at"]),
        **({"integrity": turn["integrity"]} if turn.get("integrity") else {}),
    }


def _suggestion_turn(turn: dict[str, Any]) -> dict[str, Any]:
    """A suggestion turn as exported: the suggestions with their timings, the writer's
    choices and edits."""
    suggestions = [
        {
            "generator": s["generator"],
            "position": s["position"],
            "text": s["text"],
            "signature": s["signature"],
            "seed": s["seed"],
            "generation_s": duration(s["started_at"], s["finished_at"]),
            "wait_s": duration(s["requested_at"], s["finished_at"]),
            "attempts": s["attempts"],
            "dropped": s["dropped"],
            "complete": s.get("complete", True),
            "error": s["error"],
        }
        for s in sorted(turn["suggestions"], key=lambda s: s["position"])
    ]
    first_choice = next((e["t"] for e in turn["events"] if e["action"] in ("choose", "push")), None)
    return {
        "index": turn["index"],
        "round": turn["round"],
        "author": "suggestion",
        "context": turn["context"],
        "suggestions": suggestions,
        "events": turn["events"],
        "chosen": turn["chosen"],
        "switches": sum(1 for e in turn["events"] if e["action"] == "switch"),
        "text": turn["text"],
        "requested_at": turn["requested_at"],
        "ready_at": turn["ready_at"],
        "submitted_at": turn["submitted_at"],
        "shown_at": turn.get("shown_at"),
        "choice_s": duration(turn.get("shown_at") or turn.get("ready_at"), first_choice),
        "edit_s": duration(first_choice, turn["submitted_at"]),
        **({"integrity": turn["integrity"]} if turn.get("integrity") else {}),
    }


def duration(start: float | None, end: float | None) -> float | None:
    """Seconds from ``start`` to ``end`` (3 decimals, never negative), None if either is."""
    if start is None or end is None:
        return None
    return round(max(0.0, float(end) - float(start)), 3)
