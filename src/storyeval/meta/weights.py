"""Weights fitted to people: a weighted sum of judge answers (checklist items, several judges)
that predicts people's ratings, with honest (cross-fitted) predictions.

The fit is a ridge regression on standardised features (optionally with non-negative
weights, as for a jury whose members should not count against their own answers). Every
story that people rated gets an out-of-fold prediction (folds by prompt, so a prompt's stories
never help predict each other); stories without people's ratings get the full fit's
prediction. The weights carry bootstrap intervals (stories resampled), and the evaluation
table sets the fitted sum beside the equal-weight sum and each feature alone, all against
people by the same cross-validated predictions.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from storyeval.base.errors import StoryevalError
from storyeval.base.signature import Signature


class WeightFitError(StoryevalError, ValueError):
    """Features and people's ratings that cannot be fitted."""


@dataclass
class WeightFit:
    """The result of :func:`fit_weights`.

    Attributes
    ----------
    weights : DataFrame
        ``feature, weight, ci_low, ci_high, standardized_weight``: the weight of a feature in
        its own units (one more unit of the feature moves the prediction by ``weight``), its
        bootstrap interval, and its weight per standard deviation.
    intercept : float
        The prediction when every feature is 0.
    evaluation : DataFrame
        ``predictor, statistic, estimate, ci_low, ci_high, n``: Pearson, Spearman and Kendall
        correlations with people of the fitted sum's out-of-fold predictions, of the equal-weight
        sum and of each feature alone, with bootstrap intervals.
    predictions : Series
        Per item: out-of-fold for items people rated, the full fit's otherwise.
    signature : Signature
    feature_means : list of float
        The features' means at fitting (a missing value in :meth:`predict` counts as the mean).
    """

    weights: pd.DataFrame
    intercept: float
    evaluation: pd.DataFrame
    predictions: pd.Series
    signature: Signature
    feature_means: list[float] = field(default_factory=list)

    def predict(self, features: pd.DataFrame) -> pd.Series:
        """The fitted sum for new items (columns as at fitting; a missing value counts as the
        feature's mean at fitting)."""
        table = self.weights.set_index("feature")
        missing = [f for f in table.index if f not in features.columns]
        if missing:
            raise WeightFitError(f"features lack column(s) {', '.join(missing)}")
        values = features[list(table.index)].astype(float)
        values = values.fillna(pd.Series(self.feature_means, index=table.index))
        return self.intercept + values @ table["weight"]


def _solve(x: np.ndarray, y: np.ndarray, ridge: float, nonnegative: bool) -> np.ndarray:
    """Ridge weights of centred ``y`` on standardised ``x`` (non-negative if asked)."""
    k = x.shape[1]
    design = np.vstack([x, np.sqrt(ridge) * np.eye(k)])
    target = np.concatenate([y, np.zeros(k)])
    if nonnegative:
        from scipy.optimize import nnls

        return np.asarray(nnls(design, target)[0])
    return np.asarray(np.linalg.lstsq(design, target, rcond=None)[0])


@dataclass(frozen=True)
class _Model:
    means: np.ndarray
    scales: np.ndarray
    coef: np.ndarray  # per standard deviation
    centre: float

    @classmethod
    def fit(cls, x: np.ndarray, y: np.ndarray, ridge: float, nonnegative: bool) -> _Model:
        means = x.mean(axis=0)
        scales = x.std(axis=0)
        scales[scales == 0] = 1.0
        coef = _solve((x - means) / scales, y - y.mean(), ridge, nonnegative)
        return cls(means, scales, coef, float(y.mean()))

    def predict(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(self.centre + ((x - self.means) / self.scales) @ self.coef)

    @property
    def raw(self) -> tuple[np.ndarray, float]:
        """Weights in the features' units and the intercept."""
        weights = self.coef / self.scales
        return weights, float(self.centre - self.means @ weights)


def _folds(groups: np.ndarray, folds: int, seed: int) -> np.ndarray:
    """A fold per item, whole groups (prompts) kept together."""
    unique = np.unique(groups)
    order = np.random.default_rng(seed).permutation(unique.size)
    fold_of = {g: int(i % folds) for i, g in zip(range(unique.size), unique[order], strict=True)}
    return np.array([fold_of[g] for g in groups])


def _out_of_fold(
    x: np.ndarray, y: np.ndarray, fold: np.ndarray, ridge: float, nonnegative: bool
) -> np.ndarray:
    out = np.empty_like(y)
    for k in np.unique(fold):
        test = fold == k
        model = _Model.fit(x[~test], y[~test], ridge, nonnegative)
        out[test] = model.predict(x[test])
    return out


def _correlations(
    name: str, predicted: np.ndarray, target: np.ndarray, draws: np.ndarray
) -> list[dict[str, object]]:
    from storyeval.base.stats import percentile_interval, rows_correlation

    rows: list[dict[str, object]] = []
    for method in ("pearson", "spearman", "kendall"):
        estimate = float(rows_correlation(predicted[None, :], target[None, :], method=method)[0])
        replicates = rows_correlation(predicted[draws], target[draws], method=method)
        low, high = percentile_interval(replicates, label=f"{name} {method}")
        rows.append(
            {
                "predictor": name,
                "statistic": method,
                "estimate": estimate,
                "ci_low": low,
                "ci_high": high,
                "n": int(target.size),
            }
        )
    return rows


def _weight_intervals(
    x: np.ndarray, y: np.ndarray, draws: np.ndarray, ridge: float, nonnegative: bool
) -> tuple[np.ndarray, np.ndarray]:
    from storyeval.base.stats import percentile_interval

    samples = np.array([_Model.fit(x[d], y[d], ridge, nonnegative).raw[0] for d in draws])
    bounds = [percentile_interval(samples[:, j]) for j in range(x.shape[1])]
    return np.array([b[0] for b in bounds]), np.array([b[1] for b in bounds])


def _check(features: pd.DataFrame, target: pd.Series) -> pd.Index:
    if features.empty or features.shape[1] == 0:
        raise WeightFitError("no features to fit")
    rated = features.index.intersection(target.dropna().index)
    complete = features.loc[rated].dropna().index
    if len(complete) < 10:
        raise WeightFitError(
            f"only {len(complete)} item(s) have every feature and a rating by people; "
            "fitting weights needs at least 10"
        )
    return complete


def fit_weights(
    features: pd.DataFrame,
    target: pd.Series,
    *,
    groups: Mapping[str, str] | None = None,
    signs: Mapping[str, float] | None = None,
    nonnegative: bool = False,
    ridge: float = 1.0,
    folds: int = 5,
    n_boot: int = 500,
    seed: int = 0,
) -> WeightFit:
    """Fit the weights of a sum of ``features`` to people's ratings ``target``.

    Parameters
    ----------
    features : DataFrame
        Index item ids, one numeric column per feature (a checklist item's probability of
        *yes*, a judge's score).
    target : Series
        People's rating per item id (items without one get predictions but are not fitted).
    groups : mapping of item id to group, optional
        Prompt of each item: folds keep a prompt's items together (default: each item alone).
    signs : mapping of feature to +1 or -1, optional
        The direction of each feature for the equal-weight baseline (-1 for a flaw).
    nonnegative : bool
        Constrain the standardised weights to be >= 0 (juries).
    ridge : float
        The ridge penalty on the standardised weights (> 0 keeps correlated items stable).
    folds : int
        Cross-fitting folds (>= 2).

    Returns
    -------
    WeightFit
    """
    if ridge < 0 or folds < 2 or n_boot < 0:
        raise WeightFitError("ridge must be >= 0, folds >= 2 and n_boot >= 0")
    rated = _check(features, target)
    names = [str(c) for c in features.columns]
    x = features.loc[rated].to_numpy(dtype=float)
    y = target.loc[rated].to_numpy(dtype=float)
    group = np.array([str((groups or {}).get(str(i), i)) for i in rated])
    folds = min(folds, np.unique(group).size)
    if folds < 2:
        raise WeightFitError("cross-fitting needs items of at least two prompts")
    fold = _folds(group, folds, seed)
    held_out = _out_of_fold(x, y, fold, ridge, nonnegative)
    full = _Model.fit(x, y, ridge, nonnegative)
    draws = np.random.default_rng(seed).integers(0, y.size, size=(n_boot, y.size))
    low, high = (
        _weight_intervals(x, y, draws, ridge, nonnegative)
        if n_boot
        else (np.full(len(names), np.nan),) * 2
    )
    raw, intercept = full.raw
    table = pd.DataFrame(
        {
            "feature": names,
            "weight": raw,
            "ci_low": low,
            "ci_high": high,
            "standardized_weight": full.coef,
        }
    )
    evaluation = _evaluation(names, x, y, held_out, signs or {}, draws, full)
    predictions = _predictions(features, rated, held_out, full)
    signature = _signature(names, ridge, nonnegative, folds, seed, n_boot, len(rated))
    return WeightFit(table, intercept, evaluation, predictions, signature, list(full.means))


def _evaluation(
    names: list[str],
    x: np.ndarray,
    y: np.ndarray,
    held_out: np.ndarray,
    signs: Mapping[str, float],
    draws: np.ndarray,
    full: _Model,
) -> pd.DataFrame:
    direction = np.array([float(np.sign(signs.get(n, 1.0)) or 1.0) for n in names])
    equal = (((x - full.means) / full.scales) * direction).mean(axis=1)
    rows = _correlations("fitted (cross-fitted)", held_out, y, draws)
    rows += _correlations("equal weights", equal, y, draws)
    for j, name in enumerate(names):
        rows += _correlations(name, x[:, j], y, draws)
    return pd.DataFrame(rows)


def _predictions(
    features: pd.DataFrame, rated: pd.Index, held_out: np.ndarray, full: _Model
) -> pd.Series:
    complete = features.dropna()
    values = pd.Series(full.predict(complete.to_numpy(dtype=float)), index=complete.index)
    values.loc[rated] = held_out
    values.index.name = "item_id"
    return values.sort_index()


def _signature(
    names: list[str], ridge: float, nonnegative: bool, folds: int, seed: int, n_boot: int, n: int
) -> Signature:
    spec = json.dumps(names)
    return Signature(
        "weights",
        {
            "features": hashlib.sha256(spec.encode()).hexdigest()[:10],
            "k": len(names),
            "ridge": ridge,
            "nonneg": "yes" if nonnegative else "no",
            "folds": folds,
            "seed": seed,
            "boot": n_boot,
            "n": n,
        },
    )
