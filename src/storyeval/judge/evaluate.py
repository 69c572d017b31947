"""A judge against people (``storyeval judge-eval``).

For every criterion both rated: the judge's correlation with the human mean at the pooled,
story and system levels with bootstrap intervals, beside the human ceiling (each person
against the others); Krippendorff's alpha of the people with and without the judge as one more
rater, and Cohen's kappa of the judge against the rounded human mean; a confusion matrix and a
calibration map (the human mean at each judge score); the judge's self-consistency over
repeats (ICC); and, from a pairwise run, its position bias.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from storyeval.base.errors import StoryevalError, StoryevalWarning
from storyeval.corpus import Judgment, Story

JUDGE_RATER = "judge"


@dataclass
class JudgeEvaluation:
    """The tables of :func:`evaluate_judge` (each a tidy DataFrame; empty when not
    applicable) and notes."""

    correlations: pd.DataFrame
    ceiling: pd.DataFrame
    agreement: pd.DataFrame
    confusion: pd.DataFrame
    calibration: pd.DataFrame
    consistency: pd.DataFrame
    position: pd.DataFrame
    notes: list[str] = field(default_factory=list)
    spans: pd.DataFrame = field(default_factory=pd.DataFrame)
    alt_test: pd.DataFrame = field(default_factory=pd.DataFrame)

    def headline(self) -> pd.DataFrame:
        """Per criterion and level: the judge's Spearman correlation with the human mean
        [interval], the human ceiling, and alpha without and with the judge."""
        rows = self.correlations[self.correlations["method"] == "spearman"]
        table = rows[["criterion", "level", "estimate", "ci_low", "ci_high", "n"]].copy()
        ceiling = self.ceiling[
            (self.ceiling["rater"] == "mean") & (self.ceiling["method"] == "spearman")
        ]
        table = table.merge(
            ceiling[["criterion", "level", "estimate"]].rename(
                columns={"estimate": "human_ceiling"}
            ),
            on=["criterion", "level"],
            how="left",
        )
        if not self.agreement.empty:
            table = table.merge(
                self.agreement[["criterion", "alpha_people", "alpha_with_judge", "kappa"]],
                on="criterion",
                how="left",
            )
        return table.rename(columns={"estimate": "spearman"})

    def tables(self) -> dict[str, pd.DataFrame]:
        """Every table by file name (without ``.csv``)."""
        return {
            "correlations": self.correlations,
            "ceiling": self.ceiling,
            "agreement": self.agreement,
            "confusion": self.confusion,
            "calibration": self.calibration,
            "consistency": self.consistency,
            "position": self.position,
            "spans": self.spans,
            "alt_test": self.alt_test,
        }


def _frame(judgments: Sequence[Judgment]) -> pd.DataFrame:
    rows = []
    for j in judgments:
        row = {
            "item_id": j.item_id,
            "rater_id": j.rater_id,
            "criterion": j.criterion,
            "value": float(j.value),
        }
        row.update({k: j.extra.get(k) for k in ("system", "prompt_id", "sample")})
        rows.append(row)
    return pd.DataFrame(rows)


def evaluate_judge(
    judge: Sequence[Judgment],
    humans: Sequence[Judgment],
    *,
    stories: Sequence[Story] | None = None,
    comparisons: Sequence[dict[str, Any]] | None = None,
    criteria: Mapping[str, str] | None = None,
    n_boot: int = 1000,
    seed: int = 0,
    aggregate: str = "mean",
    alt_epsilon: float = 0.2,
) -> JudgeEvaluation:
    """Compare one judge's judgments with people's on the criteria both rated.

    ``criteria`` maps a judge's criterion to the people's name for it (a judge's
    ``coherence`` against UNION's ``reasonable``: ``{"coherence": "reasonable"}``); the
    tables then use the people's name. ``aggregate`` is how people's ratings of an item are
    combined for the correlations (``mean``; or a competence model's estimate: ``ordinal``,
    ``mace``, ``dawid-skene``; see :func:`storyeval.meta.data.aggregate_ratings`).
    ``alt_epsilon`` is the alternative annotator test's epsilon (:mod:`storyeval.meta.alt_test`).

    Raises
    ------
    StoryevalError
        No criterion, or no item, in common; a mapped criterion the judge did not rate.
    """
    from storyeval.meta.alt_test import alt_test_table

    judged, people = _frame(judge), _frame(humans)
    judged = _renamed(judged, people, criteria or {})
    shared = [c for c in dict.fromkeys(judged["criterion"]) if c in set(people["criterion"])]
    if not shared:
        raise StoryevalError(
            f"the judge and the people share no criterion (judge: {', '.join(sorted(set(judged['criterion'])))}; "
            f"people: {', '.join(sorted(set(people['criterion'])))})"
        )
    if len(set(judged["rater_id"])) > 1:
        raise StoryevalError("give the judgments of one judge (filter by rater_id)")
    per_item = judged.groupby(["item_id", "criterion"], as_index=False)["value"].mean()
    notes: list[str] = [
        f"the judge's {a} is compared with the people's {b}" for a, b in (criteria or {}).items()
    ]
    correlations, ceiling = _correlations(
        per_item, people, shared, stories, n_boot, seed, notes, aggregate
    )
    return JudgeEvaluation(
        correlations=correlations,
        ceiling=ceiling,
        agreement=_agreement(per_item, people, shared, n_boot, seed),
        confusion=_confusion(per_item, people, shared),
        calibration=_calibration(per_item, people, shared),
        consistency=_consistency(judged, shared, n_boot, seed),
        position=position_bias(comparisons or []),
        notes=notes,
        spans=_spans(judge, humans),
        alt_test=alt_test_table(
            people[people["criterion"].isin(shared)], per_item, epsilon=alt_epsilon
        ),
    )


def _spans(judge: Sequence[Judgment], humans: Sequence[Judgment]) -> pd.DataFrame:
    """Span by span, where both the judge and people marked spans (``spans`` rubric and
    study protocol): the judge against the people's majority per label."""
    from storyeval.meta.spans import SHARE, compare_spans, spans_frame

    judged, people = spans_frame(judge), spans_frame(humans)
    if judged.empty or people.empty:
        return pd.DataFrame()
    labels = sorted(({j.criterion for j in judge} & {j.criterion for j in humans}) - {SHARE})
    return compare_spans(people, judged, labels=labels)


def _renamed(
    judged: pd.DataFrame, people: pd.DataFrame, criteria: Mapping[str, str]
) -> pd.DataFrame:
    """The judge's criteria under the people's names."""
    targets = list(criteria.values())
    if len(set(targets)) < len(targets):
        raise StoryevalError("--criteria maps two of the judge's criteria to one of the people's")
    for source, target in criteria.items():
        if source not in set(judged["criterion"]):
            raise StoryevalError(
                f"--criteria {source}={target}: the judge rated no {source!r} (it rated "
                f"{', '.join(sorted(set(judged['criterion'])))})"
            )
        if target not in set(people["criterion"]):
            raise StoryevalError(
                f"--criteria {source}={target}: the people rated no {target!r} (they rated "
                f"{', '.join(sorted(set(people['criterion'])))})"
            )
    judged = judged.copy()
    judged["criterion"] = judged["criterion"].map(lambda c: criteria.get(c, c))
    return judged


def _correlations(
    per_item: pd.DataFrame,
    people: pd.DataFrame,
    criteria: list[str],
    stories: Sequence[Story] | None,
    n_boot: int,
    seed: int,
    notes: list[str],
    aggregate: str = "mean",
) -> tuple[pd.DataFrame, pd.DataFrame]:
    from storyeval.meta import build_meta_table, correlate, human_ceiling
    from storyeval.meta.correlation import tidy_correlations
    from storyeval.meta.levels import available_levels

    scores = per_item.rename(columns={"criterion": "metric"})
    scores["metric"] = "judge:" + scores["metric"]
    chosen = people[people["criterion"].isin(criteria)]
    table = build_meta_table(scores, chosen, stories=stories, aggregation=aggregate)
    levels, level_notes = available_levels(table, None, stories_given=stories is not None)
    notes.extend(level_notes)
    if table.has_systems and table.items["system"].nunique() >= 2:
        levels.append("within_system")  # a judge may only tell the systems apart
    # each judge criterion against the people's same criterion only: the other pairs were
    # computed and dropped (14 times the work for TTCW's 14 tests; each row is seeded alone).
    # Every metric here is "judge:" + a criterion (above).
    judged = [metric.removeprefix("judge:") for metric in table.metric_names]
    pairs = [(f"judge:{c}", c) for c in judged if c in table.criteria]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StoryevalWarning)
        frames = [
            correlate(table, levels=levels, n_boot=n_boot, seed=seed, metrics=[m], criteria=[c])
            for m, c in pairs
        ]
        mine = pd.concat(frames, ignore_index=True) if frames else tidy_correlations([])
        individual = people[people["rater_id"] != "mean"]
        ceiling = pd.DataFrame()
        if individual["rater_id"].nunique() >= 2:
            ceiling = human_ceiling(
                individual,
                items=table.items,
                criteria=criteria,
                levels=levels,
                n_boot=n_boot,
                seed=seed,
            )
        else:
            notes.append("the human ceiling needs two or more individual raters")
    return mine, ceiling


def _agreement(
    per_item: pd.DataFrame, people: pd.DataFrame, criteria: list[str], n_boot: int, seed: int
) -> pd.DataFrame:
    from statsmodels.stats.inter_rater import cohens_kappa

    from storyeval.meta import agreement

    individual = people[(people["rater_id"] != "mean") & people["criterion"].isin(criteria)]
    if individual["rater_id"].nunique() < 2:
        return pd.DataFrame()
    judge_rows = per_item.assign(rater_id=JUDGE_RATER, value=per_item["value"].round())
    judge_rows = judge_rows[judge_rows["item_id"].isin(set(individual["item_id"]))]
    columns = ["item_id", "rater_id", "criterion", "value"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StoryevalWarning)
        alone = agreement(individual[columns], n_boot=n_boot, seed=seed)
        joined = agreement(
            pd.concat([individual[columns], judge_rows[columns]]), n_boot=n_boot, seed=seed
        )
    method = "krippendorff_alpha_interval"
    rows = []
    human_mean = individual.groupby(["item_id", "criterion"])["value"].mean().round()
    for criterion in criteria:
        a = alone[(alone["criterion"] == criterion) & (alone["method"] == method)]["estimate"]
        b = joined[(joined["criterion"] == criterion) & (joined["method"] == method)]["estimate"]
        pairs = per_item[per_item["criterion"] == criterion].set_index("item_id")["value"].round()
        truth = human_mean.xs(criterion, level="criterion").reindex(pairs.index)
        both = pd.DataFrame({"judge": pairs, "human": truth}).dropna()
        kappa = math.nan
        if len(both) >= 2:
            crosstab = pd.crosstab(both["human"], both["judge"])
            labels = sorted(set(crosstab.index) | set(crosstab.columns))
            square = crosstab.reindex(index=labels, columns=labels, fill_value=0).to_numpy()
            kappa = float(cohens_kappa(square, wt="quadratic").kappa)
        rows.append(
            {
                "criterion": criterion,
                "alpha_people": float(a.iloc[0]) if len(a) else math.nan,
                "alpha_with_judge": float(b.iloc[0]) if len(b) else math.nan,
                "kappa": kappa,
                "kappa_kind": "quadratic-weighted, judge vs rounded human mean",
                "items": len(both),
            }
        )
    return pd.DataFrame(rows)


def _joined(per_item: pd.DataFrame, people: pd.DataFrame, criterion: str) -> pd.DataFrame:
    judge = per_item[per_item["criterion"] == criterion].set_index("item_id")["value"]
    human = people[people["criterion"] == criterion].groupby("item_id")["value"].mean()
    return pd.DataFrame({"judge": judge, "human": human}).dropna()


def _confusion(per_item: pd.DataFrame, people: pd.DataFrame, criteria: list[str]) -> pd.DataFrame:
    """Long format: criterion, judge score (rounded), human mean (rounded), count."""
    frames = []
    for criterion in criteria:
        both = _joined(per_item, people, criterion).round()
        counts = both.groupby(["judge", "human"]).size().reset_index(name="count")
        frames.append(counts.assign(criterion=criterion))
    if not frames:
        return pd.DataFrame(columns=["criterion", "judge", "human", "count"])
    return pd.concat(frames, ignore_index=True)[["criterion", "judge", "human", "count"]]


def _calibration(per_item: pd.DataFrame, people: pd.DataFrame, criteria: list[str]) -> pd.DataFrame:
    """Per criterion and judge score (rounded): the human mean, its SD and the items."""
    rows = []
    for criterion in criteria:
        both = _joined(per_item, people, criterion)
        for score, group in both.groupby(both["judge"].round()):
            rows.append(
                {
                    "criterion": criterion,
                    "judge_score": float(score),
                    "human_mean": float(group["human"].mean()),
                    "human_sd": float(group["human"].std(ddof=1)) if len(group) > 1 else math.nan,
                    "items": len(group),
                }
            )
    return pd.DataFrame(rows)


def _consistency(judged: pd.DataFrame, criteria: list[str], n_boot: int, seed: int) -> pd.DataFrame:
    """ICC of the judge's repeats (each repeat as a rater), when there are repeats."""
    from storyeval.meta import agreement

    if judged["sample"].isna().all() or judged["sample"].nunique() < 2:
        return pd.DataFrame()
    repeats = judged.assign(rater_id="sample" + judged["sample"].astype(str))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StoryevalWarning)
        table = agreement(
            repeats[["item_id", "rater_id", "criterion", "value"]], n_boot=n_boot, seed=seed
        )
    return table[
        table["method"].isin(["icc2", "icc2k", "krippendorff_alpha_interval"])
    ].reset_index(drop=True)


def position_bias(comparisons: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Per criterion: the share of decided comparisons won by the story shown first, ties,
    and the share of pairs judged alike in both orders."""
    if not comparisons:
        return pd.DataFrame()
    frame = pd.DataFrame(comparisons)
    rows = []
    for criterion, group in frame.groupby("criterion", sort=False):
        decided = group[group["winner"] != "tie"]
        per_pair = group.groupby(["item_id", "sample"])["winner"].nunique()
        rows.append(
            {
                "criterion": criterion,
                "comparisons": len(group),
                "first_position_wins": float((decided["winner"] == decided["first"]).mean())
                if len(decided)
                else math.nan,
                "ties": int((group["winner"] == "tie").sum()),
                "position_consistency": float((per_pair == 1).mean()),
                "pairs": len(per_pair),
            }
        )
    return pd.DataFrame(rows)


def preference_agreement(
    judge: Sequence[dict[str, Any]], humans: Sequence[dict[str, Any]], *, confidence: float = 0.95
) -> pd.DataFrame:
    """How often a pairwise judge prefers the story people preferred (LitBench-style data).

    Pairs are matched by their two systems (stories) and prompt; the judge's decision on a
    pair is the majority over its orders and repeats (a split is a tie). Per criterion of the
    judge: ``pairs`` matched, ``agree`` (same winner), ``judge_ties``, ``human_ties``,
    ``accuracy`` (agree / pairs with two decisions) with a Clopper-Pearson interval, and
    ``accuracy_ties_half`` (the judge's ties counted half, as ``pairwise-accuracy`` counts a
    metric's: a judge that decides few pairs is not credited with its few right answers
    alone).
    """
    from storyeval.base.stats import binomial_test

    def key(record: dict[str, Any]) -> tuple[str, frozenset[str]]:
        return str(record["prompt_id"]), frozenset(
            (str(record["system_a"]), str(record["system_b"]))
        )

    truth = {key(r): str(r["winner"]) for r in humans}
    votes: dict[tuple[str, tuple[str, frozenset[str]]], list[str]] = {}
    for record in judge:
        votes.setdefault((str(record["criterion"]), key(record)), []).append(str(record["winner"]))
    rows = []
    for criterion in dict.fromkeys(c for c, _ in votes):
        decided = agree = judge_ties = human_ties = matched = 0
        for (c, pair), winners in votes.items():
            if c != criterion or pair not in truth:
                continue
            matched += 1
            counts = pd.Series(winners).value_counts()
            top = counts.index[0] if len(counts) == 1 or counts.iloc[0] > counts.iloc[1] else "tie"
            if top == "tie":
                judge_ties += 1
            elif truth[pair] == "tie":
                human_ties += 1
            else:
                decided += 1
                agree += int(top == truth[pair])
        low, high = (math.nan, math.nan)
        if decided:
            _, low, high = binomial_test(agree, decided, confidence=confidence)
        scored = decided + judge_ties  # people decided these; the judge's tie counts half
        rows.append(
            {
                "criterion": criterion,
                "pairs": matched,
                "agree": agree,
                "judge_ties": judge_ties,
                "human_ties": human_ties,
                "accuracy": agree / decided if decided else math.nan,
                "ci_low": low,
                "ci_high": high,
                "accuracy_ties_half": (agree + judge_ties / 2) / scored if scored else math.nan,
            }
        )
    return pd.DataFrame(rows)


def write_evaluation(result: JudgeEvaluation, directory: str | Path) -> list[Path]:
    """Write every non-empty table as CSV into ``directory`` (atomically); returns the paths."""
    from storyeval.base.io import claim_output_directory, write_table

    target = claim_output_directory(directory, "judge evaluation")
    written = []
    for name, table in result.tables().items():
        if not table.empty:
            written.append(write_table(target / f"{name}.csv", table))
    headline = result.headline()
    written.append(write_table(target / "headline.csv", headline))
    return written
