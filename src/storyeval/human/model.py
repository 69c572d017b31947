"""What a study file says, and what a loaded study holds: the parts every protocol shares.

The protocol-specific sections (``pairwise:``, ``detection:``...) are declared by the
protocols themselves (:mod:`storyeval.human.protocols`); :func:`storyeval.human.study.load_study`
validates a file against the common model extended with them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, Field, field_validator, model_validator

from storyeval.base.yamlfile import Enrollment, OpenQuestion, StrictModel, YamlFileError, check_name

SCALE_SIZES: tuple[int, ...] = (5, 7)
ORDERS: tuple[str, ...] = ("balanced", "random", "fixed")
PLATFORMS: tuple[str, ...] = ("none", "prolific", "mturk")
M = TypeVar("M", bound=BaseModel)

#: What each crowd platform passes in the study URL (and storyeval stores with the participant).
PLATFORM_PARAMETERS: dict[str, tuple[str, ...]] = {
    "none": (),
    "prolific": ("PROLIFIC_PID", "STUDY_ID", "SESSION_ID"),
    "mturk": ("workerId", "assignmentId", "hitId", "turkSubmitTo"),
}
PLATFORM_ID_PARAMETER: dict[str, str] = {"prolific": "PROLIFIC_PID", "mturk": "workerId"}
PROLIFIC_COMPLETE_URL = "https://app.prolific.com/submissions/complete?cc={code}"


class StudyFileError(YamlFileError):
    """A study file is invalid; ``problems`` holds one ``FILE:LINE: key: reason`` per problem."""


Question = OpenQuestion
"""A free-text question asked at the end of the study (``name``, ``question``, ``required``)."""


class Criterion(StrictModel):
    """One question asked about each text (Likert and side-by-side), each pair (pairwise) or
    each tuple (best-worst)."""

    name: str
    question: str = Field(min_length=1)
    definition: str | None = None
    scale: int | None = None
    labels: dict[int, str] | list[str] | None = None
    required: bool = True

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_name(value, "a criterion name")

    @field_validator("scale")
    @classmethod
    def _scale(cls, value: int | None) -> int | None:
        if value is not None and value not in SCALE_SIZES:
            raise ValueError(f"must be 5 or 7 (points on the Likert scale); got {value}")
        return value

    def point_labels(self) -> dict[int, str]:
        """The labels by point (only the labelled points)."""
        if self.labels is None:
            return {}
        if isinstance(self.labels, list):
            return {i + 1: label for i, label in enumerate(self.labels)}
        return dict(sorted(self.labels.items()))

    @property
    def labelling(self) -> str:
        """``"endpoints"``, ``"all points"`` or ``"none"``."""
        labels = self.point_labels()
        if not labels:
            return "none"
        return "all points" if self.scale is not None and len(labels) == self.scale else "endpoints"


class Selection(StrictModel):
    """Which stories of the story file become items."""

    systems: list[str] | None = None
    ids: list[str] | None = None
    exclude_ids: list[str] = Field(default_factory=list)
    per_system: int | None = Field(default=None, ge=1)
    limit: int | None = Field(default=None, ge=1)
    seed: int = 0


class AdaptiveAssignment(StrictModel):
    """Route each participant's next items to where the study's estimate is least certain.

    Every item first gets ``min_raters`` judgments (coverage before refinement); after that the
    open item whose mean judgment has the widest interval goes first, and an item whose
    interval is narrower than ``target_width`` (in the criterion's units, a ``confidence``
    normal interval of the mean) gets no more raters: its remaining slots are *settled*.
    ``raters_per_item`` stays the most any item gets. The within-item variance is shrunk
    toward the study's pooled variance with the weight of ``prior_weight`` judgments, so two
    raters who happen to agree do not settle an item alone; the pooled variance is never below
    ``variance_floor`` times the variance of a uniform answer on the scale, so raters who agree
    on everything cannot narrow every interval. Only trusted raters' judgments settle items:
    those who have answered their attention checks and failed none, and whose answers vary
    (straight-lining settles nothing). ``criteria`` limits the criteria whose intervals count
    (default: all; an item's width is its widest criterion's).
    """

    min_raters: int = Field(default=2, ge=1)
    target_width: float = Field(gt=0)
    criteria: list[str] | None = None
    confidence: float = Field(default=0.95, gt=0, lt=1)
    prior_weight: float = Field(default=2.0, ge=0)
    variance_floor: float = Field(default=0.25, ge=0, le=1)


class Assignment(StrictModel):
    """How items are distributed over participants.

    ``reservation_minutes``: a participant inactive for longer loses the items reserved for
    them (they return to the pool). By default it follows the batch size:
    ``5 + items_per_participant`` minutes of inactivity.
    """

    items_per_participant: int = Field(default=10, ge=1)
    max_items_per_participant: int | None = Field(default=None, ge=1)
    raters_per_item: int = Field(default=3, ge=1)
    order: Literal["balanced", "random", "fixed"] = "balanced"
    seed: int = 0
    reservation_minutes: float | None = Field(default=None, gt=0)
    adaptive: AdaptiveAssignment | None = None

    @property
    def reservation_s(self) -> float:
        """Seconds of inactivity after which a participant's reserved items are released."""
        minutes = self.reservation_minutes
        if minutes is None:
            minutes = 5.0 + self.items_per_participant
        return 60.0 * minutes


class TextSpec(StrictModel):
    """A text given inline in the study file (training examples, attention checks)."""

    prompt: str = ""
    story: str = Field(min_length=1)
    system: str | None = None
    id: str | None = None


class TrainingExample(StrictModel):
    """A practice item shown before the study, then its answer and an explanation (Clark 2021,
    section 6.3: the Examples training)."""

    story: str | None = None
    stories: list[str] | None = None
    text: TextSpec | None = None
    texts: list[TextSpec] | None = None
    answer: int | str | None = None
    answers: dict[str, int] | None = None
    explanation: str = Field(min_length=1)


class AttentionCheck(StrictModel):
    """An instructed-response item; ``expect`` maps answer keys to the accepted values."""

    id: str
    story: str | None = None
    stories: list[str] | None = None
    text: TextSpec | None = None
    texts: list[TextSpec] | None = None
    expect: dict[str, list[int]]
    position: int | None = Field(default=None, ge=1)

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        return check_name(value, "an attention-check id")


class ComprehensionQuestion(StrictModel):
    """A multiple-choice question about the instructions, with its correct option (1-based)."""

    name: str
    question: str = Field(min_length=1)
    options: list[str] = Field(min_length=2)
    answer: int = Field(ge=1)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_name(value, "a comprehension question name")

    @model_validator(mode="after")
    def _answer(self) -> ComprehensionQuestion:
        if self.answer > len(self.options):
            raise ValueError(
                f"answer must be the number of one of the {len(self.options)} options; got {self.answer}"
            )
        return self


class Comprehension(StrictModel):
    """A comprehension check after consent, before the task (Prolific's policy: two attempts,
    then a paid screen-out). Participants who fail every attempt are screened out: they see
    the platform's screen-out code and their data is kept apart."""

    intro: str = "Before you start, please answer a few questions about the instructions."
    questions: list[ComprehensionQuestion] = Field(min_length=1)
    attempts: int = Field(default=2, ge=1, le=5)
    show_instructions: bool = True


class Platform(StrictModel):
    """The crowd platform participants come from, and the codes it needs.

    ``prolific``: participants arrive with ``PROLIFIC_PID``, ``STUDY_ID`` and ``SESSION_ID``
    in the URL (stored with the participant; ``PROLIFIC_PID`` is the external id); at the end
    they are sent to Prolific with the completion code, or the screen-out code when they fail
    the comprehension check. ``mturk``: ``workerId``, ``assignmentId`` and ``hitId``; the code
    is pasted into the HIT. ``return_code`` is shown to participants who decline consent.
    """

    name: Literal["none", "prolific", "mturk"] = "none"
    completion_code: str | None = Field(default=None, min_length=1, max_length=64)
    screen_out_code: str | None = Field(default=None, min_length=1, max_length=64)
    return_code: str | None = Field(default=None, min_length=1, max_length=64)
    redirect: bool = True

    @property
    def parameters(self) -> tuple[str, ...]:
        """The URL parameters the platform sends with each participant (stored with them)."""
        return PLATFORM_PARAMETERS[self.name]

    def redirect_url(self, code: str | None) -> str | None:
        """Where a participant goes with ``code`` (Prolific's completion URL), if anywhere."""
        if self.name == "prolific" and self.redirect and code:
            return PROLIFIC_COMPLETE_URL.format(code=code)
        return None


class Quality(StrictModel):
    """Quality-control settings: minimum time per item, the attention-check policy, and
    whether the pages record how free-text answers were produced (``record_typing``: counts
    of keys, pastes and focus losses and the composition time, never their content; see
    :mod:`storyeval.server.integrity`)."""

    min_median_time_s: float = Field(default=40.0, ge=0)
    exclude_failed_checks: bool = True
    record_typing: bool = True


class Completion(StrictModel):
    """What a participant sees at the end: a completion code and/or a redirect URL."""

    code: str | None = None
    url: str | None = None
    message: str = "Thank you! Your answers have been saved."


class Reporting(StrictModel):
    """Design-statement fields that cannot be derived from the study file or the data."""

    recruitment: str | None = None
    compensation: str | None = None
    platform: str | None = None
    evaluators: str | None = None
    demographics: str | None = None
    qualifications: str | None = None
    consent: str | None = None
    ethics: str | None = None
    notes: str | None = None


class StudyConfig(StrictModel):
    """The validated contents of a study file (the sections every protocol shares; the
    protocols add their own, see :func:`storyeval.human.study.config_model`)."""

    kind: Literal["study"] = "study"
    name: str
    title: str = Field(min_length=1)
    protocol: str
    stories: str
    select: Selection = Field(default_factory=Selection)
    instructions: str = ""
    content_warning: str | None = None
    show_prompt: bool = True
    criteria: list[Criterion] = Field(default_factory=list)
    assignment: Assignment = Field(default_factory=Assignment)
    training: list[TrainingExample] = Field(default_factory=list)
    training_intro: str = "Before starting the task, we will walk you through a quick training."
    attention_checks: list[AttentionCheck] = Field(default_factory=list)
    comprehension: Comprehension | None = None
    questions: list[Question] = Field(default_factory=list)
    quality: Quality = Field(default_factory=Quality)
    platform: Platform = Field(default_factory=Platform)
    completion: Completion = Field(default_factory=Completion)
    enrollment: Enrollment = Field(default_factory=Enrollment)
    reporting: Reporting = Field(default_factory=Reporting)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_name(value, "the study name")

    def section(self, name: str, model: type[M]) -> M | None:
        """The protocol section ``name`` (e.g. ``pairwise``) as ``model``, if given."""
        value = getattr(self, name, None)
        if value is None:
            return None
        if not isinstance(value, model):
            raise TypeError(f"section {name!r} is a {type(value).__name__}, not {model.__name__}")
        return value

    @property
    def completion_code(self) -> str | None:
        """The code shown at the end: the platform's completion code, else ``completion.code``."""
        return self.platform.completion_code or self.completion.code

    @property
    def external_id_param(self) -> str:
        """The URL parameter that identifies a participant on open enrollment."""
        if self.enrollment.external_id_param == "pid" and self.platform.name != "none":
            return PLATFORM_ID_PARAMETER[self.platform.name]
        return self.enrollment.external_id_param


# ----------------------------------------------------------------------------- resolved items


@dataclass(frozen=True)
class Text:
    """One text a participant reads: its story id, system, prompt and the text itself."""

    id: str
    system: str | None
    prompt: str
    story: str

    def to_dict(self) -> dict[str, Any]:
        """The text as a JSON-ready mapping."""
        return {"id": self.id, "system": self.system, "prompt": self.prompt, "story": self.story}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Text:
        """A text from :meth:`to_dict`'s mapping."""
        return cls(
            str(data["id"]), data.get("system"), str(data.get("prompt", "")), str(data["story"])
        )


@dataclass(frozen=True)
class Item:
    """One unit of assignment: what one page shows (one story, a pair, a triad, a tuple).

    ``key`` identifies the item in the database and in exports; ``condition`` is what the
    assignment balances over (the system for Likert and detection, the system pair for pairwise
    and triangle); ``texts`` are in canonical order (for side-by-side: model story, reference;
    pairwise: the two systems in the configured order; triangle: the triad in its order);
    ``meta`` holds protocol details (the triad order, the odd position...). Items of one
    ``group`` (the stories continuing one prompt) never go to the same participant.
    """

    key: str
    condition: str
    texts: tuple[Text, ...]
    meta: Mapping[str, Any] = field(default_factory=dict)

    @property
    def group(self) -> str:
        """The prompt this item continues (the item itself when it mixes prompts)."""
        return str(self.meta.get("prompt_group", self.key))

    def to_dict(self) -> dict[str, Any]:
        """The item as a JSON-ready mapping (stored by the server)."""
        return {
            "key": self.key,
            "condition": self.condition,
            "texts": [t.to_dict() for t in self.texts],
            "meta": dict(self.meta),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Item:
        """An item from :meth:`to_dict`'s mapping."""
        return cls(
            str(data["key"]),
            str(data["condition"]),
            tuple(Text.from_dict(t) for t in data["texts"]),
            dict(data.get("meta", {})),
        )


@dataclass(frozen=True)
class ResolvedTraining:
    """A training example with its texts resolved."""

    texts: tuple[Text, ...]
    answer: int | str | None
    answers: Mapping[str, int] | None
    explanation: str


@dataclass(frozen=True)
class ResolvedCheck:
    """An attention check with its texts resolved."""

    id: str
    texts: tuple[Text, ...]
    expect: Mapping[str, tuple[int, ...]]
    position: int | None


@dataclass(frozen=True)
class Study:
    """A loaded, validated study: the configuration and everything derived from it."""

    config: StudyConfig
    path: Path | None
    stories_path: Path
    items: tuple[Item, ...]
    training: tuple[ResolvedTraining, ...]
    checks: tuple[ResolvedCheck, ...]
    version: str
    stories_sha256: str
    raters_per_item: int
    keys: Mapping[str, tuple[int, ...]]
    legacy_version: str | None = None
    item_index: Mapping[str, Item] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.item_index:
            object.__setattr__(self, "item_index", {item.key: item for item in self.items})

    @property
    def name(self) -> str:
        """The study's name (from its file)."""
        return self.config.name

    @property
    def protocol(self) -> str:
        """The study's protocol name."""
        return self.config.protocol

    @property
    def criteria(self) -> list[Criterion]:
        """The study's criteria."""
        return list(self.config.criteria)

    @property
    def items_per_participant(self) -> int:
        """Items in one participant's batch."""
        return self.config.assignment.items_per_participant

    @property
    def max_items_per_participant(self) -> int:
        """The most items one participant may judge (None: one batch)."""
        cap = self.config.assignment.max_items_per_participant
        return cap if cap is not None else self.items_per_participant

    @property
    def conditions(self) -> list[str]:
        """The conditions (systems) of the study's items, in order of appearance."""
        seen: dict[str, None] = {}
        for item in self.items:
            seen.setdefault(item.condition, None)
        return list(seen)

    def item(self, key: str) -> Item:
        """The item with ``key``; an unknown key raises ``KeyError``."""
        return self.item_index[key]

    def answer_keys(self) -> dict[str, tuple[int, ...]]:
        """The answers a page of this study collects, with the values each accepts."""
        return dict(self.keys)

    def definition(self) -> dict[str, Any]:
        """The canonical definition stored with the data (configuration, items, version)."""
        return {
            "name": self.name,
            "version": self.version,
            "protocol": self.protocol,
            "config": self.config.model_dump(mode="json"),
            "stories_path": str(self.stories_path),
            "stories_sha256": self.stories_sha256,
            "n_items": len(self.items),
        }
