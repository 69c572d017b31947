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

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from storyeval.base.signature import Signature
from storyeval.base.validation import check_confidence
from storyeval.corpus import Judgment

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
    check_confidence(confidence)
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
    groups: Mapping[str, str] | None = None,
) -> tuple[pd.DataFrame, int]:
    """One row per (item, criterion) the judge answered: its group (from ``groups`` by item
    id, else ``by`` read from the judge's or people's record), the judge's value and people's
    mean (NaN where no one judged it); and how many people-judged items the judge did not
    answer (left out)."""
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
    found: dict[tuple[str, str], object] = {}
    for j in humans:
        if wanted is None or j.criterion in wanted:
            people.setdefault((j.item_id, j.criterion), []).append(j.value)
            found.setdefault((j.item_id, j.criterion), _field(j, by))
    rows = []
    for (item, criterion), (value, group) in answers.items():
        label = people.get((item, criterion))
        group = (groups or {}).get(
            item, group if group is not None else found.get((item, criterion))
        )
        if group is None:
            raise ValueError(f"item {item!r} has no {by!r} in the judge's or people's records")
        mean = float(np.mean(label)) if label else np.nan
        rows.append(
            {"item_id": item, "criterion": criterion, by: str(group), "judge": value, "human": mean}
        )
    dropped = sum(1 for key in people if key not in answers)
    return pd.DataFrame(rows), dropped


def _log1pexp(z: np.ndarray) -> np.ndarray:
    return np.asarray(np.logaddexp(0.0, z), dtype=float)


def _expit(z: np.ndarray) -> np.ndarray:
    from scipy.special import expit

    return np.asarray(expit(z), dtype=float)


def _logistic_fit(
    x: np.ndarray, y: np.ndarray, yhat: np.ndarray, x_rest: np.ndarray, yhat_rest: np.ndarray,
    lam: float, start: np.ndarray,
) -> np.ndarray:  # fmt: skip
    """The rectified logistic loss's minimiser (``ppi-python``'s optimiser and tolerance)."""
    from scipy.optimize import minimize

    n, total = len(y), len(yhat_rest)

    def loss(theta: np.ndarray) -> float:
        a, b = x @ theta, x_rest @ theta
        return float(
            lam / total * np.sum(-yhat_rest * b + _log1pexp(b))
            - lam / n * np.sum(-yhat * a + _log1pexp(a))
            + 1 / n * np.sum(-y * a + _log1pexp(a))
        )

    def gradient(theta: np.ndarray) -> np.ndarray:
        a, b = x @ theta, x_rest @ theta
        return np.asarray(
            lam / total * x_rest.T @ (_expit(b) - yhat_rest)
            - lam / n * x.T @ (_expit(a) - yhat)
            + 1 / n * x.T @ (_expit(a) - y)
        )

    found = minimize(
        loss, start, jac=gradient, method="L-BFGS-B", tol=1e-15, options={"ftol": 1e-15}
    )
    return np.asarray(found.x, dtype=float)


def _logistic_stats(
    theta: np.ndarray, x: np.ndarray, y: np.ndarray, yhat: np.ndarray, x_rest: np.ndarray,
    yhat_rest: np.ndarray, use_rest: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """Per-item gradients (people, judge on the labelled, judge on the rest) and the inverse
    Hessian, as ``ppi-python`` computes them."""
    n, total = len(y), len(yhat_rest)
    mu, mu_rest = _expit(x @ theta), _expit(x_rest @ theta)
    if use_rest:
        hessian = ((mu_rest * (1 - mu_rest))[:, None] * x_rest).T @ x_rest / (total + n)
        hessian += ((mu * (1 - mu))[:, None] * x).T @ x / (total + n)
    else:
        hessian = ((mu * (1 - mu))[:, None] * x).T @ x / n
    rest = x_rest * (mu_rest - yhat_rest)[:, None] if use_rest else np.zeros_like(x_rest)
    return x * (mu - y)[:, None], x * (mu - yhat)[:, None], rest, np.linalg.inv(hessian)


def ppi_logistic(
    x: np.ndarray,
    y: np.ndarray,
    yhat: np.ndarray,
    x_rest: np.ndarray,
    yhat_rest: np.ndarray,
    *,
    confidence: float = 0.95,
    lam: float | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """PPI++ logistic regression without intercept (Angelopoulos, Duchi and Zrnic 2024): the
    coefficients, their normal interval's lower and upper bounds, and ``lam``; equal to
    ``ppi-python``'s ``ppi_logistic_pointestimate`` and ``ppi_logistic_ci`` (whose interval,
    with ``lam`` fitted, is centred on an estimate refitted with ``lam`` tuned once more: a
    hair from the point estimate). ``y`` and the
    judge's ``yhat`` may be fractions (a tie as 0.5, a judge's probability)."""
    from sklearn.linear_model import LogisticRegression

    labels = (y > 0.5).astype(int) if set(np.unique(y)) - {0.0, 1.0} else y.astype(int)
    start = LogisticRegression(
        C=np.inf, solver="lbfgs", max_iter=10000, tol=1e-15, fit_intercept=False
    ).fit(x, labels).coef_.reshape(-1)  # fmt: skip
    d, n, total = x.shape[1], len(y), len(yhat_rest)
    weight = 1.0 if lam is None else float(lam)
    theta = _logistic_fit(x, y, yhat, x_rest, yhat_rest, weight, start)
    centre = theta
    if lam is None:  # PPI++: lam fitted at the PPI estimate, the estimate refitted with it
        grads, hat, rest, inverse = _logistic_stats(theta, x, y, yhat, x_rest, yhat_rest, True)
        weight = _glm_power_tuning(grads, hat, rest, inverse)
        theta = _logistic_fit(x, y, yhat, x_rest, yhat_rest, weight, start)
        # as ppi-python's interval does: lam fitted once more at that estimate
        grads, hat, rest, inverse = _logistic_stats(theta, x, y, yhat, x_rest, yhat_rest, True)
        weight = _glm_power_tuning(grads, hat, rest, inverse)
        centre = _logistic_fit(x, y, yhat, x_rest, yhat_rest, weight, start)
    grads, hat, rest, inverse = _logistic_stats(centre, x, y, yhat, x_rest, yhat_rest, weight != 0)
    var_rest = np.cov((weight * rest).T).reshape(d, d)
    var = np.cov((grads - weight * hat).T).reshape(d, d)
    sigma = inverse @ (n / total * var_rest + var) @ inverse
    z = float(stats.norm.ppf(1 - (1 - confidence) / 2))
    half = z * np.sqrt(np.diag(sigma) / n)
    return theta, centre - half, centre + half, weight


def _glm_power_tuning(
    grads: np.ndarray, hat: np.ndarray, rest: np.ndarray, inverse: np.ndarray
) -> float:
    """PPI++'s ``lam`` for a GLM (the total variance over the coordinates), clipped to [0, 1]."""
    n, total = len(grads), len(rest)
    centred, centred_hat = grads - grads.mean(axis=0), hat - hat.mean(axis=0)
    covariance = (centred.T @ centred_hat + centred_hat.T @ centred) / n
    variance = np.cov(np.concatenate([hat, rest]).T).reshape(inverse.shape)
    found = np.trace(inverse @ covariance @ inverse) / (
        2 * (1 + n / total) * np.trace(inverse @ variance @ inverse)
    )
    return float(np.clip(found, 0.0, 1.0))


def _pair_outcomes(comparisons: pd.DataFrame) -> dict[tuple[str, str, str], float]:
    """Per (prompt, first system, second system) in sorted order: the share of the
    comparisons the first won (a tie half), over raters, orders and repeats."""
    found: dict[tuple[str, str, str], list[float]] = {}
    for row in comparisons.itertuples(index=False):
        a, b, winner = str(row.system_a), str(row.system_b), str(row.winner)
        first, second = sorted((a, b))
        outcome = 0.5 if winner == "tie" else float(winner == first)
        prompt = str(getattr(row, "prompt_id", "") or getattr(row, "item_id", ""))
        found.setdefault((prompt, first, second), []).append(outcome)
    return {key: float(np.mean(values)) for key, values in found.items()}


def ppi_bradley_terry(
    people: pd.DataFrame,
    judge: pd.DataFrame,
    *,
    confidence: float = 0.95,
    lam: float | None = None,
) -> pd.DataFrame:
    """Bradley-Terry strengths (log-odds, relative to the first system in sorted order, whose
    strength is 0) from a judge's comparisons of every pair and people's of a random subset,
    by PPI++ logistic regression (:func:`ppi_logistic`), beside people's alone. A pair is a
    prompt and two systems; its outcome the share the first system won (ties half)."""
    truth, said = _pair_outcomes(people), _pair_outcomes(judge)
    labelled = [key for key in said if key in truth]
    rest = [key for key in said if key not in truth]
    if len(labelled) < 2 or not rest:
        raise ValueError(
            f"{len(labelled)} pairs compared by both people and the judge and {len(rest)} by the "
            "judge alone: PPI needs two or more of the first and one or more of the second"
        )
    systems = sorted({s for key in said for s in key[1:]})
    index = {name: k - 1 for k, name in enumerate(systems)}  # the first is the reference

    def design(keys: list[tuple[str, str, str]]) -> np.ndarray:
        x = np.zeros((len(keys), len(systems) - 1))
        for row, (_, first, second) in enumerate(keys):
            if index[first] >= 0:
                x[row, index[first]] = 1.0
            if index[second] >= 0:
                x[row, index[second]] = -1.0
        return x

    x, x_rest = design(labelled), design(rest)
    y = np.array([truth[k] for k in labelled])
    yhat, yhat_rest = np.array([said[k] for k in labelled]), np.array([said[k] for k in rest])
    theta, low, high, weight = ppi_logistic(
        x, y, yhat, x_rest, yhat_rest, confidence=confidence, lam=lam
    )
    plain, plain_low, plain_high, _ = ppi_logistic(
        x, y, yhat, x_rest, yhat_rest, confidence=confidence, lam=0.0
    )
    signature = Signature(
        "ppi_bradley_terry",
        {"method": "ppi++" if lam is None else f"ppi:lam={lam}", "interval": "normal",
         "confidence": confidence, "reference": systems[0], "ties": "half"},
    ).render()  # fmt: skip
    return pd.DataFrame({
        "system": systems, "estimate": np.r_[0.0, theta], "ci_low": np.r_[0.0, low],
        "ci_high": np.r_[0.0, high], "lam": weight, "classical_estimate": np.r_[0.0, plain],
        "classical_ci_low": np.r_[0.0, plain_low], "classical_ci_high": np.r_[0.0, plain_high],
        "n_labeled": len(labelled), "n_unlabeled": len(rest), "signature": signature,
    })  # fmt: skip


def _correlation(method: str) -> Callable[[np.ndarray, np.ndarray], float]:
    def compute(x: np.ndarray, y: np.ndarray) -> float:
        if method == "pearson":
            return float(np.corrcoef(x, y)[0, 1])
        found = stats.spearmanr(x, y) if method == "spearman" else stats.kendalltau(x, y)
        return float(found.statistic)

    return compute


def ppi_correlation(
    x: np.ndarray,
    y: np.ndarray,
    yhat: np.ndarray,
    x_rest: np.ndarray,
    yhat_rest: np.ndarray,
    *,
    method: str = "pearson",
    lam: float | None = None,
    n_boot: int = 1000,
    n_boot_lam: int = 50,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, float]:
    """The correlation of a metric (``x``) with people (``y``, on the labelled items) by the
    prediction-powered bootstrap (Zrnic 2024): ``lam * r(x_rest, judge) + r(x, y) - lam *
    r(x, judge)``, ``lam`` from ``n_boot_lam`` paired bootstrap replicates (not clipped), the
    interval from ``n_boot`` replicates resampling the labelled items (metric, people and judge
    together) and the rest apart. With the same seed it equals ``ppi-python``'s ``ppboot``
    (its global NumPy generator seeded with ``seed``); ``classical_*`` is people's alone."""
    if method not in ("pearson", "spearman", "kendall"):
        raise ValueError(f"method must be pearson, spearman or kendall; got {method!r}")
    estimate = _correlation(method)
    rng = np.random.RandomState(seed)  # ppboot draws from NumPy's global (legacy) generator
    n, total = len(y), len(yhat_rest)

    def draws(count: int) -> list[tuple[np.ndarray, np.ndarray]]:
        return [
            (rng.choice(n, n, replace=True), rng.choice(total, total, replace=True))
            for _ in range(count)
        ]

    if lam is None:
        samples = np.array([
            (estimate(x[a], y[a]), estimate(x[a], yhat[a]), estimate(x_rest[b], yhat_rest[b]))
            for a, b in draws(n_boot_lam)
        ])  # fmt: skip
        spread = np.var(samples[:, 1]) + np.var(samples[:, 2])
        lam = float(np.cov(samples[:, 0], samples[:, 1])[0, 1] / spread) if spread > 0 else 0.0

    def rectified(a: np.ndarray, b: np.ndarray) -> float:
        return (
            lam * estimate(x_rest[b], yhat_rest[b])
            + estimate(x[a], y[a])
            - lam * estimate(x[a], yhat[a])
        )

    replicates = np.array([rectified(a, b) for a, b in draws(n_boot)])
    classical = np.array([estimate(x[a], y[a]) for a, _ in draws(n_boot)])
    tail = (1 - confidence) / 2
    return {
        "estimate": rectified(np.arange(n), np.arange(total)),
        "ci_low": float(np.quantile(replicates, tail)), "ci_high": float(np.quantile(replicates, 1 - tail)),
        "lam": float(lam), "classical_estimate": estimate(x, y),
        "classical_ci_low": float(np.quantile(classical, tail)),
        "classical_ci_high": float(np.quantile(classical, 1 - tail)),
        "n_labeled": n, "n_unlabeled": total,
    }  # fmt: skip


def ppi_correlations(
    scores: pd.DataFrame,
    people: pd.DataFrame,
    judge: pd.DataFrame,
    *,
    methods: Sequence[str] = ("pearson", "spearman", "kendall"),
    n_boot: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> pd.DataFrame:
    """Every metric's correlation with every criterion people and the judge both rated, by
    :func:`ppi_correlation`: ``scores`` (``item_id``, ``metric``, ``value``) on every item,
    ``judge`` (``item_id``, ``criterion``, ``value``) on every item, ``people`` on a random
    subset. A tidy table with one row per metric, criterion and method."""
    metric_table = scores.pivot_table(index="item_id", columns="metric", values="value")
    human = people.pivot_table(index="item_id", columns="criterion", values="value")
    said = judge.pivot_table(index="item_id", columns="criterion", values="value")
    rows = []
    for criterion in sorted(set(human.columns) & set(said.columns)):
        for metric in metric_table.columns:
            frame = pd.concat(
                [metric_table[metric].rename("x"), said[criterion].rename("judge"),
                 human[criterion].rename("human")], axis=1, join="outer",
            ).dropna(subset=["x", "judge"])  # fmt: skip
            labelled, rest = frame[frame["human"].notna()], frame[frame["human"].isna()]
            if len(labelled) < 3 or len(rest) < 3:
                continue
            for method in methods:
                found = ppi_correlation(
                    labelled["x"].to_numpy(float), labelled["human"].to_numpy(float),
                    labelled["judge"].to_numpy(float), rest["x"].to_numpy(float),
                    rest["judge"].to_numpy(float), method=method, n_boot=n_boot,
                    confidence=confidence, seed=seed,
                )  # fmt: skip
                rows.append({"metric": metric, "criterion": criterion, "method": method, **found})
    if not rows:
        raise ValueError(
            "no metric and criterion with 3 or more people-rated and 3 or more judge-only "
            "items (the judge's criteria must be named as people's)"
        )
    table = pd.DataFrame(rows)
    table["signature"] = Signature(
        "ppi_correlation",
        {"method": "ppboot", "lam": "bootstrap:50", "bootstrap": n_boot, "confidence": confidence,
         "seed": seed},
    ).render()  # fmt: skip
    return table
