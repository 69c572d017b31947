"""``detection``: "Definitely human-written" ... "Definitely machine-generated" (Clark 2021,
chapter 6), then "Why did you select this rating?" or "What would you change to make it seem
more human-like?". Analysed as in Clark (2021), Table 6.1."""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, cast

import numpy as np
import pandas as pd
from pydantic import Field

from storyeval.base.errors import DegenerateInputWarning
from storyeval.base.yamlfile import Loc, StrictModel
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
    check_choice_training,
    select_stories,
    text_of,
)
from storyeval.human.tables import krippendorff_alpha

DETECTION_LABELS: tuple[str, str, str, str] = (
    "Definitely human-written",
    "Possibly human-written",
    "Possibly machine-generated",
    "Definitely machine-generated",
)
"""The 4-point scale of Clark (2021), section 6.2.1 (after Ippolito et al., 2020)."""

DETECTION_QUESTION = "What do you think the source of this text is?"
DETECTION_WHY = "Why did you select this rating?"
DETECTION_CHANGE = "What would you change to make it seem more human-like?"
COMPARISON_KEY = "machine_text"
"""The answer of a Comparison training page (Clark 2021, section 6.3): which of two texts,
1 or 2, was machine-generated."""


class DetectionOptions(StrictModel):
    """Settings of a detection study: the question, its scale and the follow-up questions."""

    human_systems: list[str] = Field(default_factory=lambda: ["human"])
    question: str = DETECTION_QUESTION
    labels: tuple[str, str, str, str] = DETECTION_LABELS
    why_question: str = DETECTION_WHY
    change_question: str = DETECTION_CHANGE
    why_for: list[int] = Field(default_factory=lambda: [1])
    explanation_required: bool = True
    prompt_in_bold: bool = True


def _truth(part: pd.DataFrame) -> Any:
    if "truth" in part and part["truth"].notna().all():
        return part["truth"].astype(str)
    return np.where(part["condition"].str.lower().eq("human"), "human", "machine")


def _scored(frame: pd.DataFrame) -> pd.DataFrame:
    data = frame.assign(truth=_truth(frame))
    data = data.assign(
        guess=np.where(data["value"] >= 3, "machine", "human"),
        confident=data["value"].isin([1.0, 4.0]),
    )
    return data.assign(correct=data["guess"] == data["truth"])


def per_rater_accuracy(frame: pd.DataFrame) -> np.ndarray:
    """Each rater's share of texts whose source they guessed right (ratings 3-4 mean
    machine), the unit of Clark's (2021) t tests."""
    if frame.empty:
        return np.array([], dtype=float)
    return _rater_accuracy(_scored(frame))


def _rater_accuracy(scored: pd.DataFrame) -> np.ndarray:
    accuracy: np.ndarray = scored.groupby("rater_id")["correct"].mean().to_numpy(dtype=float)
    return accuracy


def detection_metrics(frame: pd.DataFrame, *, tests: int | None = None) -> pd.DataFrame:
    """Clark (2021), Table 6.1: per machine system (with the human texts) and overall.

    Columns: ``condition``, ``n``, ``accuracy``, ``f1``, ``precision``, ``recall`` (machine
    class), ``alpha`` (Krippendorff, nominal, guesses binned human/machine), ``pct_human``,
    ``pct_confident`` (ratings 1 or 4), ``n_raters``, and the test of accuracy against chance
    as in Clark (2021) (one-sample t-test of per-rater accuracy against 0.5: ``statistic``,
    ``df``, ``p_value``), Bonferroni-corrected over the table's tests (``p_bonferroni``; the
    thesis' asterisks are ``p_bonferroni < 0.05`` with ``tests=15``, i.e. p < 0.00333).
    """
    from scipy.stats import ttest_1samp

    from storyeval.base.stats import bonferroni

    data = _scored(frame)
    machines = sorted(data.loc[data["truth"] == "machine", "condition"].unique())
    subsets = [("all", data)]
    if len(machines) > 1:
        for system in machines:
            subsets.append(
                (system, data[(data["truth"] == "human") | (data["condition"] == system)])
            )
    rows = []
    for label, part in subsets:
        tp = int(((part["guess"] == "machine") & (part["truth"] == "machine")).sum())
        fp = int(((part["guess"] == "machine") & (part["truth"] == "human")).sum())
        fn = int(((part["guess"] == "human") & (part["truth"] == "machine")).sum())
        precision = tp / (tp + fp) if tp + fp else math.nan
        recall = tp / (tp + fn) if tp + fn else math.nan
        f1 = (
            2 * precision * recall / (precision + recall)
            if tp and not math.isnan(precision) and not math.isnan(recall)
            else (0.0 if tp + fp + fn else math.nan)
        )
        binned = part.assign(value=(part["value"] >= 3).astype(float))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DegenerateInputWarning)
            alpha, _, _ = krippendorff_alpha(binned, level="nominal")
        per_rater = _rater_accuracy(part)
        if len(per_rater) >= 2 and np.std(per_rater) > 0:
            t = ttest_1samp(per_rater, 0.5)
            statistic, df, p_value = float(t.statistic), float(len(per_rater) - 1), float(t.pvalue)
        else:
            statistic, df, p_value = math.nan, math.nan, math.nan
        rows.append(
            {
                "condition": label,
                "n": len(part),
                "accuracy": float(part["correct"].mean()),
                "f1": f1,
                "precision": precision,
                "recall": recall,
                "alpha": alpha,
                "pct_human": 100.0 * float((part["guess"] == "human").mean()),
                "pct_confident": 100.0 * float(part["confident"].mean()),
                "n_raters": part["rater_id"].nunique(),
                "statistic": statistic,
                "df": df,
                "p_value": p_value,
                "method": "accuracy vs 0.5: one-sample t-test of per-rater accuracy",
            }
        )
    table = pd.DataFrame(rows)
    table.insert(
        table.columns.get_loc("p_value") + 1,
        "p_bonferroni",
        bonferroni(table["p_value"].tolist(), tests=tests)
        if table["p_value"].notna().any()
        else table["p_value"],
    )
    return table


class Detection(StudyProtocol):
    """Detection: was this story written by a person or a machine (Clark et al. 2021), with the reason asked."""

    name = "detection"
    options_model = DetectionOptions
    texts_per_page = 1
    criteria = "none"
    agreement_level = "nominal"
    compares_conditions = True
    asks_follow_up = True
    summary = (
        "Human-or-machine detection (Clark et al., 2021): each text is rated on a 4-point scale "
        "from 'definitely human-written' to 'definitely machine-generated', then the rater "
        "explains the answer."
    )
    page_template = """\
{% if mode == "training" and texts | length == 2 %}
<section class="notes">
  <p>Please read the two texts below, which begin with the same prompt. Choose the one you think was written by a machine.</p>
</section>
{{ m.show_text(texts[0], "Text 1", config.show_prompt, options.prompt_in_bold) }}
{{ m.show_text(texts[1], "Text 2", config.show_prompt, options.prompt_in_bold) }}
<form method="post" action="{{ action }}">
  {{ m.choice("machine_text", "Which text was written by a machine?", [(1, "Text 1"), (2, "Text 2")], values, errors) }}
  <button type="submit">Submit</button>
</form>
{% else %}
<section class="notes">
  <p>Please read the following text and answer the question below.</p>
  {% if config.show_prompt %}<p>Every text begins with human-authored text, indicated in bold. ONLY evaluate the text that follows the bold text.</p>{% endif %}
</section>
{{ m.show_text(texts[0], None, config.show_prompt, options.prompt_in_bold) }}
<form method="post" action="{{ action }}">
  {% set choices = [(1, options.labels[0]), (2, options.labels[1]), (3, options.labels[2]), (4, options.labels[3])] %}
  {{ m.choice("source", options.question, choices, values, errors) }}
  <p class="note">You cannot change your answer once you click submit.</p>
  <button type="submit">Submit</button>
</form>
{% endif %}
"""
    feedback_template = """\
{% if texts | length == 2 %}
{{ m.show_text(texts[0], "Text 1", config.show_prompt) }}
{{ m.show_text(texts[1], "Text 2", config.show_prompt) }}
{% else %}
{{ m.show_text(texts[0], None, config.show_prompt) }}
{% endif %}
{% if correct %}<p class="correct">Nice! You chose the correct answer.</p>{% else %}<p class="incorrect">Not quite.</p>{% endif %}
{% if texts | length == 2 %}
<p>The machine-generated text: <strong>Text {{ example.answer }}</strong></p>
{% else %}
<p>The correct answer: <strong>{{ options.labels[example.answer - 1] }}</strong></p>
{% endif %}
"""

    def check(self, config: StudyConfig, problem: Problem) -> None:
        bad = [v for v in self.options(config).why_for if v not in (1, 2, 3, 4)]
        if bad:
            problem(("detection", "why_for"), f"ratings must be 1-4; got {bad}")

    def answer_keys(self, config: StudyConfig) -> dict[str, tuple[int, ...]]:
        return {"source": (1, 2, 3, 4)}

    def build_items(
        self, config: StudyConfig, stories: Sequence[Story], excluded: set[str], problem: Problem
    ) -> list[Item]:
        humans = set(self.options(config).human_systems)
        items = []
        for s in select_stories(config, stories, excluded, problem):
            truth = "human" if s.system in humans else "machine"
            meta = {"prompt_group": prompt_group(s), "truth": truth}
            items.append(Item(s.id, s.system or "(none)", (text_of(s),), meta))
        truths = {i.meta["truth"] for i in items}
        if items and truths != {"human", "machine"}:
            problem(
                ("select",),
                "a detection study needs both human-written and machine-generated stories; "
                f"the selection has only {', '.join(sorted(truths))} (see detection.human_systems)",
            )
        return items

    def check_training(
        self, config: StudyConfig, example: TrainingExample, loc: Loc, problem: Problem
    ) -> None:
        count = len(example.stories or example.texts or []) or 1
        if count == 2:  # the Comparison training: a human and a machine text, same prompt
            what = "the position of the machine-generated text, 1 or 2"
            check_choice_training(example, (1, 2), what, loc, problem)
        elif count == 1:  # the Examples training
            check_choice_training(example, (1, 2, 3, 4), "the correct rating, 1-4", loc, problem)
        else:
            problem(
                loc,
                "a detection training example has one text (the Examples training) or two "
                f"(the Comparison training); got {count}",
            )

    def training_page_sizes(self, config: StudyConfig) -> tuple[int, ...]:
        return (1, 2)  # the Examples training shows one text, the Comparison training two

    def training_keys(
        self, config: StudyConfig, example: ResolvedTraining
    ) -> dict[str, tuple[int, ...]] | None:
        return {COMPARISON_KEY: (1, 2)} if len(example.texts) == 2 else None

    def training_correct(
        self, study: Study, example: ResolvedTraining, answer: Mapping[str, int]
    ) -> bool | None:
        if example.answer is None:
            return None
        if len(example.texts) == 2:
            chosen = answer.get(COMPARISON_KEY)
            return None if chosen is None else int(chosen) == int(example.answer)
        given = answer.get("source")
        if given is None:
            return None
        return (int(given) >= 3) == (int(example.answer) >= 3)

    def judgment_rows(
        self, study: Study, page: PageView, answers: Mapping[str, int]
    ) -> list[JudgmentRow]:
        text = page.texts[0]
        extra = {"system": text.system, "truth": page.item.meta.get("truth")}
        return [
            JudgmentRow(text.id, "source", float(answers["source"]), page.item.condition, extra)
        ]

    def follow_up(self, study: Study, answers: Mapping[str, float]) -> str | None:
        options = self.options(study.config)
        rating = int(answers.get("source", 0))
        question = options.why_question if rating in options.why_for else options.change_question
        return cast("str | None", question)

    def follow_up_required(self, study: Study) -> bool:
        return bool(self.options(study.config).explanation_required)

    def describe(self, study: Study) -> StatementPart:
        det = self.options(study.config)
        required = "required" if det.explanation_required else "optional"
        humans = ", ".join(f"`{s}`" for s in det.human_systems)
        lines = [
            self.summary,
            "",
            f'Question: "{det.question}"',
            "",
            *(f"{i}. {label}" for i, label in enumerate(det.labels, start=1)),
            "",
            f'Follow-up (free text, {required}): "{det.why_question}" after answer(s) '
            f'{", ".join(map(str, det.why_for))}; otherwise "{det.change_question}".',
            f"Human-written texts: systems {humans}; every other system counts as machine.",
        ]
        return StatementPart(
            lines, {"criteria": True, "scale": True, "labels": True, "definitions": True}
        )

    def agreement_values(self, part: pd.DataFrame) -> tuple[pd.DataFrame, str]:
        binned = part.assign(value=(part["value"] >= 3).astype(float))
        return binned, "krippendorff_alpha (nominal, human/machine)"

    def analyse(self, part: pd.DataFrame, settings: AnalysisSettings) -> ProtocolAnalysis:
        table = detection_metrics(part)
        tests = [
            {
                "analysis": "detection",
                "criterion": "source",
                "comparison": f"accuracy ({row['condition']}) vs chance 0.5",
                "estimate": row["accuracy"],
                "statistic": row["statistic"],
                "df": row["df"],
                "df2": math.nan,
                "p_value": row["p_value"],
                "ci_low": math.nan,
                "ci_high": math.nan,
                "effect_size": math.nan,
                "n": row["n"],
                "method": row["method"],
            }
            for _, row in table.iterrows()
        ]
        return ProtocolAnalysis({"detection": table}, tests)

    def template_context(self, study: Study) -> dict[str, Any]:
        return {"options": self.options(study.config)}
