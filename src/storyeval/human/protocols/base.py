"""What a study protocol is: everything that differs between Likert ratings, pairwise
preferences, detection, the triangle test and best-worst scaling, in one class per protocol.

A protocol declares its section of the study file (an options model), checks what the schema
cannot, builds the items from the story file, says which answers a page collects, turns a
page's answers into long-format judgments, describes itself in the design statement, analyses
its judgments, and renders its page (a Jinja template kept in the protocol's own module). The
server, the loader, the statement and the analysis call these methods and never branch on a
protocol's name, so a new protocol is one new module (see :mod:`.best_worst`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from storyeval.base.yamlfile import Loc, StrictModel
from storyeval.corpus import Story
from storyeval.human.model import (
    Item,
    ResolvedTraining,
    Study,
    StudyConfig,
    Text,
    TrainingExample,
)

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

LEFT_RIGHT = (
    "Left/right position of the two texts alternates over items and over the raters of an item."
)
Problem = Callable[[Loc, str], None]
"""``problem(location, message)`` records one problem of a study file."""


@dataclass(frozen=True)
class PageView:
    """What one page shows: the item, its texts in display order and that order."""

    item: Item
    texts: tuple[Text, ...]
    layout: tuple[int, ...]


@dataclass(frozen=True)
class JudgmentRow:
    """One judgment a page produces (the server adds timing and page details)."""

    item_id: str
    criterion: str
    value: float
    condition: str | None
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class ProtocolAnalysis:
    """What a protocol adds to a study's analysis: named tables and rows of ``tests.csv``."""

    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    tests: list[dict[str, Any]] = field(default_factory=list)
    signature_fields: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AnalysisSettings:
    """Settings of :func:`storyeval.human.analysis.analyse_judgments` that protocols read."""

    n_boot: int = 1000
    seed: int = 0
    triangle_alpha: float = 0.05
    triangle_beta: float | None = None
    triangle_pd: float | None = None


@dataclass
class StatementPart:
    """A protocol's description of its task for the design statement (Markdown lines) and the
    reporting-survey items it answers."""

    lines: list[str]
    answered: dict[str, bool] = field(default_factory=dict)


class StudyProtocol:
    """Base class of the study protocols; subclasses are registered in
    :data:`storyeval.human.protocols.PROTOCOLS`.

    Class attributes
    ----------------
    name : str
        The ``protocol:`` value in a study file.
    options_model : type or None
        The model of the protocol's own section (``pairwise:``...), named like the protocol.
    options_required : bool
        Whether the section must be present (it names the systems, say).
    texts_per_page : int
        Texts on one page (1 for Likert, 2 for pairwise...).
    criteria : {"scaled", "choice", "none"}
        Whether the file lists criteria rated on a scale, criteria answered by a choice, or no
        criteria (a fixed question).
    agreement_level : str or None
        Krippendorff's alpha level for its judgments (``None``: agreement is not defined).
    compares_conditions : bool
        Whether Welch t-tests and ANOVA between conditions apply to its values.
    groups_by_prompt : bool
        Whether a participant never gets two items continuing the same prompt.
    asks_follow_up : bool
        Whether a free-text question follows each item (see :meth:`follow_up`).
    summary : str
        One sentence describing the task, for the design statement.
    page_template, feedback_template : str
        Jinja templates of an item page and of the answer shown after a training example.
    """

    name: ClassVar[str]
    options_model: ClassVar[type[StrictModel] | None] = None
    options_required: ClassVar[bool] = False
    texts_per_page: ClassVar[int] = 1
    criteria: ClassVar[str] = "scaled"
    agreement_level: ClassVar[str | None] = "ordinal"
    compares_conditions: ClassVar[bool] = False
    groups_by_prompt: ClassVar[bool] = True
    asks_follow_up: ClassVar[bool] = False
    summary: ClassVar[str] = ""
    page_template: ClassVar[str] = ""
    feedback_template: ClassVar[str] = ""

    # ------------------------------------------------------------------ the study file

    def options(self, config: StudyConfig) -> Any:
        """The protocol's section of ``config`` (its defaults when absent and optional)."""
        if self.options_model is None:
            return None
        value = config.section(self.name, self.options_model)
        if value is None and not self.options_required:
            return self.options_model()
        return value

    def page_size(self, config: StudyConfig) -> int:
        """Texts on one page."""
        return self.texts_per_page

    def check(self, config: StudyConfig, problem: Problem) -> None:
        """Check what the schema cannot (cross-field rules); report with ``problem``."""

    def answer_keys(self, config: StudyConfig) -> dict[str, tuple[int, ...]]:
        """The answers one page collects and the values each accepts."""
        raise NotImplementedError

    def answer_problems(self, config: StudyConfig, answers: Mapping[str, int]) -> list[str]:
        """Answers that are each valid but wrong together (the keys to mark)."""
        return []

    def required_keys(self, config: StudyConfig) -> set[str]:
        """The answer keys a page must have (optional criteria excepted)."""
        optional = {c.name for c in config.criteria if not c.required}
        keys = self.answer_keys(config)
        return {k for k in keys if k.split("@", 1)[0].split(":", 1)[0] not in optional}

    def build_items(
        self, config: StudyConfig, stories: Sequence[Story], excluded: set[str], problem: Problem
    ) -> list[Item]:
        """The items (pages) of the study, from the stories of the story file."""
        raise NotImplementedError

    def raters_per_item(self, config: StudyConfig) -> int:
        """How many judgments each item collects (the study's setting by default)."""
        return config.assignment.raters_per_item

    def layout(
        self, item: Item, item_index: int, replicate: int, rng: random.Random
    ) -> tuple[int, ...]:
        """The display order of an item's texts for one rater (indices into ``item.texts``):
        two texts alternate left and right over items and over an item's raters."""
        if len(item.texts) == 2:
            return (1, 0) if (item_index + replicate) % 2 == 1 else (0, 1)
        return tuple(range(len(item.texts)))

    def one_slot_per_item(self) -> bool:
        """True when each item is judged once (the triangle test's triads)."""
        return False

    def training_texts(
        self,
        config: StudyConfig,
        texts: tuple[Text, ...],
        by_id: Mapping[str, Story],
        loc: Loc,
        problem: Problem,
    ) -> tuple[Text, ...]:
        """The texts of a training example (side-by-side adds the reference)."""
        return texts

    def check_training(
        self, config: StudyConfig, example: TrainingExample, loc: Loc, problem: Problem
    ) -> None:
        """Check a training example's answer(s)."""

    def training_keys(
        self, config: StudyConfig, example: ResolvedTraining
    ) -> dict[str, tuple[int, ...]] | None:
        """The answers a training page collects when they differ from an item page's (None:
        the same)."""
        return None

    def training_page_sizes(self, config: StudyConfig) -> tuple[int, ...]:
        """The numbers of texts a training example may show (an item page's by default)."""
        return (self.page_size(config),)

    def training_correct(
        self, study: Study, example: ResolvedTraining, answer: Mapping[str, int]
    ) -> bool | None:
        """Whether a training answer is right (``None`` where reference ratings calibrate
        rather than grade)."""
        return None

    # ------------------------------------------------------------------ the server

    def judgment_rows(
        self, study: Study, page: PageView, answers: Mapping[str, int]
    ) -> list[JudgmentRow]:
        """The judgments one answered page produces."""
        raise NotImplementedError

    def wants_follow_up(self, config: StudyConfig) -> bool:
        """Whether a free-text question follows each item (``asks_follow_up``, or a study
        option such as pairwise's ``why_question``)."""
        return self.asks_follow_up

    def follow_up(self, study: Study, answers: Mapping[str, float]) -> str | None:
        """A free-text question asked right after an item, given its stored answers by
        criterion (only where :meth:`wants_follow_up`)."""
        return None

    def answer_summary(self, study: Study, page: PageView, answers: Mapping[str, float]) -> str:
        """The answer given (``answers``: the stored values by criterion), in words, shown
        above the follow-up question."""
        labels = getattr(self.options(study.config), "labels", ())
        rating = int(next(iter(answers.values()), 0))
        return str(labels[rating - 1]) if 0 < rating <= len(labels) else ""

    def follow_up_required(self, study: Study) -> bool:
        """Whether the follow-up question of an answer must be answered."""
        return True

    def template_context(self, study: Study) -> dict[str, Any]:
        """Extra names the protocol's templates read."""
        return {"options": self.options(study.config)}

    # ------------------------------------------------------------------ reporting

    def describe(self, study: Study) -> StatementPart:
        """The task and question design, for the design statement."""
        return StatementPart([self.summary])

    def presentation(self, study: Study) -> list[str]:
        """Lines about how pages are laid out, for the statement's presentation section."""
        return []

    def agreement_values(self, part: pd.DataFrame) -> tuple[pd.DataFrame, str]:
        """The judgments agreement is computed on, and the method's name."""
        return part, f"krippendorff_alpha ({self.agreement_level})"

    def analyse(self, part: pd.DataFrame, settings: AnalysisSettings) -> ProtocolAnalysis:
        """Tables and tests of this protocol's judgments (after quality filtering)."""
        return ProtocolAnalysis()


# ----------------------------------------------------------------------------- helpers


def text_of(story: Story) -> Text:
    """The text of ``story`` that participants read (the story, or the field the study names)."""
    return Text(story.id, story.system, story.prompt, story.story)


def select_stories(
    config: StudyConfig, stories: Sequence[Story], excluded: set[str], problem: Problem
) -> list[Story]:
    """The stories the ``select:`` section picks (seeded sampling), minus ``excluded``."""
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


def check_system_pair(
    config: StudyConfig,
    section: str,
    systems: tuple[str, str],
    stories: Sequence[Story],
    problem: Problem,
) -> None:
    """The two systems of a comparison must exist in the story file."""
    for j, system in enumerate(systems):
        if not any(s.system == system for s in stories):
            problem((section, "systems", j), f"no story has system {system!r}")


def check_choice_training(
    example: TrainingExample, allowed: Sequence[int], what: str, loc: Loc, problem: Problem
) -> None:
    """A training example of a choice protocol needs ``answer`` among ``allowed``."""
    if example.answer is None or example.answer not in allowed:
        problem((*loc, "answer"), f"required: {what}; got {example.answer!r}")


def check_rating_training(
    config: StudyConfig,
    keys: Mapping[str, tuple[int, ...]],
    example: TrainingExample,
    what: str,
    loc: Loc,
    problem: Problem,
) -> None:
    """A training example of a rating protocol needs reference ratings for its answer keys."""
    if example.answers is None:
        problem((*loc, "answers"), f"required: {what}")
        return
    for key, value in example.answers.items():
        if key not in keys:
            problem((*loc, "answers", key), f"unknown answer {key!r}; expected {what}")
        elif value not in keys[key]:
            problem((*loc, "answers", key), f"must be between 1 and {max(keys[key])}; got {value}")


def cell(text: Any) -> str:
    """A value for a Markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def criteria_table(config: StudyConfig, answers: str) -> list[str]:
    """The Markdown table of choice criteria (question wording, definition, answers)."""
    lines = [
        "| criterion | question (exact wording) | definition shown | answers |",
        "|---|---|---|---|",
    ]
    for c in config.criteria:
        definition = cell(c.definition) if c.definition else "(none)"
        lines.append(f"| {c.name} | {cell(c.question)} | {definition} | {answers} |")
    return lines
