"""``spans``: raters mark the sentences of a story that have a problem, each with a label from
the study's error taxonomy (built in: inconsistency, incoherence, repetition, factual error,
style), in the manner of the error-annotation studies of generated text (Dou et al. 2022,
Scarecrow; Goyal et al. 2022, SNaC). The unit is the sentence, so the page needs no
JavaScript (the study server sends none): one drop-down per sentence, a confirmation that the
whole story was read.

Judgments per story and rater: the number of sentences marked with each label (criterion =
the label) and ``flagged_share`` with the spans (character offsets) in its extra fields; the
analysis adds span agreement (overlap F1, unit alpha per label) and marks per system. An LLM
judge writes the same records (``storyeval judge --rubric spans``), so
:func:`storyeval.meta.spans.compare_spans` compares it with people span by span.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd
from pydantic import Field, field_validator

from storyeval.base.yamlfile import Loc, StrictModel, check_name
from storyeval.corpus import Story, prompt_group
from storyeval.human.model import Item, ResolvedTraining, Study, StudyConfig, TrainingExample
from storyeval.human.protocols.base import (
    AnalysisSettings,
    JudgmentRow,
    PageView,
    Problem,
    ProtocolAnalysis,
    StatementPart,
    StudyProtocol,
    cell,
    select_stories,
    text_of,
)
from storyeval.meta.spans import (
    NONE,
    SHARE,
    STORY_TAXONOMY,
    span_agreement,
    span_rows,
    spans_frame,
    story_units,
)

CONFIRM_KEY = "confirm"


class SpanLabel(StrictModel):
    """One label of the error taxonomy: a name (a criterion of the judgments) and what it
    means (shown to raters)."""

    name: str
    definition: str = Field(min_length=1)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if value in (NONE, SHARE):
            raise ValueError(f"{value!r} is reserved")
        return check_name(value, "a label name")


def _story_taxonomy() -> list[SpanLabel]:
    return [SpanLabel(name=name, definition=text) for name, text in STORY_TAXONOMY]


class SpansOptions(StrictModel):
    """The ``spans:`` section: the taxonomy, the question, the confirmation and the most
    sentences a story may have (the page has one answer per sentence)."""

    taxonomy: list[SpanLabel] = Field(default_factory=_story_taxonomy, min_length=1, max_length=9)
    question: str = "Mark every sentence that has a problem, and choose the kind of problem."
    confirm: str = "I read the whole story and marked every problem I found."
    max_units: int = Field(
        default=60, ge=1, le=150
    )  # one form field per unit (the server takes 200)


class Spans(StudyProtocol):
    """Span annotation: each sentence of a story marked with an error label or left unmarked."""

    name = "spans"
    options_model = SpansOptions
    options_required = False
    texts_per_page = 1
    criteria = "none"
    agreement_level = "interval"  # on the counts per story; spans in analyse
    compares_conditions = True
    summary = (
        "Span annotation (after Dou et al., 2022, and Goyal et al., 2022): each story is shown "
        "sentence by sentence; the rater marks every sentence that has a problem with a label "
        "from an error taxonomy, and confirms having read the whole story."
    )
    page_template = """\
{% if config.show_prompt and texts[0].prompt %}<p class="prompt"><strong>{{ texts[0].prompt }}</strong></p>{% endif %}
<section class="notes"><p>{{ options.question }}</p>
<dl class="taxonomy">{% for label in options.taxonomy %}<dt>{{ label.name | replace("_", " ") }}</dt><dd>{{ label.definition }}</dd>{% endfor %}</dl></section>
<form method="post" action="{{ action }}">
<ol class="units">
{% for unit in units(texts[0].story) %}{% set key = "u" ~ unit.index %}
  <li class="unit{% if key in errors %} error{% endif %}"><span class="unit-text">{{ unit.text }}</span>
  <select name="{{ key }}" aria-label="Problem in sentence {{ unit.index }}">
    <option value="0">no problem</option>
    {% for label in options.taxonomy %}<option value="{{ loop.index }}"{% if values.get(key) == loop.index | string %} selected{% endif %}>{{ label.name | replace("_", " ") }}</option>{% endfor %}
  </select></li>
{% endfor %}
</ol>
<p class="{% if 'confirm' in errors %}error{% endif %}"><label><input type="checkbox" name="confirm" value="1" required{% if values.get('confirm') == '1' %} checked{% endif %}> {{ options.confirm }}</label></p>
<button type="submit">Submit</button>
</form>
"""
    feedback_template = """\
<ol class="units">
{% for unit in units(texts[0].story) %}{% set marked = example.answers.get("u" ~ unit.index, 0) if example.answers else 0 %}
  <li class="unit"><span class="unit-text">{{ unit.text }}</span> <strong>{{ options.taxonomy[marked - 1].name | replace("_", " ") if marked else "no problem" }}</strong></li>
{% endfor %}
</ol>
{% if example.explanation %}<p>{{ example.explanation }}</p>{% endif %}
"""

    def labels(self, config: StudyConfig) -> list[str]:
        """The taxonomy's label names, in answer order (answer ``k`` is label ``k``)."""
        return [label.name for label in self.options(config).taxonomy]

    def answer_keys(self, config: StudyConfig) -> dict[str, tuple[int, ...]]:
        options = self.options(config)
        values = tuple(range(len(options.taxonomy) + 1))
        keys = {f"u{i}": values for i in range(1, options.max_units + 1)}
        keys[CONFIRM_KEY] = (1,)
        return keys

    def required_keys(self, config: StudyConfig) -> set[str]:
        return {CONFIRM_KEY}  # an unmarked sentence has no problem

    def check(self, config: StudyConfig, problem: Problem) -> None:
        names = [label.name for label in self.options(config).taxonomy]
        for i, name in enumerate(names):
            if names.count(name) > 1:
                problem(("spans", "taxonomy", i, "name"), f"label {name!r} is used twice")

    def build_items(
        self, config: StudyConfig, stories: Sequence[Story], excluded: set[str], problem: Problem
    ) -> list[Item]:
        most = self.options(config).max_units
        items = []
        for story in select_stories(config, stories, excluded, problem):
            n_units = len(story_units(text_of(story).story))
            if n_units > most:
                problem(
                    ("spans", "max_units"),
                    f"story {story.id} has {n_units} sentences, more than max_units ({most})",
                )
            meta = {"prompt_group": prompt_group(story)}
            items.append(Item(story.id, story.system or "(none)", (text_of(story),), meta))
        return items

    def check_training(
        self, config: StudyConfig, example: TrainingExample, loc: Loc, problem: Problem
    ) -> None:
        keys = self.answer_keys(config)
        for key, value in (example.answers or {}).items():
            if key not in keys or key == CONFIRM_KEY:
                problem((*loc, "answers", key), "expected sentence numbers u1, u2... with labels")
            elif value not in keys[key]:
                problem((*loc, "answers", key), f"must be 0 (no problem) to {max(keys[key])}")

    def training_correct(
        self, study: Study, example: ResolvedTraining, answer: Mapping[str, int]
    ) -> bool | None:
        if example.answers is None:
            return None
        wanted = {k: v for k, v in example.answers.items() if v}
        given = {k: v for k, v in answer.items() if k != CONFIRM_KEY and v}
        return wanted == given

    def judgment_rows(
        self, study: Study, page: PageView, answers: Mapping[str, int]
    ) -> list[JudgmentRow]:
        text = page.texts[0]
        names = self.labels(study.config)
        units = story_units(text.story)
        marked = {
            int(key[1:]): names[value - 1]
            for key, value in answers.items()
            if key.startswith("u") and value > 0 and int(key[1:]) <= len(units)
        }
        return [
            JudgmentRow(
                text.id, criterion, value, page.item.condition, {"system": text.system, **extra}
            )
            for criterion, value, extra in span_rows(units, marked, names)
        ]

    def describe(self, study: Study) -> StatementPart:
        options = self.options(study.config)
        lines = [
            self.summary,
            "",
            f'Instruction: "{options.question}" Confirmation: "{options.confirm}"',
            "",
            "| label | definition shown |",
            "|---|---|",
            *(f"| {cell(label.name)} | {cell(label.definition)} |" for label in options.taxonomy),
            "",
            "Unit: the sentence (pysbd); one answer per sentence, 'no problem' by default. "
            "Judgments: sentences marked per label and the share of sentences marked, per "
            "story and rater; agreement: overlap F1 of character spans and Krippendorff's "
            "alpha on the sentences, per label.",
        ]
        return StatementPart(
            lines, {"criteria": True, "scale": True, "labels": True, "definitions": True}
        )

    def analyse(self, part: pd.DataFrame, settings: AnalysisSettings) -> ProtocolAnalysis:
        frame = spans_frame(part)
        labels = sorted(set(part["criterion"]) - {SHARE})
        agreement = span_agreement(frame, labels=labels, n_boot=settings.n_boot, seed=settings.seed)
        return ProtocolAnalysis(
            {"spans_agreement": agreement, "spans_by_system": marks_by_system(frame, labels)}
        )

    def template_context(self, study: Study) -> dict[str, Any]:
        return {"options": self.options(study.config), "units": story_units}


def marks_by_system(frame: pd.DataFrame, labels: Sequence[str]) -> pd.DataFrame:
    """Per system and label (and ``any``): stories, annotations, sentences marked per
    annotated story and the share of sentences marked."""
    rows = []
    for system, group in frame.groupby(frame["system"].fillna("(none)"), sort=True):
        annotations = group.groupby(["item_id", "rater_id"]).ngroups
        for label in [*labels, "any"]:
            marked = group["label"] != NONE if label == "any" else group["label"] == label
            rows.append(
                {
                    "system": system,
                    "label": label,
                    "stories": int(group["item_id"].nunique()),
                    "annotations": annotations,
                    "marked_per_story": float(marked.sum()) / annotations if annotations else 0.0,
                    "share_marked": float(marked.mean()) if len(group) else 0.0,
                }
            )
    return pd.DataFrame(rows)
