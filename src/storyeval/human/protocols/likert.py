"""``likert``: each story rated on its own on named criteria, each with its exact question
wording, definition, a 5- or 7-point scale and endpoint or point labels (Karpinska et al. 2021: grammar,
coherence, likability, relevance on 5 points; Callan and Foster (2023): Q1-Q4 on 7 points)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from storyeval.base.yamlfile import Loc
from storyeval.corpus import Story, prompt_group
from storyeval.human.model import Item, Study, StudyConfig, TrainingExample
from storyeval.human.protocols.base import (
    JudgmentRow,
    PageView,
    Problem,
    StatementPart,
    check_rating_training,
    select_stories,
    text_of,
)
from storyeval.human.protocols.rating import RATING_FEEDBACK, RatingProtocol


class Likert(RatingProtocol):
    """Likert ratings of one story per page, on each criterion's scale."""

    name = "likert"
    texts_per_page = 1
    summary = (
        "Likert-scale rating: each story is shown on its own (with its prompt) and rated on "
        "every criterion."
    )
    page_template = """\
{{ m.show_text(texts[0], None, config.show_prompt) }}
<form method="post" action="{{ action }}">
{% for criterion in config.criteria %}
  {{ m.likert(criterion.name, criterion, values, errors) }}
{% endfor %}
  <button type="submit">Submit</button>
</form>
"""
    feedback_template = RATING_FEEDBACK

    def answer_keys(self, config: StudyConfig) -> dict[str, tuple[int, ...]]:
        return {c.name: tuple(range(1, (c.scale or 5) + 1)) for c in config.criteria}

    def build_items(
        self, config: StudyConfig, stories: Sequence[Story], excluded: set[str], problem: Problem
    ) -> list[Item]:
        return [
            Item(s.id, s.system or "(none)", (text_of(s),), {"prompt_group": prompt_group(s)})
            for s in select_stories(config, stories, excluded, problem)
        ]

    def check_training(
        self, config: StudyConfig, example: TrainingExample, loc: Loc, problem: Problem
    ) -> None:
        check_rating_training(
            config,
            self.answer_keys(config),
            example,
            "the reference ratings by criterion",
            loc,
            problem,
        )

    def judgment_rows(
        self, study: Study, page: PageView, answers: Mapping[str, int]
    ) -> list[JudgmentRow]:
        text = page.texts[0]
        return [
            JudgmentRow(
                text.id,
                c.name,
                float(answers[c.name]),
                page.item.condition,
                {"system": text.system},
            )
            for c in study.criteria
            if c.name in answers
        ]

    def template_context(self, study: Study) -> dict[str, Any]:
        return {"labels": ("Story A",), "rating_keys": lambda c: [c.name]}

    def describe(self, study: Study) -> StatementPart:
        part = self.criteria_lines(study.config)
        part.lines = [self.summary, "", *part.lines]
        return part
