"""``pairwise``: the better of two systems' stories for one prompt, per criterion (optionally
with a tie); left/right counterbalanced. Analysed with exact binomial tests of no preference."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, cast

import pandas as pd
from pydantic import Field, model_validator

from storyeval.base.stats import binomial_test
from storyeval.base.yamlfile import Loc, StrictModel
from storyeval.corpus import Story, prompt_group
from storyeval.human.model import Item, ResolvedTraining, Study, StudyConfig, TrainingExample
from storyeval.human.protocols.base import (
    LEFT_RIGHT,
    AnalysisSettings,
    JudgmentRow,
    PageView,
    Problem,
    ProtocolAnalysis,
    StatementPart,
    StudyProtocol,
    check_choice_training,
    check_system_pair,
    criteria_table,
    select_stories,
    text_of,
)
from storyeval.human.tables import TEST_COLUMNS


class PairwiseOptions(StrictModel):
    """Settings of a pairwise study: the two conditions compared (``systems``), or several
    head-to-head comparisons (``pairs``, e.g. a baseline against each of three models, as Clark
    2021, Table B.5), and whether ties are allowed."""

    systems: tuple[str, str] | None = None
    pairs: list[tuple[str, str]] | None = Field(default=None, min_length=1)
    allow_tie: bool = False
    labels: tuple[str, str] = ("Story A", "Story B")
    tie_label: str = "They are equally good"
    #: a free-text question after each choice, e.g. "Briefly explain why you made your
    #: choice." (Clark 2021, section 3.7); none by default
    why_question: str | None = Field(default=None, min_length=1)
    why_required: bool = True

    @model_validator(mode="after")
    def _one_of(self) -> PairwiseOptions:
        if (self.systems is None) == (self.pairs is None):
            raise ValueError("give systems (one comparison) or pairs (several), not both")
        return self

    @property
    def compared(self) -> list[tuple[str, str]]:
        """Every pair of systems compared, in the file's order."""
        return [self.systems] if self.systems is not None else list(self.pairs or [])


def pairwise_preferences(frame: pd.DataFrame) -> pd.DataFrame:
    """Per criterion and system pair: wins, ties, the share preferring system A with its exact
    95% CI and a two-sided exact binomial test of no preference (ties excluded)."""
    rows = []
    for (criterion, condition), part in frame.groupby(["criterion", "condition"], sort=True):
        a = str(part["system_a"].iloc[0]) if "system_a" in part else condition.split(" vs ")[0]
        b = str(part["system_b"].iloc[0]) if "system_b" in part else condition.split(" vs ")[-1]
        wins_a = int((part["value"] == 1.0).sum())
        wins_b = int((part["value"] == 0.0).sum())
        ties = int(len(part) - wins_a - wins_b)
        n = wins_a + wins_b
        if n == 0:
            continue
        p_value, ci_low, ci_high = binomial_test(wins_a, n)
        rows.append(
            {
                "analysis": "pairwise",
                "criterion": criterion,
                "comparison": f"{a} vs {b}",
                "system_a": a,
                "system_b": b,
                "wins_a": wins_a,
                "wins_b": wins_b,
                "ties": ties,
                "estimate": wins_a / n,
                "statistic": float(wins_a),
                "df": math.nan,
                "df2": math.nan,
                "p_value": p_value,
                "ci_low": ci_low,
                "ci_high": ci_high,
                "effect_size": math.nan,
                "n": n,
                "method": "exact binomial test (estimate = share preferring system A, ties excluded)",
            }
        )
    return pd.DataFrame(rows)


class Pairwise(StudyProtocol):
    """Pairwise preference: two stories for one prompt, which is better per criterion."""

    name = "pairwise"
    options_model = PairwiseOptions
    options_required = True
    texts_per_page = 2
    criteria = "choice"
    agreement_level = "nominal"
    summary = (
        "Pairwise preference: two systems' stories for the same prompt are shown side by side; "
        "the rater chooses one per criterion."
    )
    page_template = """\
{% if config.show_prompt and texts[0].prompt %}<p class="prompt shared-prompt"><strong>{{ texts[0].prompt }}</strong></p>{% endif %}
<div class="columns">
{% for pos in positions %}
  <section class="column">{{ m.show_text(texts[pos - 1], options.labels[pos - 1], False) }}</section>
{% endfor %}
</div>
<form method="post" action="{{ action }}">
{% for criterion in config.criteria %}
  {% set choices = [(1, options.labels[0]), (2, options.labels[1])] %}
  {% if options.allow_tie %}{% set choices = choices + [(0, options.tie_label)] %}{% endif %}
  {{ m.choice(criterion.name, criterion.question, choices, values, errors, criterion.required) }}
  {% if criterion.definition %}<p class="definition">{{ criterion.definition }}</p>{% endif %}
{% endfor %}
  <button type="submit">Submit</button>
</form>
"""
    feedback_template = """\
{% for pos in positions %}{{ m.show_text(texts[pos - 1], "Text " ~ pos, config.show_prompt) }}{% endfor %}
{% if correct %}<p class="correct">Nice! You chose the correct answer.</p>{% else %}<p class="incorrect">Not quite.</p>{% endif %}
<p>The better text: <strong>{{ options.labels[example.answer - 1] }}</strong></p>
"""

    def check(self, config: StudyConfig, problem: Problem) -> None:
        options = config.section(self.name, PairwiseOptions)
        if options is None:
            return
        where = "systems" if options.systems is not None else "pairs"
        for a, b in options.compared:
            if a == b:
                problem(("pairwise", where), f"the two systems must differ (both {a})")
        if len(set(options.compared)) != len(options.compared):
            problem(("pairwise", "pairs"), "a pair is listed twice")

    def answer_keys(self, config: StudyConfig) -> dict[str, tuple[int, ...]]:
        tie = self.options(config).allow_tie
        return {c.name: (0, 1, 2) if tie else (1, 2) for c in config.criteria}

    def build_items(
        self, config: StudyConfig, stories: Sequence[Story], excluded: set[str], problem: Problem
    ) -> list[Item]:
        options = self.options(config)
        compared = options.compared
        for pair in compared:
            check_system_pair(config, self.name, pair, stories, problem)
        wanted = {system for pair in compared for system in pair}
        groups: dict[str, dict[str, Story]] = {}
        for s in select_stories(config, stories, excluded, problem):
            if s.system in wanted:
                groups.setdefault(prompt_group(s), {}).setdefault(str(s.system), s)
        items = []
        for a, b in compared:  # one pair: the prompt is the key (as before pairs existed)
            for key, stories_of in groups.items():
                if a in stories_of and b in stories_of:
                    single = options.systems is not None
                    item_key = key if single else f"{key}|{a}|{b}"
                    texts = (text_of(stories_of[a]), text_of(stories_of[b]))
                    meta = {"system_a": a, "system_b": b}
                    if not single:  # a participant never sees two pairs of one prompt
                        meta["prompt_group"] = key
                    items.append(Item(item_key, f"{a} vs {b}", texts, meta))
        return items

    def check_training(
        self, config: StudyConfig, example: TrainingExample, loc: Loc, problem: Problem
    ) -> None:
        check_choice_training(example, (1, 2), "the better text, 1 or 2", loc, problem)

    def training_correct(
        self, study: Study, example: ResolvedTraining, answer: Mapping[str, int]
    ) -> bool | None:
        return answer.get(study.criteria[0].name) == example.answer

    def judgment_rows(
        self, study: Study, page: PageView, answers: Mapping[str, int]
    ) -> list[JudgmentRow]:
        item = page.item
        a, b = item.meta["system_a"], item.meta["system_b"]
        left_system = a if page.layout[0] == 0 else b
        rows = []
        for criterion in study.criteria:
            if criterion.name not in answers:
                continue
            choice = answers[criterion.name]
            if choice == 0:
                value, chosen = 0.5, "tie"
            else:
                index = page.layout[choice - 1]
                value, chosen = (1.0, a) if index == 0 else (0.0, b)
            extra = {
                "system_a": a,
                "system_b": b,
                "story_a": item.texts[0].id,
                "story_b": item.texts[1].id,
                "left": left_system,
                "chosen": chosen,
                "chosen_position": choice,
            }
            rows.append(JudgmentRow(item.key, criterion.name, value, item.condition, extra))
        return rows

    def wants_follow_up(self, config: StudyConfig) -> bool:
        return self.options(config).why_question is not None

    def follow_up(self, study: Study, answers: Mapping[str, float]) -> str | None:
        return cast("str | None", self.options(study.config).why_question)

    def follow_up_required(self, study: Study) -> bool:
        return bool(self.options(study.config).why_required)

    def answer_summary(self, study: Study, page: PageView, answers: Mapping[str, float]) -> str:
        options = self.options(study.config)
        said = []
        for criterion in study.criteria:
            value = answers.get(criterion.name)
            if value is None:
                continue
            if value == 0.5:
                label = options.tie_label
            else:
                label = options.labels[page.layout.index(0 if value == 1.0 else 1)]
            said.append(label if len(study.criteria) == 1 else f"{criterion.question}: {label}")
        return "; ".join(said)

    def describe(self, study: Study) -> StatementPart:
        options = self.options(study.config)
        answers = f'"{options.labels[0]}" / "{options.labels[1]}"'
        if options.allow_tie:
            answers += f' / "{options.tie_label}"'
        lines = [self.summary, "", *criteria_table(study.config, answers), ""]
        ties = "allowed" if options.allow_tie else "not allowed (forced choice)"
        pairs = "; ".join(f"`{a}` (system A) and `{b}` (system B)" for a, b in options.compared)
        lines.append(f"Systems compared: {pairs}; ties {ties}.")
        if options.why_question:
            required = "required" if options.why_required else "optional"
            lines.append(f'After each choice (free text, {required}): "{options.why_question}"')
        answered = {
            "criteria": True,
            "scale": True,
            "labels": True,
            "definitions": all(c.definition for c in study.config.criteria),
        }
        return StatementPart(lines, answered)

    def presentation(self, study: Study) -> list[str]:
        return [LEFT_RIGHT]

    def analyse(self, part: pd.DataFrame, settings: AnalysisSettings) -> ProtocolAnalysis:
        table = pairwise_preferences(part)
        tests = table[list(TEST_COLUMNS)].to_dict("records") if len(table) else []
        return ProtocolAnalysis({"pairwise": table}, tests)

    def template_context(self, study: Study) -> dict[str, Any]:
        return {"options": self.options(study.config)}
