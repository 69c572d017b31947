"""``best_worst``: best-worst scaling (Louviere et al. 2015; Kiritchenko & Mohammad 2017). A page
shows a tuple of stories (4 by default); for each criterion the rater picks the best and the
worst. Each story appears in several tuples; scores are counts (``(best - worst) /
appearances``, in [-1, 1]) and Bradley-Terry strengths fitted on the comparisons each answer
implies (the best beats every other story of the tuple, every other story beats the worst).
Reliability is the split-half correlation of the story scores (Kiritchenko & Mohammad 2017).

This protocol is the proof that a new protocol is one module: its study-file section, item
design, answers, judgments, statement text, analysis and page all live here.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from pydantic import Field, model_validator

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
    criteria_table,
    select_stories,
    text_of,
)


class BestWorstOptions(StrictModel):
    """``tuple_size`` stories per page; each story appears in ``appearances`` tuples (drawn at
    random, seeded, never two stories of one prompt in a tuple when avoidable)."""

    tuple_size: int = Field(default=4, ge=3, le=6)
    appearances: int = Field(default=4, ge=1, le=32)
    best_label: str = "Best"
    worst_label: str = "Worst"
    seed: int = 0

    @model_validator(mode="after")
    def _labels(self) -> BestWorstOptions:
        if self.best_label == self.worst_label:
            raise ValueError("best_label and worst_label must differ")
        return self


def design_tuples(
    ids: Sequence[str],
    *,
    tuple_size: int,
    appearances: int,
    seed: int,
    group: Mapping[str, str] | None = None,
) -> list[tuple[str, ...]]:
    """Tuples in which every id appears ``appearances`` times (Kiritchenko & Mohammad's random
    design: each round shuffles the ids and cuts them into tuples; the last tuple of a round is
    filled with ids of other tuples). Ids sharing a ``group`` (a prompt) are kept apart: each
    tuple takes the next ids of the shuffled round whose group it does not hold yet.

    >>> tuples = design_tuples([f"s{i}" for i in range(8)], tuple_size=4, appearances=2, seed=0)
    >>> len(tuples), sorted({len(set(t)) for t in tuples})
    (4, [4])
    """
    if len(ids) < tuple_size:
        raise ValueError(f"best-worst tuples of {tuple_size} need at least {tuple_size} stories")
    rng = random.Random(seed)
    groups = dict(group or {})
    tuples: list[tuple[str, ...]] = []
    for _ in range(appearances):
        pool = list(ids)
        rng.shuffle(pool)
        while pool:
            chosen: list[str] = []
            for candidate in list(pool):
                if groups.get(candidate, candidate) not in {groups.get(c, c) for c in chosen}:
                    chosen.append(candidate)
                    pool.remove(candidate)
                    if len(chosen) == tuple_size:
                        break
            if len(chosen) < tuple_size and pool:  # only clashing ids are left in the round
                while pool and len(chosen) < tuple_size:
                    chosen.append(pool.pop(0))
            if len(chosen) < tuple_size:  # the round's last tuple: fill from other ids
                held = {groups.get(c, c) for c in chosen}
                others = [i for i in ids if i not in chosen]
                rng.shuffle(others)
                others.sort(key=lambda i: groups.get(i, i) in held)
                chosen += others[: tuple_size - len(chosen)]
            tuples.append(tuple(chosen))
    return tuples


def _story(part: pd.DataFrame) -> pd.Series:
    """The story of each judgment (the ``story`` field; ``item_id`` in files without it)."""
    if "story" in part:
        return part["story"].where(part["story"].notna(), part["item_id"]).astype(str)
    return part["item_id"].astype(str)


def best_worst_counts(part: pd.DataFrame, *, by: str) -> pd.DataFrame:
    """Best-worst counting per criterion and ``by`` (``condition`` for systems, ``story``
    for stories): appearances, times best, times worst, ``score = (best - worst) / n``."""
    if by == "story":
        part = part.assign(story=_story(part))
    grouped = part.groupby(["criterion", by], sort=True)["value"]
    table = grouped.agg(
        n="size", best=lambda v: int((v > 0).sum()), worst=lambda v: int((v < 0).sum())
    ).reset_index()
    table["score"] = (table["best"] - table["worst"]) / table["n"]
    return table


def implied_comparisons(part: pd.DataFrame, *, by: str = "condition") -> list[tuple[str, str, str]]:
    """The pairwise comparisons best-worst answers imply: on each answered tuple, the best
    story beats every other, and every story but the best beats the worst. Comparisons of a
    unit with itself (two stories of one system) are left out."""
    comparisons: list[tuple[str, str, str]] = []
    for _, page in part.groupby(["page", "criterion"], sort=False):
        best = page.loc[page["value"] > 0, by]
        worst = page.loc[page["value"] < 0, by]
        if best.empty or worst.empty:
            continue
        winner, loser = str(best.iloc[0]), str(worst.iloc[0])
        others = [str(v) for v in page.loc[page["value"] == 0, by]]
        for other in [*others, loser]:
            if other != winner:
                comparisons.append((winner, other, winner))
        for other in others:
            if other != loser:
                comparisons.append((other, loser, other))
    return comparisons


def split_half_reliability(
    part: pd.DataFrame, *, trials: int = 100, seed: int = 0
) -> tuple[float, float, int]:
    """Split-half reliability of story scores (Kiritchenko & Mohammad 2017): the raters of
    each tuple are split at random into two halves, story scores are computed from each half,
    and the Spearman correlation of the two score sets is averaged over ``trials`` splits.
    Returns the mean correlation, its Spearman-Brown correction to the full set of raters, and
    the number of stories compared (NaN when fewer than 2 tuples have 2 raters)."""
    from scipy.stats import spearmanr

    pages = part[["item_key", "rater_id"]].drop_duplicates()
    multi = pages.groupby("item_key")["rater_id"].nunique()
    keys = multi[multi >= 2].index
    if len(keys) < 2:
        return math.nan, math.nan, 0
    data = part[part["item_key"].isin(keys)].assign(story=lambda d: _story(d))
    raters = {k: sorted(g["rater_id"].unique()) for k, g in data.groupby("item_key")}
    rng = np.random.default_rng(seed)
    values = []
    n_items = 0
    for _ in range(trials):
        half = {}
        for key, ids in raters.items():
            shuffled = list(rng.permutation(ids))
            half.update({(key, r): i % 2 for i, r in enumerate(shuffled)})
        side = [half[(k, r)] for k, r in zip(data["item_key"], data["rater_id"], strict=True)]
        marked = data.assign(half=side)
        scores = [marked[marked["half"] == h].groupby("item_id")["value"].mean() for h in (0, 1)]
        joined = pd.concat(scores, axis=1, join="inner").dropna()
        if len(joined) < 3 or joined.iloc[:, 0].nunique() < 2 or joined.iloc[:, 1].nunique() < 2:
            continue
        values.append(float(spearmanr(joined.iloc[:, 0], joined.iloc[:, 1]).statistic))
        n_items = len(joined)
    if not values:
        return math.nan, math.nan, n_items
    mean = float(np.mean(values))
    corrected = 2 * mean / (1 + mean) if mean > -1 else math.nan
    return mean, corrected, n_items


def bradley_terry_table(part: pd.DataFrame, settings: AnalysisSettings) -> pd.DataFrame:
    """Bradley-Terry strengths of the systems per criterion, from the implied comparisons,
    with percentile bootstrap intervals over tuples (pages)."""
    from storyeval.base.stats import percentile_interval
    from storyeval.meta.bradley_terry import bradley_terry, count_comparisons

    rows = []
    for criterion, crit in part.groupby("criterion", sort=True):
        systems = sorted(crit["condition"].unique())
        comparisons = implied_comparisons(crit)
        if len(systems) < 2 or not comparisons:
            continue
        fit = bradley_terry(count_comparisons(comparisons, systems=systems), ties="drop")
        pages = crit["page"].unique()
        by_page = {p: implied_comparisons(g) for p, g in crit.groupby("page", sort=False)}
        rng = np.random.default_rng(settings.seed)
        replicates = []
        for _ in range(settings.n_boot):
            drawn = rng.choice(pages, size=len(pages), replace=True)
            sample = [c for p in drawn for c in by_page[p]]
            try:
                counts = count_comparisons(sample, systems=systems)
                replicates.append(
                    [
                        bradley_terry(counts, ties="drop", prior=fit.prior or 1e-6).strengths[s]
                        for s in systems
                    ]
                )
            except ValueError:
                continue
        matrix = np.asarray(replicates, dtype=float)
        for j, system in enumerate(systems):
            low, high = (
                percentile_interval(matrix[:, j], confidence=0.95)
                if len(matrix)
                else (math.nan, math.nan)
            )
            rows.append(
                {
                    "criterion": criterion,
                    "system": system,
                    "method": "bradley-terry",
                    "estimate": fit.strengths[system],
                    "ci_low": low,
                    "ci_high": high,
                    "n": fit.n,
                }
            )
    return pd.DataFrame(
        rows, columns=["criterion", "system", "method", "estimate", "ci_low", "ci_high", "n"]
    )


class BestWorst(StudyProtocol):
    """Best-worst scaling: four stories, the best and the worst per criterion (counts and Bradley-Terry strengths in the analysis)."""

    name = "best_worst"
    options_model = BestWorstOptions
    texts_per_page = 4
    criteria = "choice"
    agreement_level = None  # reliability is split-half (see analyse)
    groups_by_prompt = False
    summary = (
        "Best-worst scaling (Louviere et al., 2015; Kiritchenko and Mohammad, 2017): a tuple of "
        "stories is shown; for each criterion the rater picks the best and the worst story."
    )
    page_template = """\
<div class="columns{% if positions | length > 2 %} three{% endif %}">
{% for pos in positions %}
  <section class="column">{{ m.show_text(texts[pos - 1], "Story " ~ pos, config.show_prompt) }}</section>
{% endfor %}
</div>
<form method="post" action="{{ action }}">
{% for criterion in config.criteria %}
  <fieldset class="criterion{% if (criterion.name ~ ':best') in errors or (criterion.name ~ ':worst') in errors %} error{% endif %}">
    <legend>{{ criterion.question }}</legend>
    {% if criterion.definition %}<p class="definition">{{ criterion.definition }}</p>{% endif %}
    {% if (criterion.name ~ ':best') in errors or (criterion.name ~ ':worst') in errors %}<p class="error-text">Please choose one best and one other, worst story.</p>{% endif %}
    <table class="best-worst">
      <tr><th></th>{% for pos in positions %}<th>Story {{ pos }}</th>{% endfor %}</tr>
      {% for role, label in (("best", options.best_label), ("worst", options.worst_label)) %}
      {% set key = criterion.name ~ ":" ~ role %}
      <tr><th>{{ label }}</th>{% for pos in positions %}<td><input type="radio" name="{{ key }}" value="{{ pos }}" aria-label="{{ label }}: Story {{ pos }}"{% if values.get(key) == pos | string %} checked{% endif %}{% if criterion.required %} required{% endif %}></td>{% endfor %}</tr>
      {% endfor %}
    </table>
  </fieldset>
{% endfor %}
  <button type="submit">Submit</button>
</form>
"""
    feedback_template = """\
{% for pos in positions %}{{ m.show_text(texts[pos - 1], "Story " ~ pos, config.show_prompt) }}{% endfor %}
<p>Best: <strong>Story {{ example.answers.get(config.criteria[0].name ~ ":best", "-") }}</strong>;
worst: <strong>Story {{ example.answers.get(config.criteria[0].name ~ ":worst", "-") }}</strong>.</p>
"""

    def page_size(self, config: StudyConfig) -> int:
        return int(self.options(config).tuple_size)

    def answer_keys(self, config: StudyConfig) -> dict[str, tuple[int, ...]]:
        positions = tuple(range(1, self.page_size(config) + 1))
        return {
            f"{c.name}:{role}": positions for c in config.criteria for role in ("best", "worst")
        }

    def answer_problems(self, config: StudyConfig, answers: Mapping[str, int]) -> list[str]:
        problems = []
        for c in config.criteria:
            best, worst = answers.get(f"{c.name}:best"), answers.get(f"{c.name}:worst")
            if best is not None and best == worst:
                problems += [f"{c.name}:best", f"{c.name}:worst"]
            elif (best is None) != (worst is None):
                problems.append(f"{c.name}:{'worst' if worst is None else 'best'}")
        return problems

    def check(self, config: StudyConfig, problem: Problem) -> None:
        for i, c in enumerate(config.criteria):
            if c.scale is not None or c.labels is not None:
                problem(
                    ("criteria", i),
                    "a best-worst criterion is a choice within a tuple: remove 'scale' and 'labels'",
                )

    def layout(
        self, item: Item, item_index: int, replicate: int, rng: random.Random
    ) -> tuple[int, ...]:
        order = list(range(len(item.texts)))
        rng.shuffle(order)
        return tuple(order)

    def build_items(
        self, config: StudyConfig, stories: Sequence[Story], excluded: set[str], problem: Problem
    ) -> list[Item]:
        options = self.options(config)
        selected = select_stories(config, stories, excluded, problem)
        if len(selected) < options.tuple_size:
            problem(
                ("best_worst", "tuple_size"),
                f"tuples of {options.tuple_size} need at least that many stories; the selection "
                f"has {len(selected)}",
            )
            return []
        by_id = {s.id: s for s in selected}
        tuples = design_tuples(
            [s.id for s in selected],
            tuple_size=options.tuple_size,
            appearances=options.appearances,
            seed=options.seed,
            group={s.id: prompt_group(s) for s in selected},
        )
        width = max(4, len(str(len(tuples))))
        return [
            Item(
                f"tuple-{k + 1:0{width}d}",
                "best-worst",
                tuple(text_of(by_id[i]) for i in ids),
                {"systems": [by_id[i].system for i in ids]},
            )
            for k, ids in enumerate(tuples)
        ]

    def check_training(
        self, config: StudyConfig, example: TrainingExample, loc: Loc, problem: Problem
    ) -> None:
        keys = self.answer_keys(config)
        if example.answers is None:
            problem((*loc, "answers"), "required: the best and worst positions, e.g. quality:best")
            return
        for key, value in example.answers.items():
            if key not in keys:
                problem(
                    (*loc, "answers", key), f"unknown answer {key!r}; expected one of {list(keys)}"
                )
            elif value not in keys[key]:
                problem((*loc, "answers", key), f"must be a position 1-{self.page_size(config)}")
        for key in self.answer_problems(config, example.answers):
            problem((*loc, "answers", key), "best and worst must be two different stories")

    def training_correct(
        self, study: Study, example: ResolvedTraining, answer: Mapping[str, int]
    ) -> bool | None:
        if not example.answers:
            return None
        return all(answer.get(k) == v for k, v in example.answers.items())

    def judgment_rows(
        self, study: Study, page: PageView, answers: Mapping[str, int]
    ) -> list[JudgmentRow]:
        rows = []
        ids = [t.id for t in page.item.texts]
        for criterion in study.criteria:
            best = answers.get(f"{criterion.name}:best")
            worst = answers.get(f"{criterion.name}:worst")
            if best is None or worst is None:
                continue
            for position, text in enumerate(page.texts, start=1):
                value = 1.0 if position == best else (-1.0 if position == worst else 0.0)
                role = {1.0: "best", -1.0: "worst"}.get(value, "neither")
                extra = {
                    "story": text.id,
                    "system": text.system,
                    "item_key": page.item.key,
                    "position": position,
                    "role": role,
                    "tuple": ids,
                }
                # a story appears in several tuples, maybe twice for one rater: the judged
                # unit is the story within the tuple
                item_id = f"{page.item.key}:{text.id}"
                rows.append(JudgmentRow(item_id, criterion.name, value, text.system, extra))
        return rows

    def describe(self, study: Study) -> StatementPart:
        options = self.options(study.config)
        answers = f'"{options.best_label}" and "{options.worst_label}" among the tuple'
        lines = [
            self.summary,
            "",
            *criteria_table(study.config, answers),
            "",
            f"Tuples of {options.tuple_size} stories; each story appears in {options.appearances} "
            f"tuples (random design, seed {options.seed}; stories continuing one prompt kept "
            "apart where possible). Scores: best-worst counts and Bradley-Terry strengths of "
            "the implied comparisons; reliability: split-half correlation.",
        ]
        answered = {
            "criteria": True,
            "scale": True,
            "labels": True,
            "definitions": all(c.definition for c in study.config.criteria),
        }
        return StatementPart(lines, answered)

    def presentation(self, study: Study) -> list[str]:
        return ["The order of the stories in a tuple is shuffled for each rater."]

    def analyse(self, part: pd.DataFrame, settings: AnalysisSettings) -> ProtocolAnalysis:
        systems = best_worst_counts(part, by="condition").rename(columns={"condition": "system"})
        stories = best_worst_counts(part, by="story")
        strengths = bradley_terry_table(part, settings)
        tests = []
        for criterion, crit in part.groupby("criterion", sort=True):
            mean, corrected, n = split_half_reliability(crit, seed=settings.seed)
            tests.append(
                {
                    "analysis": "best_worst",
                    "criterion": criterion,
                    "comparison": "split-half reliability of story scores",
                    "estimate": mean,
                    "statistic": corrected,
                    "df": math.nan,
                    "df2": math.nan,
                    "p_value": math.nan,
                    "ci_low": math.nan,
                    "ci_high": math.nan,
                    "effect_size": math.nan,
                    "n": n,
                    "method": "Spearman correlation of half-sample story scores, mean of 100 "
                    "random splits (statistic: Spearman-Brown corrected)",
                }
            )
        tables = {
            "best_worst": systems,
            "best_worst_stories": stories,
            "best_worst_bradley_terry": strengths,
        }
        return ProtocolAnalysis(tables, tests)

    def template_context(self, study: Study) -> dict[str, Any]:
        return {"options": self.options(study.config)}
