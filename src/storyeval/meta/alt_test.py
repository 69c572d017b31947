"""The alternative annotator test: may a judge replace one of the raters?

Calderon, Reichart and Dror (2025, "The Alternative Annotator Test for LLM-as-a-Judge") ask,
for each rater j in turn, whether the judge predicts the *other* raters' labels at least about
as well as j does. On each item j rated, the judge's alignment with the others
``S(judge, i, j)`` and j's own ``S(j, i, j)`` are computed (accuracy: the share of the others
it matches; for numeric ratings, minus the root mean squared difference); the judge *wins*
the item when its alignment is at least j's, j wins when j's is at least the judge's (a tie is
a win for both). Per rater, a one-sided paired t-test of ``H0: rho_judge <= rho_rater -
epsilon`` on the per-item wins, where ``epsilon`` is what a judge may lose for being cheaper
(the authors suggest 0.2 against experts, 0.1 against crowd workers); the p-values of all
raters are corrected by Benjamini and Yekutieli (valid under any dependence). The *winning
rate* ``omega`` is the share of raters whose null is rejected; the judge passes, "may replace
a rater", when ``omega >= 0.5``. The *advantage probability* ``rho`` is the share of
(item, rater) pairs where the judge's alignment is at least the rater's, averaged over raters:
it needs no epsilon and ranks judges.

Assumptions: at least three raters per item (two others to align with), and enough items
per rater for a t-test (the authors ask for about 30; raters with fewer than ``min_items`` are
left out and counted).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from storyeval.base.signature import Signature
from storyeval.base.validation import check_choice

ALT_TEST_COLUMNS = [
    "criterion", "winning_rate", "advantage_probability", "passed", "verdict", "raters_tested",
    "raters_left_out", "items", "epsilon", "alpha", "scoring", "signature",
]  # fmt: skip


@dataclass(frozen=True)
class AltTestResult:
    """The test's outcome and its per-rater table (rater, items, judge's and rater's winning
    rates, p-value, BY-adjusted p-value, rejected)."""

    winning_rate: float
    advantage_probability: float
    passed: bool
    raters: pd.DataFrame
    left_out: int


def _alignment(value: float, others: np.ndarray, scoring: str) -> float:
    if scoring == "accuracy":
        return float(np.mean(others == value))
    return float(-np.sqrt(np.mean((others - value) ** 2)))


def _one_sided_p(differences: np.ndarray, epsilon: float) -> float:
    """p of H0: mean(differences) <= -epsilon against the greater alternative (paired t)."""
    shifted = differences + epsilon
    spread = float(np.std(shifted, ddof=1)) if len(shifted) > 1 else 0.0
    if spread == 0.0:
        return 0.0 if shifted.mean() > 0 else 1.0
    t = float(shifted.mean() / (spread / np.sqrt(len(shifted))))
    return float(stats.t.sf(t, len(shifted) - 1))


def _rater_rows(
    people: pd.DataFrame, judge: Mapping[str, float], scoring: str, epsilon: float
) -> list[dict[str, Any]]:
    # each item's raters and values as arrays (a pandas mask per rating cost 10 s on TTCW)
    by_item = {
        item: (part["rater_id"].to_numpy(object), part["value"].to_numpy(float))
        for item, part in people.groupby("item_id")
        if item in judge
    }
    rows = []
    for rater, mine in people.groupby("rater_id"):
        judge_wins, rater_wins, advantage = [], [], []
        for item, value in zip(mine["item_id"], mine["value"], strict=True):
            if item not in by_item:
                continue
            raters, values = by_item[item]
            others = values[raters != rater]
            if len(others) < 2:
                continue
            said = float(judge[item])
            if scoring == "accuracy":
                said = float(np.round(said))
            judged, own = (
                _alignment(said, others, scoring),
                _alignment(float(value), others, scoring),
            )
            judge_wins.append(float(judged >= own))
            rater_wins.append(float(own >= judged))
            advantage.append(float(judged >= own))
        wins = np.asarray(judge_wins) - np.asarray(rater_wins)
        rows.append({
            "rater_id": rater, "items": len(judge_wins),
            "judge_winning_rate": float(np.mean(judge_wins)) if judge_wins else np.nan,
            "rater_winning_rate": float(np.mean(rater_wins)) if rater_wins else np.nan,
            "advantage": float(np.mean(advantage)) if advantage else np.nan,
            "p_value": _one_sided_p(wins, epsilon) if len(wins) else np.nan,
        })  # fmt: skip
    return rows


def alt_test(
    people: pd.DataFrame,
    judge: Mapping[str, float],
    *,
    epsilon: float = 0.2,
    alpha: float = 0.05,
    scoring: str = "auto",
    min_items: int = 10,
) -> AltTestResult:
    """The alternative annotator test of one judge on one criterion.

    Parameters
    ----------
    people : DataFrame
        One row per rating: ``item_id``, ``rater_id``, ``value``.
    judge : mapping of item id to value
        The judge's answer on each item.
    epsilon : float
        How much lower the judge's winning rate may be than a rater's (0.2 against experts,
        0.1 against crowd workers, after the authors).
    scoring : {"auto", "accuracy", "rmse"}
        ``auto``: accuracy when every rating is an integer (the judge's answer rounded),
        otherwise minus the RMSE.
    min_items : int
        Raters with fewer usable items are left out (and counted).
    """
    if not 0 < alpha < 1 or not 0 <= epsilon < 1:
        raise ValueError(f"alpha must be in (0, 1) and epsilon in [0, 1), got {alpha}, {epsilon}")
    check_choice(scoring, ("auto", "accuracy", "rmse"), "scoring")
    for column in ("item_id", "rater_id", "value"):
        if column not in people.columns:
            raise ValueError(f"people's table has no column {column!r}")
    if scoring == "auto":
        values = people["value"].to_numpy(float)
        scoring = "accuracy" if np.all(values == np.round(values)) else "rmse"
    table = pd.DataFrame(_rater_rows(people, judge, scoring, epsilon))
    table = table[table["items"] > 0] if len(table) else table
    if table.empty:
        raise ValueError("no item has the judge's answer and three or more raters")
    tested = table[table["items"] >= min_items].copy()
    left_out = len(table) - len(tested)
    if tested.empty:
        raise ValueError(
            f"no rater has {min_items} or more items with two other raters and the judge's answer"
        )
    tested["p_adjusted"] = stats.false_discovery_control(
        tested["p_value"].to_numpy(float), method="by"
    )
    tested["rejected"] = tested["p_adjusted"] < alpha
    omega = float(tested["rejected"].mean())
    return AltTestResult(
        winning_rate=omega,
        advantage_probability=float(tested["advantage"].mean()),
        passed=omega >= 0.5,
        raters=tested.assign(scoring=scoring).reset_index(drop=True),
        left_out=left_out,
    )


def alt_test_signature(epsilon: float, alpha: float, scoring: str, min_items: int) -> Signature:
    """The signature of an alternative annotator test."""
    return Signature(
        "alt_test",
        {
            "epsilon": epsilon,
            "alpha": alpha,
            "correction": "by",
            "scoring": scoring,
            "min_items": min_items,
        },
    )


def alt_test_table(
    people: pd.DataFrame,
    judge: pd.DataFrame,
    *,
    epsilon: float = 0.2,
    alpha: float = 0.05,
    scoring: str = "auto",
    min_items: int = 10,
    pooled: bool = True,
) -> pd.DataFrame:
    """The test per criterion (people's and the judge's ``item_id``, ``criterion``, ``value``
    and people's ``rater_id``), and with ``pooled`` over every criterion at once (an item is
    then one item on one criterion: more items per rater, one verdict). A criterion the test
    cannot run on gets a row whose verdict says why."""
    groups = [
        (c, people[people["criterion"] == c], judge[judge["criterion"] == c])
        for c in sorted(set(people["criterion"]) & set(judge["criterion"]))
    ]
    if pooled and len(groups) > 1:

        def keyed(frame: pd.DataFrame) -> pd.DataFrame:
            return frame.assign(
                item_id=frame["item_id"].astype(str) + "\x1f" + frame["criterion"].astype(str)
            )

        groups.append(("all_criteria", keyed(people), keyed(judge)))
    rows = []
    for criterion, mine, theirs in groups:
        answers = dict(zip(theirs["item_id"], theirs["value"].astype(float), strict=True))
        row: dict[str, Any] = {"criterion": criterion, "epsilon": epsilon, "alpha": alpha}
        try:
            found = alt_test(
                mine, answers, epsilon=epsilon, alpha=alpha, scoring=scoring, min_items=min_items
            )
        except ValueError as error:
            rows.append(row | {"verdict": f"not testable: {error}", "passed": False})
            continue
        rows.append(row | {
            "winning_rate": found.winning_rate, "advantage_probability": found.advantage_probability,
            "passed": found.passed, "verdict": "may replace a rater" if found.passed else "may not replace a rater",
            "raters_tested": len(found.raters), "raters_left_out": found.left_out,
            "items": int(found.raters["items"].sum()), "scoring": found.raters["scoring"].iloc[0],
        })  # fmt: skip
    result = pd.DataFrame(rows).reindex(columns=ALT_TEST_COLUMNS)
    result["signature"] = alt_test_signature(epsilon, alpha, scoring, min_items).render()
    return result
