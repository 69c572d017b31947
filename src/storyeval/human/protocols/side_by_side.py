"""``side_by_side``: a model story rated next to the human reference for the same prompt, both
on the same criteria (the calibration Karpinska et al. (2021) found necessary). Left/right is counterbalanced
over items and over the raters of an item."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from storyeval.base.yamlfile import Loc, StrictModel
from storyeval.corpus import Story, prompt_group
from storyeval.human.model import Item, Study, StudyConfig, Text, TrainingExample
from storyeval.human.protocols.base import (
    LEFT_RIGHT,
    JudgmentRow,
    PageView,
    Problem,
    StatementPart,
    check_rating_training,
    select_stories,
    text_of,
)
from storyeval.human.protocols.rating import RATING_FEEDBACK, RatingProtocol


class SideBySideOptions(StrictModel):
    """Settings of a side-by-side study: the field holding the reference shown beside the story."""

    reference_system: str = "human"
    labels: tuple[str, str] = ("Story A", "Story B")


def reference_text(story: Story, by_id: Mapping[str, Story], reference_system: str) -> Text:
    """The human reference of a machine story, as a text with a stable id.

    The id is the human story's id when the story file holds a story with the same
    ``prompt_id`` (or prompt) and the reference text; otherwise ``<story id>:reference``.
    """
    reference = story.references[0]
    prompt_id = story.extra.get("prompt_id")
    for candidate in by_id.values():
        if candidate.story.strip() != reference.strip():
            continue
        if prompt_id is None or candidate.extra.get("prompt_id", candidate.id) == prompt_id:
            return Text(
                candidate.id,
                candidate.system or reference_system,
                candidate.prompt,
                candidate.story,
            )
    return Text(f"{story.id}:reference", reference_system, story.prompt, reference)


class SideBySide(RatingProtocol):
    """Side-by-side rating: the story beside its reference, rated on each criterion."""

    name = "side_by_side"
    options_model = SideBySideOptions
    texts_per_page = 2
    summary = (
        "Side-by-side Likert rating: each model story is shown next to the human reference for "
        "the same prompt and both are rated on every criterion (the calibration recommended by "
        "Karpinska et al., 2021). Raters are not told which text is the reference."
    )
    page_template = """\
{% if config.show_prompt and texts[0].prompt %}<p class="prompt shared-prompt"><strong>{{ texts[0].prompt }}</strong></p>{% endif %}
<form method="post" action="{{ action }}">
<div class="columns">
{% for pos in positions %}
  <section class="column">
    {{ m.show_text(texts[pos - 1], labels[pos - 1], False) }}
    {% for criterion in config.criteria %}
      {{ m.likert(criterion.name ~ "@" ~ pos, criterion, values, errors) }}
    {% endfor %}
  </section>
{% endfor %}
</div>
  <button type="submit">Submit</button>
</form>
"""
    feedback_template = RATING_FEEDBACK

    def answer_keys(self, config: StudyConfig) -> dict[str, tuple[int, ...]]:
        return {
            f"{c.name}@{pos}": tuple(range(1, (c.scale or 5) + 1))
            for c in config.criteria
            for pos in (1, 2)
        }

    def build_items(
        self, config: StudyConfig, stories: Sequence[Story], excluded: set[str], problem: Problem
    ) -> list[Item]:
        by_id = {s.id: s for s in stories}
        ref_system = self.options(config).reference_system
        items = []
        for s in select_stories(config, stories, excluded, problem):
            if s.system == ref_system:
                continue  # references are shown beside the model stories, not on their own
            if not s.references:
                problem(("select",), f"story {s.id!r} has no reference to show beside it")
                continue
            ref = reference_text(s, by_id, ref_system)
            items.append(
                Item(
                    s.id, s.system or "(none)", (text_of(s), ref), {"prompt_group": prompt_group(s)}
                )
            )
        return items

    def training_texts(
        self,
        config: StudyConfig,
        texts: tuple[Text, ...],
        by_id: Mapping[str, Story],
        loc: Loc,
        problem: Problem,
    ) -> tuple[Text, ...]:
        if len(texts) != 1:
            return texts
        story = by_id.get(texts[0].id)
        if story is None or not story.references:
            problem(loc, "a side-by-side training story needs a reference in the story file")
            return texts
        return (texts[0], reference_text(story, by_id, self.options(config).reference_system))

    def check_training(
        self, config: StudyConfig, example: TrainingExample, loc: Loc, problem: Problem
    ) -> None:
        what = (
            "the reference ratings as criterion@1 (the model story, shown as Story A) and "
            "criterion@2 (the reference, Story B)"
        )
        check_rating_training(config, self.answer_keys(config), example, what, loc, problem)

    def judgment_rows(
        self, study: Study, page: PageView, answers: Mapping[str, int]
    ) -> list[JudgmentRow]:
        rows = []
        for criterion in study.criteria:
            for pos in (1, 2):
                key = f"{criterion.name}@{pos}"
                if key not in answers:
                    continue
                text = page.texts[pos - 1]
                role = "model" if text.id == page.item.texts[0].id else "reference"
                extra = {
                    "system": text.system,
                    "role": role,
                    "position": pos,
                    "pair_item": page.item.key,
                }
                rows.append(
                    JudgmentRow(
                        text.id, criterion.name, float(answers[key]), text.system or role, extra
                    )
                )
        return rows

    def template_context(self, study: Study) -> dict[str, Any]:
        return {
            "labels": self.options(study.config).labels,
            "rating_keys": lambda c: [f"{c.name}@1", f"{c.name}@2"],
        }

    def describe(self, study: Study) -> StatementPart:
        part = self.criteria_lines(study.config)
        part.lines = [self.summary, "", *part.lines]
        return part

    def presentation(self, study: Study) -> list[str]:
        return [LEFT_RIGHT]
