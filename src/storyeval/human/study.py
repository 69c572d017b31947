"""Human evaluation studies described in one YAML file: the model, its validation, its items.

A study file names a story file, a protocol and everything a participant sees. It is validated
when loaded; every problem is reported as ``FILE:LINE: key.path: what is wrong``.

Protocols (see :data:`PROTOCOLS`)
    ``likert``
        Each story rated on named criteria, each with its exact question wording, definition,
        a 5- or 7-point scale and endpoint or point labels (seed 003: grammar, coherence,
        likability, relevance on 5 points; seed 004: Q1-Q4 on 7 points).
    ``side_by_side``
        A model story rated next to the human reference for the same prompt, both on the same
        criteria (the calibration seed 003 found necessary). Left/right is counterbalanced.
    ``pairwise``
        Preference between two systems' stories for one prompt, per criterion.
    ``detection``
        "Definitely human-written" ... "Definitely machine-generated" (seed 000, chapter 6),
        then "Why did you select this rating?" or "What would you change to make it seem more
        human-like?".
    ``triangle``
        Two texts by one subject and one by the other, in the six orders balanced across
        judges; forced choice of the odd one out (seed 002).

Example
-------
>>> import pathlib
>>> study = load_study(pathlib.Path(__file__).parents[3] / "examples/studies/likert.yaml")
>>> study.protocol, [c.name for c in study.config.criteria]
('likert', ['grammar', 'coherence', 'likability', 'relevance'])
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator

from storyeval.corpus import Story, read_stories
from storyeval.errors import DataFileError, StoryevalError
from storyeval.yamlfile import Enrollment
from storyeval.yamlfile import StrictModel as _Strict
from storyeval.yamlfile import check_name as _check_name
from storyeval.yamlfile import yaml_line as _yaml_line

PROTOCOLS: tuple[str, ...] = ("likert", "side_by_side", "pairwise", "detection", "triangle")
Protocol = Literal["likert", "side_by_side", "pairwise", "detection", "triangle"]
ORDERS: tuple[str, ...] = ("balanced", "random", "fixed")

DETECTION_LABELS: tuple[str, str, str, str] = (
    "Definitely human-written",
    "Possibly human-written",
    "Possibly machine-generated",
    "Definitely machine-generated",
)
"""The 4-point scale of seed 000, section 6.2.1 (after Ippolito et al., 2020)."""

DETECTION_QUESTION = "What do you think the source of this text is?"
DETECTION_WHY = "Why did you select this rating?"
DETECTION_CHANGE = "What would you change to make it seem more human-like?"
TRIANGLE_QUESTION = "Select the text you think has been written by a different subject:"
SCALE_SIZES: tuple[int, ...] = (5, 7)


class StudyFileError(StoryevalError, ValueError):
    """A study file is invalid; ``problems`` holds one ``FILE:LINE: key: reason`` per problem."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


class Criterion(_Strict):
    """One question asked about each text (Likert and side-by-side) or each pair (pairwise)."""

    name: str
    question: str = Field(min_length=1)
    definition: str | None = None
    scale: int | None = None
    labels: dict[int, str] | list[str] | None = None
    required: bool = True

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _check_name(value, "a criterion name")

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


class Selection(_Strict):
    """Which stories of the story file become items."""

    systems: list[str] | None = None
    ids: list[str] | None = None
    exclude_ids: list[str] = Field(default_factory=list)
    per_system: int | None = Field(default=None, ge=1)
    limit: int | None = Field(default=None, ge=1)
    seed: int = 0


class Assignment(_Strict):
    """How items are distributed over participants."""

    items_per_participant: int = Field(default=10, ge=1)
    max_items_per_participant: int | None = Field(default=None, ge=1)
    raters_per_item: int = Field(default=3, ge=1)
    order: Literal["balanced", "random", "fixed"] = "balanced"
    seed: int = 0
    reservation_minutes: float = Field(default=60.0, gt=0)


class TextSpec(_Strict):
    """A text given inline in the study file (training examples, attention checks)."""

    prompt: str = ""
    story: str = Field(min_length=1)
    system: str | None = None
    id: str | None = None


class TrainingExample(_Strict):
    """A practice item shown before the study, then its answer and an explanation (seed 000,
    section 6.3: the Examples training)."""

    story: str | None = None
    stories: list[str] | None = None
    text: TextSpec | None = None
    texts: list[TextSpec] | None = None
    answer: int | str | None = None
    answers: dict[str, int] | None = None
    explanation: str = Field(min_length=1)


class AttentionCheck(_Strict):
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
        return _check_name(value, "an attention-check id")


class Question(_Strict):
    """A free-text question asked at the end of the study."""

    name: str
    text: str = Field(min_length=1)
    required: bool = False

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _check_name(value, "a question name")


class SideBySide(_Strict):
    reference_system: str = "human"
    labels: tuple[str, str] = ("Story A", "Story B")


class Pairwise(_Strict):
    systems: tuple[str, str]
    allow_tie: bool = False
    labels: tuple[str, str] = ("Story A", "Story B")
    tie_label: str = "They are equally good"


class Detection(_Strict):
    human_systems: list[str] = Field(default_factory=lambda: ["human"])
    question: str = DETECTION_QUESTION
    labels: tuple[str, str, str, str] = DETECTION_LABELS
    why_question: str = DETECTION_WHY
    change_question: str = DETECTION_CHANGE
    why_for: list[int] = Field(default_factory=lambda: [1])
    explanation_required: bool = True
    prompt_in_bold: bool = True


class TrianglePlanSpec(_Strict):
    alpha: float = Field(gt=0, lt=1)
    beta: float = Field(gt=0, lt=1)
    pd: float = Field(gt=0, lt=1)


class Triangle(_Strict):
    systems: tuple[str, str]
    test: Literal["difference", "similarity"] = "difference"
    judges: int | None = Field(default=None, ge=1)
    plan: TrianglePlanSpec | None = None
    question: str = TRIANGLE_QUESTION
    labels: tuple[str, str, str] = ("Text 1", "Text 2", "Text 3")


class Quality(_Strict):
    min_median_time_s: float = Field(default=40.0, ge=0)
    exclude_failed_checks: bool = True


class Completion(_Strict):
    code: str | None = None
    url: str | None = None
    message: str = "Thank you! Your answers have been saved."


class Reporting(_Strict):
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


class StudyConfig(_Strict):
    """The validated contents of a study file."""

    kind: Literal["study"] = "study"
    name: str
    title: str = Field(min_length=1)
    protocol: Protocol
    stories: str
    select: Selection = Field(default_factory=Selection)
    instructions: str = ""
    content_warning: str | None = None
    show_prompt: bool = True
    criteria: list[Criterion] = Field(default_factory=list)
    side_by_side: SideBySide | None = None
    pairwise: Pairwise | None = None
    detection: Detection | None = None
    triangle: Triangle | None = None
    assignment: Assignment = Field(default_factory=Assignment)
    training: list[TrainingExample] = Field(default_factory=list)
    training_intro: str = "Before starting the task, we will walk you through a quick training."
    attention_checks: list[AttentionCheck] = Field(default_factory=list)
    questions: list[Question] = Field(default_factory=list)
    quality: Quality = Field(default_factory=Quality)
    completion: Completion = Field(default_factory=Completion)
    enrollment: Enrollment = Field(default_factory=Enrollment)
    reporting: Reporting = Field(default_factory=Reporting)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _check_name(value, "the study name")


# ----------------------------------------------------------------------------- resolved items


@dataclass(frozen=True)
class Text:
    """One text a participant reads: its story id, system, prompt and the text itself."""

    id: str
    system: str | None
    prompt: str
    story: str

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "system": self.system, "prompt": self.prompt, "story": self.story}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Text:
        return cls(
            str(data["id"]), data.get("system"), str(data.get("prompt", "")), str(data["story"])
        )


@dataclass(frozen=True)
class Item:
    """One unit of assignment: what one page shows (one story, a pair or a triad).

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
        return {
            "key": self.key,
            "condition": self.condition,
            "texts": [t.to_dict() for t in self.texts],
            "meta": dict(self.meta),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Item:
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

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def protocol(self) -> str:
        return self.config.protocol

    @property
    def criteria(self) -> list[Criterion]:
        return list(self.config.criteria)

    @property
    def raters_per_item(self) -> int:
        return 1 if self.protocol == "triangle" else self.config.assignment.raters_per_item

    @property
    def items_per_participant(self) -> int:
        return self.config.assignment.items_per_participant

    @property
    def max_items_per_participant(self) -> int:
        cap = self.config.assignment.max_items_per_participant
        return cap if cap is not None else self.items_per_participant

    @property
    def conditions(self) -> list[str]:
        seen: dict[str, None] = {}
        for item in self.items:
            seen.setdefault(item.condition, None)
        return list(seen)

    def answer_keys(self) -> dict[str, tuple[int, ...]]:
        """The answers a page of this study collects, with the values each accepts."""
        return answer_keys(self.config)

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


def answer_keys(config: StudyConfig) -> dict[str, tuple[int, ...]]:
    """Answer keys and accepted values for one page of each protocol.

    ``likert``: one key per criterion (``1..scale``); ``side_by_side``: ``criterion@1`` and
    ``criterion@2`` for the left and right text; ``pairwise``: one key per criterion, 1 or 2
    for the left or right text (0 for a tie when allowed); ``detection``: ``source`` (1-4);
    ``triangle``: ``odd`` (1-3).
    """
    protocol = config.protocol
    if protocol == "likert":
        return {c.name: tuple(range(1, (c.scale or 5) + 1)) for c in config.criteria}
    if protocol == "side_by_side":
        return {
            f"{c.name}@{pos}": tuple(range(1, (c.scale or 5) + 1))
            for c in config.criteria
            for pos in (1, 2)
        }
    if protocol == "pairwise":
        tie = config.pairwise is not None and config.pairwise.allow_tie
        return {c.name: (0, 1, 2) if tie else (1, 2) for c in config.criteria}
    if protocol == "detection":
        return {"source": (1, 2, 3, 4)}
    return {"odd": (1, 2, 3)}


# ----------------------------------------------------------------------------- loading


def _loc_text(loc: Sequence[str | int]) -> str:
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += ("." if text else "") + str(part)
    return text or "(top level)"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _format_validation(exc: ValidationError) -> list[tuple[tuple[str | int, ...], str]]:
    problems = []
    for error in exc.errors():
        loc = tuple(
            part for part in error["loc"] if not (isinstance(part, str) and "[" in part)
        )  # drop pydantic's union-branch tags such as 'list[str]'
        kind = error["type"]
        message = str(error["msg"])
        if message.startswith("Value error, "):
            message = message[len("Value error, ") :]
        if kind == "extra_forbidden":
            message = f"unknown key {str(loc[-1])!r} (check the spelling)"
        elif kind == "missing":
            message = "required key is missing"
        elif "input" in error and kind not in ("value_error",):
            message = f"{message}; got {_short(error['input'])}"
        problems.append((loc, message))
    # union errors repeat one problem per branch: keep the first per location
    unique: dict[tuple[str | int, ...], str] = {}
    for loc, message in problems:
        unique.setdefault(loc, message)
    return list(unique.items())


def load_study(path: str | Path) -> Study:
    """Read, validate and resolve a study file.

    Raises
    ------
    StudyFileError
        Listing every problem as ``FILE:LINE: key.path: reason``.
    FileNotFoundError
        If the study file does not exist.
    """
    import yaml

    file_path = Path(path)
    if not file_path.exists():
        raise FileNotFoundError(f"{file_path}: no such file")
    text = file_path.read_text(encoding="utf-8")
    try:
        root = yaml.compose(text)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 1
        problem = getattr(exc, "problem", None) or str(exc)
        raise StudyFileError([f"{file_path}:{line}: malformed YAML: {problem}"]) from None
    if not isinstance(data, dict):
        raise StudyFileError([f"{file_path}:1: a study file must be a YAML mapping of keys"])

    def where(loc: Sequence[str | int]) -> str:
        line = _yaml_line(root, loc) or 1
        return f"{file_path}:{line}: {_loc_text(loc)}"

    try:
        config = StudyConfig.model_validate(data)
    except ValidationError as exc:
        found = sorted(
            (
                (_yaml_line(root, loc) or 1, f"{where(loc)}: {msg}")
                for loc, msg in _format_validation(exc)
            ),
            key=lambda pair: pair[0],
        )
        raise StudyFileError([text for _, text in found]) from None
    return resolve_study(config, base_dir=file_path.parent, path=file_path, where=where)


def study_from_dict(data: Mapping[str, Any], *, base_dir: str | Path = ".") -> Study:
    """Validate and resolve a study given as a mapping (paths relative to ``base_dir``)."""
    try:
        config = StudyConfig.model_validate(dict(data))
    except ValidationError as exc:
        raise StudyFileError(
            [f"{_loc_text(loc)}: {msg}" for loc, msg in _format_validation(exc)]
        ) from None
    return resolve_study(config, base_dir=Path(base_dir), path=None, where=_loc_text)


def resolve_study(
    config: StudyConfig,
    *,
    base_dir: Path,
    path: Path | None,
    where: Any = _loc_text,
) -> Study:
    """Check what the schema cannot (cross-field rules, story ids) and build the items."""
    problems: list[str] = []

    def problem(loc: Sequence[str | int], message: str) -> None:
        problems.append(f"{where(loc)}: {message}")

    stories_path = (base_dir / config.stories).resolve()
    stories: list[Story] = []
    try:
        stories = read_stories(stories_path)
    except FileNotFoundError:
        problem(("stories",), f"story file {stories_path} does not exist")
    except DataFileError as exc:
        problem(("stories",), f"story file is invalid:\n{exc}")
    _check_protocol(config, problem)
    if problems:
        raise StudyFileError(problems)
    by_id = {s.id: s for s in stories}
    training = _resolve_training(config, by_id, problem)
    checks = _resolve_checks(config, by_id, problem)
    # training texts, and every story sharing a prompt with one, never become items
    training_ids = {t.id for example in training for t in example.texts}
    training_prompts = {_prompt_key(by_id[i]) for i in training_ids if i in by_id}
    excluded = training_ids | {s.id for s in stories if _prompt_key(s) in training_prompts}
    items = _build_items(config, stories, excluded, problem)
    if problems:
        raise StudyFileError(problems)
    digest = hashlib.sha256(stories_path.read_bytes()).hexdigest()
    canonical = json.dumps(
        {
            "config": config.model_dump(mode="json", exclude={"reporting"}),
            "items": [i.to_dict() for i in items],
            "training": [[t.to_dict() for t in ex.texts] for ex in training],
            "checks": [[t.to_dict() for t in c.texts] for c in checks],
        },
        sort_keys=True,
        ensure_ascii=False,
    )
    version = hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]
    return Study(config, path, stories_path, tuple(items), training, checks, version, digest)


def _check_protocol(config: StudyConfig, problem: Any) -> None:
    protocol = config.protocol
    own = {"side_by_side", "pairwise", "detection", "triangle"}
    for section in own - {protocol}:
        if getattr(config, section) is not None:
            problem((section,), f"this section belongs to protocol {section!r}, not {protocol!r}")
    if protocol in ("pairwise", "triangle") and getattr(config, protocol) is None:
        problem((protocol,), f"required for protocol {protocol!r} (it names the two systems)")
    if protocol in ("likert", "side_by_side", "pairwise"):
        if not config.criteria:
            problem(("criteria",), f"protocol {protocol!r} needs at least one criterion")
    elif config.criteria:
        problem(("criteria",), f"protocol {protocol!r} asks a fixed question; remove 'criteria'")
    names = [c.name for c in config.criteria]
    for i, criterion in enumerate(config.criteria):
        if names.count(criterion.name) > 1:
            problem(("criteria", i, "name"), f"criterion name {criterion.name!r} is used twice")
        if protocol in ("likert", "side_by_side"):
            if criterion.scale is None:
                problem(("criteria", i, "scale"), "required: the number of points (5 or 7)")
            else:
                _check_labels(criterion, ("criteria", i, "labels"), problem)
        elif protocol == "pairwise" and (
            criterion.scale is not None or criterion.labels is not None
        ):
            problem(
                ("criteria", i),
                "a pairwise criterion is a choice between two texts: remove 'scale' and 'labels'",
            )
    assignment = config.assignment
    cap = assignment.max_items_per_participant
    if cap is not None and cap < assignment.items_per_participant:
        problem(
            ("assignment", "max_items_per_participant"),
            f"must be >= items_per_participant ({assignment.items_per_participant}); got {cap}",
        )
    if protocol == "triangle" and config.triangle is not None:
        tri = config.triangle
        if (tri.judges is None) == (tri.plan is None):
            problem(
                ("triangle",),
                "give exactly one of 'judges' (evaluations to collect) or 'plan' (alpha, beta, pd)",
            )
        if tri.systems[0] == tri.systems[1]:
            problem(("triangle", "systems"), "the two systems must differ")
        if tri.test == "similarity" and assignment.items_per_participant != 1:
            problem(
                ("assignment", "items_per_participant"),
                "a triangle test of similarity allows no repeated evaluations: must be 1",
            )
        if tri.test == "similarity" and cap not in (None, 1):
            problem(
                ("assignment", "max_items_per_participant"), "must be 1 for a test of similarity"
            )
    pair = config.pairwise
    if protocol == "pairwise" and pair is not None and pair.systems[0] == pair.systems[1]:
        problem(("pairwise", "systems"), "the two systems must differ")
    if protocol == "detection" and config.detection is not None:
        bad = [v for v in config.detection.why_for if v not in (1, 2, 3, 4)]
        if bad:
            problem(("detection", "why_for"), f"ratings must be 1-4; got {bad}")
    keys = answer_keys(config)
    for i, check in enumerate(config.attention_checks):
        for key, values in check.expect.items():
            if key not in keys:
                problem(
                    ("attention_checks", i, "expect", key),
                    f"unknown answer {key!r}; this protocol's answers are {', '.join(keys)}",
                )
                continue
            wrong = [v for v in values if v not in keys[key]]
            if wrong or not values:
                problem(
                    ("attention_checks", i, "expect", key),
                    f"accepted values must be among {list(keys[key])}; got {values}",
                )
    ids = [c.id for c in config.attention_checks]
    for i, check in enumerate(config.attention_checks):
        if ids.count(check.id) > 1:
            problem(("attention_checks", i, "id"), f"attention-check id {check.id!r} is used twice")
        if check.position is not None and check.position > assignment.items_per_participant + len(
            ids
        ):
            problem(
                ("attention_checks", i, "position"), "is after the end of a participant's batch"
            )
    qnames = [q.name for q in config.questions]
    for i, question in enumerate(config.questions):
        if qnames.count(question.name) > 1:
            problem(("questions", i, "name"), f"question name {question.name!r} is used twice")
    if config.completion.url is not None and not config.completion.url.startswith(
        ("https://", "http://")
    ):
        problem(("completion", "url"), "must be an http(s) URL")


def _check_labels(criterion: Criterion, loc: tuple[str | int, ...], problem: Any) -> None:
    scale = criterion.scale or 5
    if criterion.labels is None:
        problem(loc, f"required: labels for the endpoints (1 and {scale}) or for every point")
        return
    if isinstance(criterion.labels, list):
        if len(criterion.labels) != scale:
            problem(
                loc, f"a list of labels must name all {scale} points; got {len(criterion.labels)}"
            )
        return
    points = set(criterion.labels)
    outside = sorted(p for p in points if not 1 <= p <= scale)
    if outside:
        problem(loc, f"points must be between 1 and {scale}; got {outside}")
        return
    if points != {1, scale} and points != set(range(1, scale + 1)):
        missing = sorted(set(range(1, scale + 1)) - points)
        problem(
            loc,
            f"label the two endpoints (1 and {scale}) or every point; missing {missing}",
        )
    for point, label in criterion.labels.items():
        if not str(label).strip():
            problem((*loc, point), "a label must not be empty")


def _text_of(story: Story) -> Text:
    return Text(story.id, story.system, story.prompt, story.story)


def _texts_from(
    spec: TrainingExample | AttentionCheck,
    by_id: Mapping[str, Story],
    loc: tuple[str | int, ...],
    problem: Any,
) -> tuple[Text, ...]:
    texts: list[Text] = []
    given = [k for k in ("story", "stories", "text", "texts") if getattr(spec, k) is not None]
    if len(given) != 1:
        problem(
            loc,
            "give exactly one of 'story' / 'stories' (ids in the story file) or 'text' / 'texts' (inline)",
        )
        return ()
    ids: list[str] = []
    if spec.story is not None:
        ids = [spec.story]
    elif spec.stories is not None:
        ids = list(spec.stories)
    for j, story_id in enumerate(ids):
        if story_id not in by_id:
            key = (*loc, "story") if spec.story is not None else (*loc, "stories", j)
            problem(key, f"no story with id {story_id!r} in the story file")
        else:
            texts.append(_text_of(by_id[story_id]))
    inline = [spec.text] if spec.text is not None else list(spec.texts or [])
    for j, t in enumerate(inline):
        texts.append(Text(t.id or f"{_loc_text(loc)}-{j + 1}", t.system, t.prompt, t.story))
    return tuple(texts)


_TEXTS_PER_PAGE = {"likert": 1, "detection": 1, "side_by_side": 2, "pairwise": 2, "triangle": 3}


def _resolve_training(
    config: StudyConfig, by_id: Mapping[str, Story], problem: Any
) -> tuple[ResolvedTraining, ...]:
    resolved = []
    protocol = config.protocol
    for i, example in enumerate(config.training):
        loc: tuple[str | int, ...] = ("training", i)
        texts = _texts_from(example, by_id, loc, problem)
        if protocol == "side_by_side" and len(texts) == 1:
            story = by_id.get(texts[0].id)
            if story is None or not story.references:
                problem(loc, "a side-by-side training story needs a reference in the story file")
            else:
                texts = (texts[0], _reference_text(story, by_id, config))
        expected = _TEXTS_PER_PAGE[protocol]
        if texts and len(texts) != expected:
            problem(
                loc, f"protocol {protocol!r} shows {expected} text(s) per page; got {len(texts)}"
            )
        if protocol in ("likert", "side_by_side"):
            keys = answer_keys(config)
            what = (
                "the reference ratings by criterion"
                if protocol == "likert"
                else "the reference ratings as criterion@1 (the model story, shown as Story A) and "
                "criterion@2 (the reference, Story B)"
            )
            if example.answers is None:
                problem((*loc, "answers"), f"required: {what}")
            else:
                for key, value in example.answers.items():
                    if key not in keys:
                        problem((*loc, "answers", key), f"unknown answer {key!r}; expected {what}")
                    elif value not in keys[key]:
                        problem(
                            (*loc, "answers", key),
                            f"must be between 1 and {max(keys[key])}; got {value}",
                        )
        else:
            allowed = {"detection": (1, 2, 3, 4), "pairwise": (1, 2), "triangle": (1, 2, 3)}[
                protocol
            ]
            if example.answer is None or example.answer not in allowed:
                what = {
                    "detection": "the correct rating, 1-4",
                    "pairwise": "the better text, 1 or 2",
                    "triangle": "the position of the odd text, 1-3",
                }[protocol]
                problem((*loc, "answer"), f"required: {what}; got {example.answer!r}")
        resolved.append(
            ResolvedTraining(texts, example.answer, example.answers, example.explanation)
        )
    return tuple(resolved)


def _resolve_checks(
    config: StudyConfig, by_id: Mapping[str, Story], problem: Any
) -> tuple[ResolvedCheck, ...]:
    resolved = []
    expected = _TEXTS_PER_PAGE[config.protocol]
    for i, check in enumerate(config.attention_checks):
        loc: tuple[str | int, ...] = ("attention_checks", i)
        texts = _texts_from(check, by_id, loc, problem)
        if texts and len(texts) != expected:
            problem(
                loc,
                f"protocol {config.protocol!r} shows {expected} text(s) per page; got {len(texts)}",
            )
        expect = {key: tuple(values) for key, values in check.expect.items()}
        resolved.append(ResolvedCheck(check.id, texts, expect, check.position))
    return tuple(resolved)


def _reference_text(story: Story, by_id: Mapping[str, Story], config: StudyConfig) -> Text:
    """The human reference of a machine story, as a text with a stable id.

    The id is the human story's id when the story file holds a story with the same
    ``prompt_id`` (or prompt) and the reference text; otherwise ``<story id>:reference``.
    """
    reference = story.references[0]
    ref_system = config.side_by_side.reference_system if config.side_by_side else "human"
    prompt_id = story.extra.get("prompt_id")
    for candidate in by_id.values():
        if candidate.story.strip() != reference.strip():
            continue
        if prompt_id is None or candidate.extra.get("prompt_id", candidate.id) == prompt_id:
            return Text(
                candidate.id, candidate.system or ref_system, candidate.prompt, candidate.story
            )
    return Text(f"{story.id}:reference", ref_system, story.prompt, reference)


def _select(
    config: StudyConfig, stories: Sequence[Story], excluded: set[str], problem: Any
) -> list[Story]:
    sel = config.select
    pool = [s for s in stories if s.id not in excluded and s.id not in set(sel.exclude_ids)]
    known_systems = {s.system for s in stories}
    if sel.systems is not None:
        for j, system in enumerate(sel.systems):
            if system not in known_systems:
                problem(
                    ("select", "systems", j),
                    f"no story has system {system!r}; the file has {sorted(str(s) for s in known_systems)}",
                )
        pool = [s for s in pool if s.system in set(sel.systems)]
    if sel.ids is not None:
        by_id = {s.id: s for s in pool}
        for j, story_id in enumerate(sel.ids):
            if story_id not in by_id:
                problem(("select", "ids", j), f"no selectable story with id {story_id!r}")
        pool = [by_id[i] for i in sel.ids if i in by_id]
    rng = random.Random(sel.seed)
    if sel.per_system is not None:
        groups: dict[str | None, list[Story]] = {}
        for s in pool:
            groups.setdefault(s.system, []).append(s)
        chosen: set[str] = set()
        for group_key in sorted(groups, key=str):
            members = groups[group_key]
            picked = (
                members if len(members) <= sel.per_system else rng.sample(members, sel.per_system)
            )
            chosen.update(s.id for s in picked)
        pool = [s for s in pool if s.id in chosen]
    if sel.limit is not None and len(pool) > sel.limit:
        keep = set(s.id for s in rng.sample(pool, sel.limit))
        pool = [s for s in pool if s.id in keep]
    return pool


def _prompt_key(story: Story) -> str:
    return str(story.extra.get("prompt_id") or story.prompt)


def _build_items(
    config: StudyConfig, stories: Sequence[Story], excluded: set[str], problem: Any
) -> list[Item]:
    protocol = config.protocol
    by_id = {s.id: s for s in stories}
    items: list[Item] = []
    if protocol in ("likert", "detection"):
        selected = _select(config, stories, excluded, problem)
        for s in selected:
            meta: dict[str, Any] = {"prompt_group": _prompt_key(s)}
            if protocol == "detection":
                humans = set(detection_settings(config).human_systems)
                meta["truth"] = "human" if s.system in humans else "machine"
            items.append(Item(s.id, s.system or "(none)", (_text_of(s),), meta))
        if protocol == "detection":
            truths = {i.meta["truth"] for i in items}
            if items and truths != {"human", "machine"}:
                problem(
                    ("select",),
                    "a detection study needs both human-written and machine-generated stories; "
                    f"the selection has only {', '.join(sorted(truths))} (see detection.human_systems)",
                )
    elif protocol == "side_by_side":
        selected = _select(config, stories, excluded, problem)
        ref_system = (config.side_by_side or SideBySide()).reference_system
        for s in selected:
            if s.system == ref_system:
                continue  # references are shown beside the model stories, not on their own
            if not s.references:
                problem(("select",), f"story {s.id!r} has no reference to show beside it")
                continue
            ref = _reference_text(s, by_id, config)
            items.append(
                Item(
                    s.id, s.system or "(none)", (_text_of(s), ref), {"prompt_group": _prompt_key(s)}
                )
            )
    elif protocol == "pairwise":
        assert config.pairwise is not None
        a, b = config.pairwise.systems
        selected = _select(config, stories, excluded, problem)
        for j, system in enumerate((a, b)):
            if not any(s.system == system for s in stories):
                problem(("pairwise", "systems", j), f"no story has system {system!r}")
        groups: dict[str, dict[str, Story]] = {}
        for s in selected:
            if s.system in (a, b):
                groups.setdefault(_prompt_key(s), {}).setdefault(str(s.system), s)
        for key, pair in groups.items():
            if a in pair and b in pair:
                items.append(
                    Item(
                        key,
                        f"{a} vs {b}",
                        (_text_of(pair[a]), _text_of(pair[b])),
                        {"system_a": a, "system_b": b},
                    )
                )
    else:
        items = _triangle_items(config, stories, excluded, problem)
    if not items and protocol != "triangle":
        problem(("select",), "the selection yields no items")
    return items


def detection_settings(config: StudyConfig) -> Detection:
    """The detection section, with the defaults of seed 000 when the file omits it."""
    return config.detection or Detection()


def triangle_evaluations(config: StudyConfig) -> int:
    """Number of triads (evaluations) a triangle study collects: ``judges``, or the number its
    plan needs.

    Raises
    ------
    ValueError
        If the study is not a triangle study (or, for a configuration built without
        validation, gives neither judges nor a plan).
    """
    from storyeval.human.triangle import judges_needed

    if config.triangle is None:
        raise ValueError(
            f"study {config.name!r} is a {config.protocol} study; the number of triads is "
            "defined for triangle studies only"
        )
    if config.triangle.judges is not None:
        return config.triangle.judges
    if config.triangle.plan is None:
        raise ValueError(f"study {config.name!r}: the triangle block needs judges or a plan")
    plan = config.triangle.plan
    return judges_needed(plan.alpha, plan.beta, plan.pd)


def _triangle_items(
    config: StudyConfig, stories: Sequence[Story], excluded: set[str], problem: Any
) -> list[Item]:
    from storyeval.human.triangle import balanced_orders, odd_position

    assert config.triangle is not None
    a, b = config.triangle.systems
    selected = _select(config, stories, excluded, problem)
    pools = {a: [s for s in selected if s.system == a], b: [s for s in selected if s.system == b]}
    for j, system in enumerate((a, b)):
        if len(pools[system]) < 2:
            problem(
                ("triangle", "systems", j),
                f"system {system!r} needs at least 2 selectable stories; found {len(pools[system])}",
            )
    if len(pools[a]) < 2 or len(pools[b]) < 2:
        return []
    n = triangle_evaluations(config)
    orders = balanced_orders(n, seed=config.assignment.seed)
    rng = random.Random(config.assignment.seed + 1)
    queues: dict[str, list[Story]] = {a: [], b: []}

    def draw(system: str, avoid: set[str]) -> Story:
        for _ in range(len(pools[system]) * 2 + 2):
            if not queues[system]:
                queues[system] = list(pools[system])
                rng.shuffle(queues[system])
            candidate = queues[system].pop()
            if _prompt_key(candidate) not in avoid:
                return candidate
            queues[system].insert(0, candidate)
        return queues[system].pop()

    items = []
    width = max(4, len(str(n)))
    for k, order in enumerate(orders):
        letters = {"A": a, "B": b}
        texts: list[Text] = []
        used: set[str] = set()
        for letter in order:
            story = draw(letters[letter], used)
            used.add(_prompt_key(story))
            texts.append(_text_of(story))
        odd = odd_position(order)
        odd_system = letters[order[odd - 1]]
        items.append(
            Item(
                f"triad-{k + 1:0{width}d}",
                f"{a} vs {b}",
                tuple(texts),
                {
                    "order": order,
                    "odd_position": odd,
                    "odd_system": odd_system,
                    "system_a": a,
                    "system_b": b,
                    "test": config.triangle.test,
                },
            )
        )
    return items


def iter_study_files(paths: Iterable[str | Path]) -> list[Path]:
    """Expand directories into the ``*.yaml`` / ``*.yml`` files they contain."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found.extend(sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml")))
        else:
            found.append(path)
    return found
