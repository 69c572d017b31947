"""``triangle``: the NLG triangle test (sensory analysis, ISO 4120; González Corbelle et al. (2020)). Two texts by one
subject and one by the other, in the six orders balanced across judges; forced choice of the
odd one out. Each triad is judged once."""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import pandas as pd
from pydantic import Field

from storyeval.base.yamlfile import Loc, StrictModel
from storyeval.corpus import Story, prompt_group
from storyeval.human.model import (
    Item,
    ResolvedTraining,
    Study,
    StudyConfig,
    Text,
    TrainingExample,
)
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

TRIANGLE_QUESTION = "Select the text you think has been written by a different subject:"


class TrianglePlanSpec(StrictModel):
    """The planned triangle test: risks, proportion of distinguishers and test type."""

    alpha: float = Field(gt=0, lt=1)
    beta: float = Field(gt=0, lt=1)
    pd: float = Field(gt=0, lt=1)


class TriangleOptions(StrictModel):
    """Settings of a triangle study: the two conditions and the plan."""

    systems: tuple[str, str]
    test: Literal["difference", "similarity"] = "difference"
    judges: int | None = Field(default=None, ge=1)
    plan: TrianglePlanSpec | None = None
    question: str = TRIANGLE_QUESTION
    labels: tuple[str, str, str] = ("Text 1", "Text 2", "Text 3")


def triangle_evaluations(config: StudyConfig) -> int:
    """Number of triads (evaluations) a triangle study collects: ``judges``, or the number its
    plan needs.

    Raises
    ------
    ValueError
        If the study is not a triangle study (or, for a configuration built without
        validation, gives neither judges nor a plan).
    """
    from storyeval.human.triangle_stats import judges_needed

    options = config.section("triangle", TriangleOptions)
    if options is None:
        raise ValueError(
            f"study {config.name!r} is a {config.protocol} study; the number of triads is "
            "defined for triangle studies only"
        )
    if options.judges is not None:
        return options.judges
    if options.plan is None:
        raise ValueError(f"study {config.name!r}: the triangle block needs judges or a plan")
    return judges_needed(options.plan.alpha, options.plan.beta, options.plan.pd)


def triangle_results(
    frame: pd.DataFrame,
    *,
    alpha: float = 0.05,
    beta: float | None = None,
    pd_max: float | None = None,
) -> pd.DataFrame:
    """The triangle test per system pair (see :func:`storyeval.human.triangle_stats.analyse`)."""
    from storyeval.human.triangle_stats import analyse

    rows = []
    for condition, part in frame.groupby("condition", sort=True):
        n = len(part)
        correct = int((part["value"] == 1.0).sum())
        result = analyse(n, correct, alpha=alpha, beta=beta, pd=pd_max)
        record = result.to_dict()
        record.pop("notes")
        record.pop("signature")
        orders = part["order"].value_counts().to_dict() if "order" in part else {}
        rows.append(
            {
                "condition": condition,
                **record,
                "order_counts": ", ".join(f"{k}:{v}" for k, v in sorted(orders.items())),
                "n_judges": part["rater_id"].nunique(),
                "notes": "; ".join(result.notes),
            }
        )
    return pd.DataFrame(rows)


class Triangle(StudyProtocol):
    """Triangle test: three stories, two from one condition; which one is different?"""

    name = "triangle"
    options_model = TriangleOptions
    options_required = True
    texts_per_page = 3
    criteria = "none"
    agreement_level = None
    groups_by_prompt = False
    summary = (
        "NLG triangle test (sensory analysis, ISO 4120): three texts, two by one author and one "
        "by another; the judge must pick the odd one out (forced choice)."
    )
    page_template = """\
<p class="notes">Two of these three texts were written by the same author and one by a different author. Read them as often as you need, then choose one, even if you are not sure.</p>
<div class="columns three">
{% for pos in positions %}
  <section class="column">{{ m.show_text(texts[pos - 1], options.labels[pos - 1], config.show_prompt) }}</section>
{% endfor %}
</div>
<form method="post" action="{{ action }}">
  {{ m.choice("odd", options.question, [(1, options.labels[0]), (2, options.labels[1]), (3, options.labels[2])], values, errors) }}
  <button type="submit">Submit</button>
</form>
"""
    feedback_template = """\
{% for pos in positions %}{{ m.show_text(texts[pos - 1], "Text " ~ pos, config.show_prompt) }}{% endfor %}
{% if correct %}<p class="correct">Nice! You chose the correct answer.</p>{% else %}<p class="incorrect">Not quite.</p>{% endif %}
<p>The text by a different author: <strong>Text {{ example.answer }}</strong></p>
"""

    def check(self, config: StudyConfig, problem: Problem) -> None:
        tri = config.section("triangle", TriangleOptions)
        if tri is None:
            return
        assignment = config.assignment
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
        if tri.test == "similarity" and assignment.max_items_per_participant not in (None, 1):
            problem(
                ("assignment", "max_items_per_participant"), "must be 1 for a test of similarity"
            )

    def answer_keys(self, config: StudyConfig) -> dict[str, tuple[int, ...]]:
        return {"odd": (1, 2, 3)}

    def raters_per_item(self, config: StudyConfig) -> int:
        return 1

    def one_slot_per_item(self) -> bool:
        return True

    def layout(
        self, item: Item, item_index: int, replicate: int, rng: random.Random
    ) -> tuple[int, ...]:
        return (0, 1, 2)  # the triad's order is the balanced design itself

    def build_items(
        self, config: StudyConfig, stories: Sequence[Story], excluded: set[str], problem: Problem
    ) -> list[Item]:
        from storyeval.human.triangle_stats import balanced_orders, odd_position

        tri = self.options(config)
        a, b = tri.systems
        selected = select_stories(config, stories, excluded, problem)
        pools = {
            a: [s for s in selected if s.system == a],
            b: [s for s in selected if s.system == b],
        }
        for j, system in enumerate((a, b)):
            if len(pools[system]) < 2:
                problem(
                    ("triangle", "systems", j),
                    f"system {system!r} needs at least 2 selectable stories; found {len(pools[system])}",
                )
        if len(pools[a]) < 2 or len(pools[b]) < 2 or (tri.judges is None) == (tri.plan is None):
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
                if prompt_group(candidate) not in avoid:
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
                used.add(prompt_group(story))
                texts.append(text_of(story))
            odd = odd_position(order)
            meta = {
                "order": order,
                "odd_position": odd,
                "odd_system": letters[order[odd - 1]],
                "system_a": a,
                "system_b": b,
                "test": tri.test,
            }
            items.append(Item(f"triad-{k + 1:0{width}d}", f"{a} vs {b}", tuple(texts), meta))
        return items

    def check_training(
        self, config: StudyConfig, example: TrainingExample, loc: Loc, problem: Problem
    ) -> None:
        check_choice_training(example, (1, 2, 3), "the position of the odd text, 1-3", loc, problem)

    def training_correct(
        self, study: Study, example: ResolvedTraining, answer: Mapping[str, int]
    ) -> bool | None:
        return answer.get("odd") == example.answer

    def judgment_rows(
        self, study: Study, page: PageView, answers: Mapping[str, int]
    ) -> list[JudgmentRow]:
        meta = page.item.meta
        picked = answers["odd"]
        odd = int(meta["odd_position"])
        extra = {
            "order": meta["order"],
            "odd_position": odd,
            "chosen_position": picked,
            "odd_system": meta["odd_system"],
            "system_a": meta["system_a"],
            "system_b": meta["system_b"],
            "test": meta["test"],
            "texts": [t.id for t in page.texts],
        }
        value = 1.0 if picked == odd else 0.0
        return [JudgmentRow(page.item.key, "odd_one_out", value, page.item.condition, extra)]

    def describe(self, study: Study) -> StatementPart:
        tri = self.options(study.config)
        plan = (
            f"alpha = {tri.plan.alpha:g}, beta = {tri.plan.beta:g}, p_d = {tri.plan.pd:g}"
            if tri.plan
            else "given directly"
        )
        lines = [
            self.summary,
            "",
            f'Question: "{tri.question}" (texts labelled {", ".join(tri.labels)}).',
            "",
            f"Test of {tri.test}; subjects A = `{tri.systems[0]}`, B = `{tri.systems[1]}`; "
            f"{triangle_evaluations(study.config)} triads (number of judges from the plan: "
            f"{plan}). The six orders AAB, ABA, BAA, BBA, BAB, ABB are balanced over judges in "
            "groups of six; each triad uses three different prompts.",
        ]
        return StatementPart(
            lines, {"criteria": True, "scale": True, "labels": True, "definitions": True}
        )

    def analyse(self, part: pd.DataFrame, settings: AnalysisSettings) -> ProtocolAnalysis:
        table = triangle_results(
            part,
            alpha=settings.triangle_alpha,
            beta=settings.triangle_beta,
            pd_max=settings.triangle_pd,
        )
        tests = [
            {
                "analysis": "triangle",
                "criterion": "odd_one_out",
                "comparison": row["condition"],
                "estimate": row["pd_estimate"],
                "statistic": float(row["correct"]),
                "df": math.nan,
                "df2": math.nan,
                "p_value": row["p_value"],
                "ci_low": row["pd_lower"],
                "ci_high": row["pd_upper"],
                "effect_size": math.nan,
                "n": row["judges"],
                "method": "triangle test of difference (exact binomial; estimate = pd, bounds by normal approximation)",
            }
            for _, row in table.iterrows()
        ]
        fields = {
            "triangle_alpha": settings.triangle_alpha,
            "triangle_beta": settings.triangle_beta,
            "triangle_pd": settings.triangle_pd,
        }
        return ProtocolAnalysis({"triangle": table}, tests, fields)

    def template_context(self, study: Study) -> dict[str, Any]:
        return {"options": self.options(study.config)}
