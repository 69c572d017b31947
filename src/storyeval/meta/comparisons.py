"""System rankings from pairwise comparisons, paired tests between two systems, and planning.

- :func:`read_comparisons` reads long-format comparisons (people's pairwise and best-worst
  judgments, or a judge's): one record per comparison with ``item_id``, ``prompt_id``,
  ``system_a``, ``system_b``, ``winner`` (a system or ``tie``), ``rater_id``, ``criterion``.
- :func:`rank_systems` rates the systems with Bradley-Terry (Davidson ties) and Elo, with
  bootstrap intervals that resample prompts (the unit a new study would sample).
- :func:`win_rate_matrix` and :func:`next_pairs` (an adaptive plan: the least-compared pairs
  first, then neighbours in the current ranking).
- :func:`paired_test` (paired bootstrap, approximate randomisation, sign test) and
  :func:`prompts_needed` (how many prompts detect a given difference).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from storyeval import __version__
from storyeval.base.errors import DataFileError, DataProblem
from storyeval.base.signature import Signature
from storyeval.base.validation import check_confidence, check_n_boot
from storyeval.meta.bradley_terry import bradley_terry, count_comparisons, elo

COMPARISON_FIELDS = ("item_id", "prompt_id", "system_a", "system_b", "winner")
RANK_COLUMNS = (
    "system",
    "method",
    "estimate",
    "ci_low",
    "ci_high",
    "comparisons",
    "wins",
    "losses",
    "ties",
    "signature",
)
PairedMethod = Literal["bootstrap", "permutation", "sign"]


#: Optional fields of a comparison kept as read: what a pair shares with others (an author's
#: paragraphs, a source document), resampled together by pairwise accuracy's bootstrap
CLUSTER_FIELDS = ("group",)


def read_comparisons(path: str | Path) -> pd.DataFrame:
    """Read comparisons (JSONL or CSV); every bad line is ``FILE:LINE: reason``.

    Besides comparison records, the judgments exported by a ``pairwise`` study (with
    ``system_a``, ``system_b`` and ``chosen``) and by a ``best_worst`` study (with ``role``,
    ``system`` and ``item_key``: the best story beats the others of its tuple, which beat the
    worst) are read as comparisons. ``rater_id`` and ``criterion`` default to ``""``.

    Raises
    ------
    DataFileError
        A missing field, a winner that is neither system nor ``tie``, a system compared with
        itself.
    """
    from storyeval.corpus import iter_raw_records

    problems: list[DataProblem] = []
    records: list[tuple[int, dict[str, Any]]] = []
    for number, record in iter_raw_records(path):
        if isinstance(record, DataProblem):
            problems.append(record)
        else:
            records.append((number, record))
    if problems:
        raise DataFileError(problems)
    if records and all("role" in r and "item_key" in r for _, r in records):
        records = _best_worst_comparisons(records)
    rows: list[dict[str, Any]] = []
    for number, record in records:
        if "winner" not in record and "chosen" in record:  # a pairwise study's judgment
            record = {
                **record,
                "winner": record["chosen"],
                "prompt_id": record.get("prompt_id") or record.get("item_id"),
            }
        reason = _comparison_problem(record)
        if reason:
            problems.append(DataProblem(str(path), number, reason))
            continue
        row = {key: str(record[key]) for key in COMPARISON_FIELDS}
        row["rater_id"] = str(record.get("rater_id") or "")
        row["criterion"] = str(record.get("criterion") or "")
        for key in CLUSTER_FIELDS:  # what pairs share, for clustered resampling
            if record.get(key) not in (None, ""):
                row[key] = str(record[key])
        rows.append(row)
    if problems:
        raise DataFileError(problems)
    if not rows:
        raise DataFileError.single(Path(path), 1, "the file holds no comparisons")
    return pd.DataFrame(rows)


def _best_worst_comparisons(
    records: list[tuple[int, dict[str, Any]]],
) -> list[tuple[int, dict[str, Any]]]:
    """Best-worst judgments as the comparisons they imply, per rater, criterion and tuple."""
    tuples: dict[tuple[str, str, str], list[tuple[int, dict[str, Any]]]] = {}
    for number, record in records:
        key = (str(record.get("rater_id")), str(record.get("criterion")), str(record["item_key"]))
        tuples.setdefault(key, []).append((number, record))
    result = []
    for (rater, criterion, item_key), members in tuples.items():
        best = [(n, r) for n, r in members if r["role"] == "best"]
        worst = [(n, r) for n, r in members if r["role"] == "worst"]
        for number, winner in best:
            for _, other in members:
                if other is not winner:
                    result.append((number, _implied(winner, other, rater, criterion, item_key)))
        for number, loser in worst:
            for _, other in members:
                if other is not loser and other["role"] == "neither":
                    result.append((number, _implied(other, loser, rater, criterion, item_key)))
    return result


def _implied(
    winner: dict[str, Any], loser: dict[str, Any], rater: str, criterion: str, item_key: str
) -> dict[str, Any]:
    return {
        "item_id": f"{item_key}:{winner.get('story')}>{loser.get('story')}",
        "prompt_id": item_key,
        "system_a": winner.get("system"),
        "system_b": loser.get("system"),
        "winner": winner.get("system"),
        "rater_id": rater,
        "criterion": criterion,
    }


def _comparison_problem(record: dict[str, Any]) -> str:
    missing = [k for k in COMPARISON_FIELDS if record.get(k) in (None, "")]
    if missing:
        return f"missing field(s) {', '.join(missing)}"
    a, b, winner = str(record["system_a"]), str(record["system_b"]), str(record["winner"])
    if a == b:
        return f"system {a!r} is compared with itself"
    if winner not in (a, b, "tie"):
        return f"winner must be {a!r}, {b!r} or 'tie'; got {winner!r}"
    return ""


def _triples(frame: pd.DataFrame) -> list[tuple[str, str, str]]:
    return list(zip(frame["system_a"], frame["system_b"], frame["winner"], strict=True))


def _weighted(frame: pd.DataFrame, column: str | None) -> pd.DataFrame:
    """The comparisons with a ``_weight`` column (1 without ``column``)."""
    if column is None:
        return frame.assign(_weight=1.0)
    if column not in frame:
        if column == "strength" and "p_first" in frame:
            return frame.assign(_weight=(2 * frame["p_first"].astype(float) - 1).abs())
        raise ValueError(
            f"no column {column!r} to weigh the comparisons by (the columns: "
            f"{', '.join(map(str, frame.columns))})"
        )
    values = pd.to_numeric(frame[column], errors="coerce")
    if values.isna().any() or (values < 0).any():
        raise ValueError(f"the weights in {column!r} must be numbers >= 0")
    return frame.assign(_weight=values.astype(float))


def _fit(
    counts: Any,
    ties: str,
    systems: Sequence[str],
    anchors: Mapping[str, float] | None,
    *,
    prior: float = 0.0,
) -> Any:
    """Bradley-Terry, anchored to a stored table when ``anchors`` names a compared system."""
    from storyeval.meta.bradley_terry import anchored_bradley_terry

    if anchors and any(s in anchors for s in systems):
        return anchored_bradley_terry(counts, anchors, ties=ties, systems=systems)
    return bradley_terry(counts, ties=ties, systems=systems, prior=prior)


def _counts(frame: pd.DataFrame, systems: Sequence[str]) -> Any:
    from storyeval.meta.bradley_terry import count_comparisons

    weights = frame["_weight"].tolist() if "_weight" in frame else None
    return count_comparisons(_triples(frame), systems=systems, weights=weights)


def model_based_comparisons(comparisons: pd.DataFrame, method: str) -> pd.DataFrame:
    """People's comparisons of the same pair combined by a rater competence model
    (``mace`` or ``dawid-skene``; :mod:`storyeval.meta.competence`): per pair (``item_id``
    and the two systems) and criterion, one row per outcome (the first system of the sorted
    pair wins, the second wins, a tie) with its posterior probability in ``_weight``, the
    pair's key in ``_pair`` and the cumulative bounds ``_low``/``_high`` that
    :func:`draw_outcomes` samples from. A rater who answers at random counts for little.
    """
    from storyeval.meta.competence import competence_tables

    if method not in ("mace", "dawid-skene"):
        raise ValueError(f"comparisons combine with mace or dawid-skene; got {method!r}")
    first = comparisons[["system_a", "system_b"]].min(axis=1)
    second = comparisons[["system_a", "system_b"]].max(axis=1)
    pair = comparisons["item_id"] + "|" + first + "|" + second
    outcome = np.where(
        comparisons["winner"] == "tie", 0.0, np.where(comparisons["winner"] == first, 1.0, -1.0)
    )
    long = pd.DataFrame(
        {
            "item_id": pair,
            "rater_id": comparisons["rater_id"].astype(str).to_numpy(),
            "criterion": comparisons["criterion"].astype(str).to_numpy(),
            "value": outcome,
        }
    )
    long = long.drop_duplicates(["item_id", "rater_id", "criterion"], keep="last")
    _, posteriors = competence_tables(long, model=method)
    info = pd.DataFrame(
        {"_pair": pair, "prompt_id": comparisons["prompt_id"], "a": first, "b": second}
    )
    info = info.drop_duplicates("_pair").set_index("_pair")
    rows = []
    for record in posteriors.to_dict("records"):
        a, b, prompt = info.loc[record["item_id"], ["a", "b", "prompt_id"]]
        low = 0.0
        for value, winner in ((1.0, a), (0.0, "tie"), (-1.0, b)):
            weight = float(record.get(f"p_{value}", 0.0) or 0.0)
            rows.append(
                {
                    "item_id": str(record["item_id"]).split("|", 1)[0],
                    "prompt_id": prompt,
                    "system_a": a,
                    "system_b": b,
                    "winner": winner,
                    "rater_id": method,
                    "criterion": record["criterion"],
                    "_pair": record["item_id"],
                    "_weight": weight,
                    "_low": low,
                    "_high": low + weight,
                }
            )
            low += weight
    frame = pd.DataFrame(rows)
    return frame[frame["_weight"] > 0].reset_index(drop=True)


def draw_outcomes(
    frame: pd.DataFrame, rng: np.random.Generator, copy: pd.Series | None = None
) -> pd.DataFrame:
    """One outcome per pair (per ``copy`` of it in a bootstrap sample) drawn from the
    posterior of :func:`model_based_comparisons`, each with weight 1."""
    key = frame["_pair"] if copy is None else copy.astype(str) + "#" + frame["_pair"]
    codes, uniques = pd.factorize(key)
    u = rng.random(len(uniques))[codes]
    total = frame.groupby(key)["_weight"].transform("sum").to_numpy()
    picked = (frame["_low"].to_numpy() <= u * total) & (u * total < frame["_high"].to_numpy())
    return frame[picked].assign(_weight=1.0)


def _modal(frame: pd.DataFrame) -> pd.DataFrame:
    """The most probable outcome of each pair (for Elo and the tallies)."""
    order = frame.sort_values("_weight", ascending=False, kind="stable")
    return order.drop_duplicates("_pair").sort_index()


def _tallies(frame: pd.DataFrame, systems: Sequence[str]) -> dict[str, tuple[int, int, int, int]]:
    """Per system: comparisons, wins, losses, ties."""
    result = {}
    for system in systems:
        mine = frame[(frame["system_a"] == system) | (frame["system_b"] == system)]
        wins = int((mine["winner"] == system).sum())
        ties = int((mine["winner"] == "tie").sum())
        result[system] = (len(mine), wins, len(mine) - wins - ties, ties)
    return result


def _elo_mean(
    triples: list[tuple[str, str, str]], systems: Sequence[str], shuffles: int, seed: int
) -> dict[str, float]:
    """Elo averaged over seeded shuffles of the comparisons (Elo depends on their order)."""
    rng = random.Random(seed)
    totals = dict.fromkeys(systems, 0.0)
    for _ in range(shuffles):
        order = list(triples)
        rng.shuffle(order)
        for system, rating in elo(order, systems=systems).items():
            totals[system] += rating / shuffles
    return totals


def rank_systems(
    comparisons: pd.DataFrame,
    *,
    criterion: str | None = None,
    ties: str = "davidson",
    n_boot: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    elo_shuffles: int = 20,
    weights: str | None = None,
    anchors: Mapping[str, float] | None = None,
    aggregate: str | None = None,
) -> pd.DataFrame:
    """Bradley-Terry strengths (log-odds scale, mean 0) and Elo ratings per system, with
    percentile bootstrap intervals over prompts.

    ``weights`` names a numeric column that weighs each comparison in the Bradley-Terry
    likelihood (margin-weighted comparisons: "A much better" counts more than "A slightly
    better", as EQ-Bench's Creative Writing scores them); ``strength`` is derived from a
    judge's ``p_first`` when the column is absent (``|2 p - 1|``: 0 for a coin flip, 1 for a
    certain judge). Elo ignores the weights.

    ``aggregate`` (``mace`` or ``dawid-skene``) first combines the raters of each pair by a
    competence model (:func:`model_based_comparisons`): Bradley-Terry is fitted on each
    outcome weighted by its posterior probability, every bootstrap replicate draws the
    outcomes from the posteriors (the interval carries the labels' uncertainty), and Elo and
    the tallies use each pair's most probable outcome.

    ``anchors`` (system -> strength, e.g. the Bradley-Terry rows of an earlier run) keep
    those systems' strengths fixed, so a new system joins a stored pool on its scale (an
    anchored pool: a few comparisons against its neighbours suffice; see ``next_pairs``).

    Parameters
    ----------
    comparisons : DataFrame
        From :func:`read_comparisons` (or the ``comparisons`` of a pairwise judge run).
    criterion : str, optional
        Use only this criterion's comparisons (default: all).
    ties : {"davidson", "half", "drop"}
    n_boot : int
        Bootstrap replicates (0: no interval); each resamples prompts with replacement.
    confidence : float
    seed : int
    elo_shuffles : int
        Elo is averaged over this many seeded orders of the comparisons.

    Returns
    -------
    DataFrame
        :data:`RANK_COLUMNS`, one row per system and method (``bradley-terry``, ``elo``),
        best first within a method.

    Examples
    --------
    >>> frame = pd.DataFrame({"item_id": list("abcdef"), "prompt_id": list("pqrpqr"),
    ...     "system_a": ["x", "x", "x", "y", "y", "y"], "system_b": ["y", "y", "y", "z", "z", "z"],
    ...     "winner": ["x", "x", "y", "y", "y", "z"]})
    >>> table = rank_systems(frame, n_boot=0)
    >>> table[table["method"] == "bradley-terry"]["system"].tolist()
    ['x', 'y', 'z']
    """
    frame = comparisons if criterion is None else comparisons[comparisons["criterion"] == criterion]
    if frame.empty:
        raise ValueError(
            f"no comparison{'' if criterion is None else f' of criterion {criterion!r}'}"
        )
    check_n_boot(n_boot)
    check_confidence(confidence)
    if aggregate is not None and weights is not None:
        raise ValueError("weights and aggregate cannot be combined (the posterior weighs)")
    n_compared = len(frame)
    frame = model_based_comparisons(frame, aggregate) if aggregate else _weighted(frame, weights)
    modal = _modal(frame) if aggregate else frame
    systems = list(dict.fromkeys([*frame["system_a"], *frame["system_b"]]))
    fit = _fit(_counts(frame, systems), ties, systems, anchors)
    ratings = _elo_mean(_triples(modal), systems, elo_shuffles, seed)
    intervals = _bootstrap(frame, systems, ties, n_boot, confidence, seed, elo_shuffles, anchors)
    tallies = _tallies(modal, systems)
    signature = Signature(
        "rank",
        {
            "ties": ties,
            "bootstrap": n_boot,
            "resample": "prompts",
            "confidence": confidence,
            "seed": seed,
            "elo_shuffles": elo_shuffles,
            "criterion": criterion or "all",
            "comparisons": n_compared,
            "weights": weights or "none",
            **({"aggregate": aggregate, "labels": "posterior-draws"} if aggregate else {}),
            "anchored": len([s for s in systems if anchors and s in anchors]),
        },
        __version__,
    ).render()
    rows = []
    for method, values in (("bradley-terry", fit.strengths), ("elo", ratings)):
        for system in sorted(systems, key=lambda s: -values[s]):
            low, high = intervals.get((method, system), (math.nan, math.nan))
            rows.append(
                dict(
                    zip(
                        RANK_COLUMNS,
                        (system, method, values[system], low, high, *tallies[system], signature),
                        strict=True,
                    )
                )
            )
    return pd.DataFrame(rows, columns=list(RANK_COLUMNS))


def _bootstrap(
    frame: pd.DataFrame,
    systems: Sequence[str],
    ties: str,
    n_boot: int,
    confidence: float,
    seed: int,
    shuffles: int,
    anchors: Mapping[str, float] | None = None,
) -> dict[tuple[str, str], tuple[float, float]]:
    import warnings

    from storyeval.base.errors import DegenerateInputWarning

    if n_boot == 0:
        return {}
    rng = np.random.default_rng(seed)
    groups = {key: group for key, group in frame.groupby("prompt_id", sort=True)}
    keys = list(groups)
    draws: dict[tuple[str, str], list[float]] = {}
    for replicate in range(n_boot):
        chosen = rng.integers(0, len(keys), len(keys))
        if "_pair" in frame:  # posterior outcomes: draw one per pair and copy of it
            parts = [groups[keys[i]].assign(_copy=j) for j, i in enumerate(chosen)]
            sample = pd.concat(parts, ignore_index=True)
            sample = draw_outcomes(sample, rng, sample["_copy"])
        else:
            sample = pd.concat([groups[keys[i]] for i in chosen], ignore_index=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DegenerateInputWarning)
            fit = _fit(_counts(sample, systems), ties, systems, anchors, prior=0.01)
        ratings = _elo_mean(_triples(sample), systems, max(1, shuffles // 5), seed + replicate)
        for system in systems:
            draws.setdefault(("bradley-terry", system), []).append(fit.strengths[system])
            draws.setdefault(("elo", system), []).append(ratings[system])
    tail = (1 - confidence) / 2 * 100
    return {
        key: (float(np.percentile(values, tail)), float(np.percentile(values, 100 - tail)))
        for key, values in draws.items()
    }


def win_rate_matrix(comparisons: pd.DataFrame) -> pd.DataFrame:
    """``[row, column]``: share of their comparisons the row system won, ties counting half.

    >>> frame = pd.DataFrame({"system_a": ["x", "x"], "system_b": ["y", "y"], "winner": ["x", "tie"]})
    >>> win_rate_matrix(frame).loc["x", "y"]
    np.float64(0.75)
    """
    counts = count_comparisons(_triples(comparisons))
    return pd.DataFrame(
        counts.win_rates(), index=list(counts.systems), columns=list(counts.systems)
    )


def next_pairs(
    comparisons: pd.DataFrame, *, budget: int = 10, systems: Sequence[str] | None = None
) -> pd.DataFrame:
    """Which pairs to compare next: never-compared (then least-compared) pairs first, ties
    broken by closeness in the current Bradley-Terry ranking (neighbours are the informative
    comparisons), so K systems need about K log K comparisons, not K^2.

    Returns
    -------
    DataFrame
        ``system_a, system_b, comparisons, gap`` (strength difference), ``budget`` rows.
    """
    import itertools
    import warnings

    from storyeval.base.errors import DegenerateInputWarning

    names = (
        list(systems)
        if systems is not None
        else list(dict.fromkeys([*comparisons["system_a"], *comparisons["system_b"]]))
    )
    counts = count_comparisons(_triples(comparisons), systems=names)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DegenerateInputWarning)
        strengths = (
            bradley_terry(counts, prior=0.01).strengths if counts.n else dict.fromkeys(names, 0.0)
        )
    total = counts.wins + counts.wins.T + counts.ties
    rows = []
    for i, j in itertools.combinations(range(len(names)), 2):
        gap = abs(strengths[names[i]] - strengths[names[j]])
        rows.append(
            {
                "system_a": names[i],
                "system_b": names[j],
                "comparisons": int(total[i, j]),
                "gap": gap,
            }
        )
    plan = pd.DataFrame(rows).sort_values(["comparisons", "gap"], kind="stable")
    return plan.head(budget).reset_index(drop=True)


# --------------------------------------------------------------------------- paired tests


def paired_test(
    a: Sequence[float],
    b: Sequence[float],
    *,
    method: PairedMethod = "bootstrap",
    n_resamples: int = 10_000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, Any]:
    """Is system A better than system B on paired values (the same prompts)?

    ``bootstrap``: percentile interval of the mean difference from resampled pairs, and the
    two-sided p-value of 0 lying outside it; ``permutation``: approximate randomisation (each
    pair's difference flips sign at random), two-sided; ``sign``: the two-sided sign test
    (zero differences left out).

    Returns
    -------
    dict
        ``method, n, mean_difference, ci_low, ci_high, p_value``.

    Examples
    --------
    >>> result = paired_test([3, 4, 5, 4, 5, 4], [2, 3, 4, 4, 3, 3], method="sign")
    >>> result["n"], round(result["p_value"], 4)
    (6, 0.0625)
    """
    from scipy.stats import binomtest

    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.shape != y.shape or x.ndim != 1 or len(x) < 2:
        raise ValueError("a and b must be 1-D and of one length >= 2 (one value per prompt)")
    keep = np.isfinite(x) & np.isfinite(y)
    diff = (x - y)[keep]
    rng = np.random.default_rng(seed)
    result: dict[str, Any] = {
        "method": method,
        "n": len(diff),
        "mean_difference": float(diff.mean()),
    }
    result.update(ci_low=math.nan, ci_high=math.nan, p_value=math.nan)
    tail = (1 - confidence) / 2
    if method == "bootstrap":
        means = diff[rng.integers(0, len(diff), (n_resamples, len(diff)))].mean(axis=1)
        result.update(
            ci_low=float(np.quantile(means, tail)), ci_high=float(np.quantile(means, 1 - tail))
        )
        share = min((means <= 0).mean(), (means >= 0).mean())
        result["p_value"] = float(min(1.0, 2 * share))
    elif method == "permutation":
        signs = rng.choice([-1.0, 1.0], size=(n_resamples, len(diff)))
        null = np.abs((signs * diff).mean(axis=1))
        result["p_value"] = float(
            (1 + (null >= abs(diff.mean()) - 1e-12).sum()) / (1 + n_resamples)
        )
    elif method == "sign":
        wins, losses = int((diff > 0).sum()), int((diff < 0).sum())
        if wins + losses:
            result["p_value"] = float(binomtest(wins, wins + losses, 0.5).pvalue)
    else:
        raise ValueError(f"method must be bootstrap, permutation or sign; got {method!r}")
    return result


def prompts_needed(effect: float, sd: float, *, alpha: float = 0.05, power: float = 0.8) -> int:
    """Prompts needed to detect a mean paired difference ``effect`` when the per-prompt
    differences have standard deviation ``sd`` (two-sided paired t-test).

    >>> prompts_needed(0.5, 1.0)
    34
    """
    from statsmodels.stats.power import TTestPower

    if effect <= 0 or sd <= 0:
        raise ValueError("effect and sd must be > 0")
    n = TTestPower().solve_power(
        effect_size=effect / sd, alpha=alpha, power=power, alternative="two-sided"
    )
    return math.ceil(float(n))


def minimum_detectable_effect(
    n: int, sd: float, *, alpha: float = 0.05, power: float = 0.8
) -> float:
    """The smallest mean paired difference ``n`` prompts detect (two-sided paired t-test).

    >>> round(minimum_detectable_effect(34, 1.0), 3)
    0.495
    """
    from statsmodels.stats.power import TTestPower

    if n < 2 or sd <= 0:
        raise ValueError("n must be >= 2 and sd > 0")
    size = TTestPower().solve_power(nobs=n, alpha=alpha, power=power, alternative="two-sided")
    return float(size * sd)


def paired_values(
    path: str | Path,
    metric: str,
    system_a: str,
    system_b: str,
    *,
    stories: str | Path | None = None,
) -> tuple[list[float], list[float]]:
    """The values of two systems on the prompts both have, from a score file (``metric``) or
    a judgment file (``criterion``); systems and prompts from the records or a story file.

    Raises
    ------
    ValueError
        An unknown metric or system, or fewer than two shared prompts.
    """
    shared = _prompt_means(path, metric, system_a, system_b, stories)
    return shared[system_a].tolist(), shared[system_b].tolist()


def paired_differences(
    path: str | Path,
    metric: str,
    system_a: str,
    system_b: str,
    *,
    stories: str | Path | None = None,
) -> pd.Series:
    """A's value minus B's on each prompt both have, indexed by prompt id (read as
    :func:`paired_values` reads them)."""
    shared = _prompt_means(path, metric, system_a, system_b, stories)
    return (shared[system_a] - shared[system_b]).rename("difference")


def _prompt_means(
    path: str | Path, metric: str, system_a: str, system_b: str, stories: str | Path | None
) -> pd.DataFrame:
    """Each system's mean value per prompt, for the prompts both systems have."""
    frame = _long_values(path, metric)
    if stories is not None:
        from storyeval.corpus import prompt_id, read_stories

        info = {s.id: (s.system, prompt_id(s)) for s in read_stories(stories)}
        frame["system"] = frame["item_id"].map(lambda i: info.get(i, (None, None))[0])
        frame["prompt_id"] = frame["item_id"].map(lambda i: info.get(i, (None, None))[1])
    if frame.get("system") is None or frame["system"].isna().all():
        raise ValueError("the records have no system: pass the story file with --stories")
    for system in (system_a, system_b):
        if system not in set(frame["system"]):
            raise ValueError(
                f"no value of system {system!r}; systems: {', '.join(sorted(map(str, set(frame['system']))))}"
            )
    means = frame.groupby(["prompt_id", "system"])["value"].mean().unstack("system")
    shared = means[[system_a, system_b]].dropna()
    if len(shared) < 2:
        raise ValueError(f"{system_a} and {system_b} share fewer than two prompts")
    return shared


def _long_values(path: str | Path, name: str) -> pd.DataFrame:
    from storyeval.corpus import read_judgments, read_scores

    try:
        records = [s.to_dict() for s in read_scores(path)]
        key = "metric"
    except DataFileError:
        records = [j.to_dict() for j in read_judgments(path)]
        key = "criterion"
    frame = pd.DataFrame(records)
    chosen = frame[frame[key] == name].copy()
    if chosen.empty:
        raise ValueError(f"no {key} {name!r} in {path}; found {', '.join(sorted(set(frame[key])))}")
    chosen["value"] = pd.to_numeric(chosen["value"], errors="coerce")
    return chosen
