"""Prediction-powered inference: a judge on every item, people on a random subset.

People's judgments are expensive and an LLM judge's are cheap but biased. Prediction-powered
inference (Angelopoulos et al. 2023) estimates what people would say over all items from the
judge's answers on every item, corrected by the judge's error on the items people judged (the
*rectifier*); PPI++ (Angelopoulos, Duchi and Zrnic 2024) weighs the judge by a power-tuning
factor ``lam`` in [0, 1] fitted to the data, so the interval is never (asymptotically) wider
than people's alone: ``lam`` is 0 for a judge unrelated to people (the classical interval) and
near 1 for one that agrees with them.

The estimate of the mean is ``lam * mean(judge on unlabelled) + mean(people - lam * judge)``
over the labelled items, with a normal interval whose variance adds both parts. The numbers
equal those of the ``ppi-python`` package (``ppi_mean_pointestimate`` and ``ppi_mean_ci``,
tested to 1e-8).

Assumption: the items people judged are drawn at random from all items (not the easy ones,
not the first ones); otherwise the rectifier is biased and so is the estimate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from storyeval.corpus import Judgment
from storyeval.signature import Signature

PPI_COLUMNS = [
    "group", "estimate", "ci_low", "ci_high", "lam", "n_labeled", "n_unlabeled",
    "classical_estimate", "classical_ci_low", "classical_ci_high", "width_ratio", "signature",
]  # fmt: skip


@dataclass(frozen=True)
class PPIMean:
    """A prediction-powered mean beside the classical mean of the labelled items alone.

    ``width_ratio`` is the prediction-powered interval's width over the classical one's (below
    1: the judge saved people's judgments)."""

    estimate: float
    ci_low: float
    ci_high: float
    lam: float
    n_labeled: int
    n_unlabeled: int
    classical_estimate: float
    classical_ci_low: float
    classical_ci_high: float

    @property
    def width_ratio(self) -> float:
        """The prediction-powered interval's width over the classical one's."""
        classical = self.classical_ci_high - self.classical_ci_low
        return float((self.ci_high - self.ci_low) / classical) if classical > 0 else float("nan")


def _vector(values: Sequence[float] | np.ndarray, name: str) -> np.ndarray:
    array = np.asarray(values, dtype=float).ravel()
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} must be finite numbers (found NaN or infinity)")
    return array


def power_tuning(labels: np.ndarray, predicted: np.ndarray, unlabeled: np.ndarray) -> float:
    """PPI++'s variance-minimising weight of the judge for a mean, clipped to [0, 1]:
    ``cov(people, judge) / ((1 + n / N) var(judge))`` (covariance over the labelled items,
    the judge's variance over all items), as ``ppi-python`` computes it."""
    n, total = len(labels), len(unlabeled)
    covariance = float(np.mean((labels - labels.mean()) * (predicted - predicted.mean())))
    variance = float(np.var(np.concatenate([predicted, unlabeled]), ddof=1))
    if variance <= 0:
        return 0.0
    return float(np.clip(covariance / ((1 + n / total) * variance), 0.0, 1.0))


def ppi_mean(
    labels: Sequence[float] | np.ndarray,
    predicted: Sequence[float] | np.ndarray,
    unlabeled: Sequence[float] | np.ndarray,
    *,
    confidence: float = 0.95,
    lam: float | None = None,
    interval: str = "normal",
) -> PPIMean:
    """The prediction-powered (PPI++) mean of people's values and its normal interval.

    Parameters
    ----------
    labels : array of float
        People's values on the labelled items (e.g. the mean verdict of the experts).
    predicted : array of float
        The judge's values on the same items, in the same order.
    unlabeled : array of float
        The judge's values on the items people did not judge.
    confidence : float
        Coverage of the interval.
    lam : float, optional
        The judge's weight: ``None`` fits it (PPI++), 1 is the original PPI, 0 the classical
        mean of the labelled items.
    interval : {"normal", "t"}
        ``normal``: the papers' (and ``ppi-python``'s) normal interval with plug-in variances;
        ``t``: Student's t with n - 1 degrees of freedom and unbiased variances, which keeps
        its coverage with a few dozen labelled items where the normal one falls short.
    """
    if interval not in ("normal", "t"):
        raise ValueError(f"interval must be 'normal' or 't', got {interval!r}")
    y, yhat, rest = (
        _vector(labels, "labels"),
        _vector(predicted, "predicted"),
        _vector(unlabeled, "unlabeled"),
    )
    if len(y) != len(yhat):
        raise ValueError(f"labels ({len(y)}) and predicted ({len(yhat)}) differ in length")
    if len(y) < 2 or len(rest) < 1:
        raise ValueError(
            "prediction-powered inference needs >= 2 labelled and >= 1 unlabelled items"
        )
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    weight = power_tuning(y, yhat, rest) if lam is None else float(lam)
    n, total = len(y), len(rest)
    estimate = float(weight * rest.mean() + (y - weight * yhat).mean())
    ddof = 1 if interval == "t" else 0
    spread = np.sqrt(
        np.var(weight * rest, ddof=ddof if total > 1 else 0) / total
        + np.var(y - weight * yhat, ddof=ddof) / n
    )
    tail = 1 - (1 - confidence) / 2
    z = float(stats.norm.ppf(tail) if interval == "normal" else stats.t.ppf(tail, n - 1))
    classical = float(y.mean())
    classical_spread = float(np.std(y, ddof=ddof) / np.sqrt(n))
    return PPIMean(
        estimate=estimate,
        ci_low=float(estimate - z * spread),
        ci_high=float(estimate + z * spread),
        lam=weight,
        n_labeled=n,
        n_unlabeled=total,
        classical_estimate=classical,
        classical_ci_low=classical - z * classical_spread,
        classical_ci_high=classical + z * classical_spread,
    )


def ppi_signature(confidence: float, lam: float | None, rows: int, interval: str) -> Signature:
    """The signature of a prediction-powered table."""
    return Signature(
        "ppi_mean",
        {
            "method": "ppi++" if lam is None else f"ppi:lam={lam}",
            "interval": interval,
            "confidence": confidence,
            "items": rows,
        },
    )


def ppi_means_by(
    frame: pd.DataFrame,
    *,
    group: str,
    human: str = "human",
    judge: str = "judge",
    confidence: float = 0.95,
    lam: float | None = None,
    interval: str = "t",
) -> pd.DataFrame:
    """Prediction-powered means per group (a system, a condition): one row per item with the
    judge's value in ``judge`` and people's in ``human`` (NaN where people did not judge it).
    Groups with fewer than two labelled or no unlabelled items get NaN and the classical mean."""
    for column in (group, human, judge):
        if column not in frame.columns:
            raise ValueError(f"the table has no column {column!r}")
    if frame[judge].isna().any():
        raise ValueError("the judge must have a value on every item")
    signature = ppi_signature(confidence, lam, len(frame), interval).render()
    rows = []
    for name, part in frame.groupby(group, sort=True):
        labeled = part[part[human].notna()]
        rest = part.loc[part[human].isna(), judge].to_numpy(float)
        if len(labeled) < 2 or len(rest) < 1:
            mean = float(labeled[human].mean()) if len(labeled) else float("nan")
            rows.append({"group": name, "estimate": np.nan, "classical_estimate": mean})
            continue
        found = ppi_mean(
            labeled[human].to_numpy(float),
            labeled[judge].to_numpy(float),
            rest,
            confidence=confidence,
            lam=lam,
            interval=interval,
        )
        rows.append({"group": name, **found.__dict__, "width_ratio": found.width_ratio})
    table = pd.DataFrame(rows).reindex(columns=PPI_COLUMNS)
    table["signature"] = signature
    return table


def _field(judgment: Judgment, name: str) -> object:
    value = getattr(judgment, name, None) if name in ("study", "condition") else None
    return value if value is not None else judgment.extra.get(name)


def ppi_table(
    humans: Sequence[Judgment],
    judge: Sequence[Judgment],
    *,
    by: str = "system",
    criteria: Sequence[str] | None = None,
    rater: str | None = None,
) -> tuple[pd.DataFrame, int]:
    """One row per (item, criterion) the judge answered: its group (``by``, read from the
    judge's or people's record), the judge's value and people's mean (NaN where no one
    judged it); and how many people-judged items the judge did not answer (left out)."""
    raters = {j.rater_id for j in judge}
    if rater is None and len(raters) > 1:
        raise ValueError(
            f"the judge file holds {len(raters)} raters ({', '.join(sorted(raters)[:5])}): name one with rater"
        )
    wanted = set(criteria) if criteria else None
    answers: dict[tuple[str, str], tuple[float, object]] = {}
    for j in judge:
        if (rater is None or j.rater_id == rater) and (wanted is None or j.criterion in wanted):
            answers[(j.item_id, j.criterion)] = (j.value, _field(j, by))
    if not answers:
        raise ValueError("the judge answered none of the items asked for")
    people: dict[tuple[str, str], list[float]] = {}
    groups: dict[tuple[str, str], object] = {}
    for j in humans:
        if wanted is None or j.criterion in wanted:
            people.setdefault((j.item_id, j.criterion), []).append(j.value)
            groups.setdefault((j.item_id, j.criterion), _field(j, by))
    rows = []
    for (item, criterion), (value, group) in answers.items():
        label = people.get((item, criterion))
        group = group if group is not None else groups.get((item, criterion))
        if group is None:
            raise ValueError(f"item {item!r} has no {by!r} in the judge's or people's records")
        mean = float(np.mean(label)) if label else np.nan
        rows.append(
            {"item_id": item, "criterion": criterion, by: str(group), "judge": value, "human": mean}
        )
    dropped = sum(1 for key in people if key not in answers)
    return pd.DataFrame(rows), dropped
