"""Raters to review while a study runs: each rater's bias, agreement with the others, speed,
attention checks and competence, with the reasons to look at them; and the agreement per
criterion. The study server's live agreement page (``/admin/<token>/study/<name>/agreement``)
shows these tables; they are library functions over long judgments, so a finished study's
export gives the same numbers.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from storyeval.corpus import Judgment

#: Thresholds of the review flags (documented on the page and in the guide).
LOW_AGREEMENT = 0.2  # Spearman with the others' mean, from 5 shared items
LARGE_BIAS = 1.0  # scale points from the others' mean, on average
MIN_SHARED = 5
MIN_COMPETENCE_LABELS = 20  # a competence model's flag counts from this many ratings


def _frame(judgments: pd.DataFrame | Sequence[Judgment]) -> pd.DataFrame:
    from storyeval.meta.data import judgments_frame

    frame = judgments_frame(judgments)
    return frame.groupby(["item_id", "rater_id", "criterion"], as_index=False)["value"].mean()


def _against_others(frame: pd.DataFrame) -> pd.DataFrame:
    """Each rating beside the mean of the other raters' ratings of its item and criterion."""
    grouped = frame.groupby(["item_id", "criterion"])["value"]
    total, count = grouped.transform("sum"), grouped.transform("count")
    out = frame.assign(others=(total - frame["value"]) / (count - 1))
    return out[count > 1]


def _agreement(rows: pd.DataFrame) -> tuple[float, int]:
    """Spearman of a rater's ratings with the others' mean, per criterion, weighted by the
    shared items (criteria with fewer than 3 items or no variation are left out)."""
    from scipy.stats import spearmanr

    values, weights = [], []
    for _, part in rows.groupby("criterion"):
        if len(part) >= 3 and part["value"].nunique() > 1 and part["others"].nunique() > 1:
            values.append(float(spearmanr(part["value"], part["others"]).statistic))
            weights.append(len(part))
    if not values:
        return math.nan, len(rows)
    return float(np.average(values, weights=weights)), len(rows)


def _competence(frame: pd.DataFrame) -> pd.DataFrame:
    """Competence per rater (the ordinal model for ratings with more than two values, MACE
    otherwise), the lowest over criteria, with the spammer and constant flags."""
    from storyeval.meta.competence import competence_tables

    tables = []
    for criterion, part in frame.groupby("criterion"):
        model = "ordinal" if part["value"].nunique() > 2 else "mace"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                raters, _ = competence_tables(part, model=model)
            except (ValueError, np.linalg.LinAlgError):
                continue
        tables.append(raters.assign(criterion=criterion))
    if not tables:
        return pd.DataFrame(columns=["rater_id", "competence", "spammer", "constant"])
    every = pd.concat(tables, ignore_index=True)
    return every.groupby("rater_id", as_index=False).agg(
        competence=("competence", "min"), spammer=("spammer", "any"), constant=("constant", "any")
    )


def _reasons(row: Mapping[str, Any], min_time_s: float | None) -> list[str]:
    reasons = []
    time_s = row.get("median_time_s")
    if (
        min_time_s is not None
        and time_s is not None
        and not pd.isna(time_s)
        and time_s < min_time_s
    ):
        reasons.append(f"median time {time_s:.1f} s < {min_time_s:g} s")
    if row.get("checks_failed"):
        reasons.append(f"{int(row['checks_failed'])} attention check(s) failed")
    if row["shared"] >= MIN_SHARED and row["agreement"] < LOW_AGREEMENT:
        reasons.append(f"agreement with the others {row['agreement']:.2f} < {LOW_AGREEMENT}")
    if abs(row["bias"]) >= LARGE_BIAS:
        reasons.append(f"{row['bias']:+.2f} points from the others on average")
    if row.get("spammer") and row["judgments"] >= MIN_COMPETENCE_LABELS:
        reasons.append("answers like a spammer (competence model)")
    if row.get("constant"):
        reasons.append("always gives the same answer")
    return reasons


def rater_review(
    judgments: pd.DataFrame | Sequence[Judgment],
    *,
    participants: Sequence[Mapping[str, Any]] = (),
    min_time_s: float | None = None,
    competence: bool = True,
) -> pd.DataFrame:
    """One row per rater: ``judgments``, ``shared`` (ratings of items others rated too),
    ``bias`` (mean offset from the others' mean rating of the same item and criterion, in
    scale points), ``agreement`` (Spearman with the others' mean, averaged over criteria),
    ``median_time_s`` and ``checks_failed`` (from ``participants``), ``competence`` (the
    ordinal item-response model for Likert ratings, MACE for labels; the lowest over
    criteria; its spammer flag counts from 20 ratings), ``review`` and ``reasons``. Raters
    to review come first.

    >>> long = pd.DataFrame({"item_id": list("aabbccddee") * 2, "criterion": "q",
    ...     "rater_id": ["r1", "r2"] * 5 + ["r3"] * 10,
    ...     "value": [5, 5, 4, 4, 3, 3, 2, 2, 1, 1] + [1] * 10})
    >>> table = rater_review(long.drop_duplicates(["item_id", "rater_id"]), competence=False)
    >>> table.set_index("rater_id").loc["r3", "reasons"]
    '-2.00 points from the others on average; always gives the same answer'
    """
    frame = _frame(judgments)
    compared = _against_others(frame)
    rows = []
    for rater, part in frame.groupby("rater_id"):
        mine = compared[compared["rater_id"] == rater]
        agreement, shared = _agreement(mine)
        bias = float((mine["value"] - mine["others"]).mean()) if len(mine) else math.nan
        constant = (
            part.groupby("criterion")["value"].nunique().max() == 1 and len(part) >= MIN_SHARED
        )
        rows.append(
            {
                "rater_id": rater,
                "judgments": len(part),
                "shared": shared,
                "bias": bias,
                "agreement": agreement,
                "constant": bool(constant),
            }
        )
    table = pd.DataFrame(rows)
    known = {str(p["rater_id"]): p for p in participants}
    table["median_time_s"] = [known.get(r, {}).get("median_time_s") for r in table["rater_id"]]
    table["checks_failed"] = [known.get(r, {}).get("checks_failed", 0) for r in table["rater_id"]]
    if competence and len(table) > 1:
        found = _competence(frame).set_index("rater_id")
        table["competence"] = table["rater_id"].map(found["competence"])
        table["spammer"] = table["rater_id"].map(found["spammer"]).fillna(False).astype(bool)
        table["constant"] |= table["rater_id"].map(found["constant"]).fillna(False).astype(bool)
    else:
        table["competence"], table["spammer"] = math.nan, False
    table["reasons"] = ["; ".join(_reasons(r, min_time_s)) for r in table.to_dict("records")]
    table["review"] = table["reasons"] != ""
    return table.sort_values(["review", "agreement"], ascending=[False, True], ignore_index=True)


def criterion_agreement(
    judgments: pd.DataFrame | Sequence[Judgment], *, n_boot: int = 200, seed: int = 0
) -> pd.DataFrame:
    """Per criterion: Krippendorff's alpha (interval and ordinal), Fleiss' kappa and ICC(2,1)
    and ICC(2,k), with bootstrap intervals (``n_boot`` replicates)."""
    from storyeval.base.errors import StoryevalWarning
    from storyeval.meta import agreement

    frame = _frame(judgments)
    if frame.empty:
        return pd.DataFrame(columns=["criterion", "method", "estimate", "ci_low", "ci_high", "n"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StoryevalWarning)
        warnings.simplefilter("ignore", RuntimeWarning)
        table = agreement(
            frame,
            statistics=["alpha", "fleiss", "icc"],
            alpha_levels=["ordinal", "interval"],
            n_boot=n_boot,
            seed=seed,
        )
    wanted = ["krippendorff_alpha_interval", "krippendorff_alpha_ordinal", "fleiss_kappa"]
    chosen = table[table["method"].isin([*wanted, "icc2", "icc2k"])]
    return chosen[["criterion", "method", "estimate", "ci_low", "ci_high", "n", "n_raters"]]


def rank_gap(values: pd.Series, reference: pd.Series) -> pd.Series:
    """Each item's percentile rank among ``values`` minus its rank among ``reference``
    (positive: ranked higher than the reference ranks it). Scales need not match.

    >>> rank_gap(pd.Series([1.0, 2.0, 3.0]), pd.Series([3.0, 2.0, 1.0])).round(3).tolist()
    [-0.667, 0.0, 0.667]
    """
    return values.rank(pct=True) - reference.rank(pct=True)


CALIBRATION_COLUMNS = [
    "judge",
    "criterion",
    "item_id",
    "people_mean",
    "people_n",
    "people_sd",
    "judge_value",
    "rank_gap",
]


def calibration_queue(
    people: pd.DataFrame | Sequence[Judgment],
    judges: pd.DataFrame | Sequence[Judgment],
    *,
    top: int = 25,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Where an LLM judge and people disagree most: per judge and criterion both rated, the
    Spearman correlation of the judge with the people's mean over the shared items (a summary
    table), and the ``top`` items by the gap between the judge's and the people's percentile
    ranks (:func:`rank_gap`; a queue to read, calibrate the rubric on, or send to more raters).
    """
    from scipy.stats import spearmanr

    from storyeval.meta.data import judgments_frame

    rated, judged = judgments_frame(people), judgments_frame(judges)
    means = rated.groupby(["criterion", "item_id"])["value"].agg(["mean", "count", "std"])
    summary, queue = [], []
    for (judge, criterion), part in judged.groupby(["rater_id", "criterion"], sort=True):
        if criterion not in means.index.get_level_values(0):
            continue
        per_item = part.groupby("item_id")["value"].mean()
        both = means.loc[criterion].join(per_item.rename("judge_value"), how="inner")
        if both.empty:
            continue
        both = both.assign(rank_gap=rank_gap(both["judge_value"], both["mean"]))
        varied = both["mean"].nunique() > 1 and both["judge_value"].nunique() > 1
        rho = float(spearmanr(both["mean"], both["judge_value"]).statistic) if varied else math.nan
        summary.append({"judge": judge, "criterion": criterion, "spearman": rho, "n": len(both)})
        worst = both.reindex(both["rank_gap"].abs().sort_values(ascending=False).index).head(top)
        for item_id, row in worst.iterrows():
            queue.append(
                {
                    "judge": judge,
                    "criterion": criterion,
                    "item_id": item_id,
                    "people_mean": float(row["mean"]),
                    "people_n": int(row["count"]),
                    "people_sd": float(row["std"]) if row["count"] > 1 else math.nan,
                    "judge_value": float(row["judge_value"]),
                    "rank_gap": float(row["rank_gap"]),
                }
            )
    return (
        pd.DataFrame(summary, columns=["judge", "criterion", "spearman", "n"]),
        pd.DataFrame(queue, columns=CALIBRATION_COLUMNS),
    )
