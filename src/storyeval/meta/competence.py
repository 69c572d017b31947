"""How good is each rater? Dawid-Skene and MACE: latent-truth models of categorical labels
that estimate each rater's competence and each item's label with a posterior; and an ordinal
item-response model of Likert ratings (item location, rater severity and discrimination).

Crowd ratings can look fine in aggregate and be noise underneath (Karpinska et al. 2021): a
competence model finds the raters who answer at random or always alike before the data go
into a paper.

- **Dawid and Skene (1979)**: each rater has a confusion matrix ``P(says l | truth k)``; EM
  from majority-vote posteriors. storyeval follows crowd-kit's implementation (Ustalov et al.
  2024) step for step, and the tests check the posteriors against crowd-kit's outputs.
- **MACE (Hovy et al. 2013)**: each rater either knows the answer (probability ``theta``, the
  competence) or spams from a distribution of their own; EM with add-``smoothing`` counts and
  random restarts, the run of the highest likelihood kept.

Ratings (1-5 Likert) are treated as categories. A rater is flagged ``spammer`` when their
competence is at chance or below (MACE: ``theta < 0.5``; Dawid-Skene: a kappa-like
``(competence - chance) / (1 - chance)`` under 0.2, with chance the accuracy of the rater's own
label distribution drawn regardless of the truth), and
``constant`` when at least 95% of 10 or more labels are one answer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from storyeval.base.errors import StoryevalError
from storyeval.base.signature import Signature
from storyeval.base.validation import check_choice

EPS = 1e-10  # crowd-kit's floor on probabilities
CONSTANT_SHARE = 0.95
SPAM_KAPPA = 0.2
WEAK_PRIOR = 0.1  # ordinal model: precision of the location and severity priors, relative
NOISE_DISCRIMINATION = 0.25  # ordinal model: a spammer's discrimination, relative to the median  # Dawid-Skene: a rater's accuracy beyond their own chance below this


@dataclass
class Competence:
    """A fitted competence model.

    Attributes
    ----------
    items : DataFrame
        ``item_id``, ``label`` (the posterior's mode), ``posterior`` (its probability) and a
        ``p_<label>`` column per label.
    raters : DataFrame
        ``rater_id``, ``competence``, ``labels`` (how many), ``spammer``, ``constant``.
    iterations : int
    signature : Signature
    """

    items: pd.DataFrame
    raters: pd.DataFrame
    iterations: int
    signature: Signature


@dataclass
class _Data:
    items: list[Any]
    raters: list[Any]
    labels: list[Any]
    item: np.ndarray  # per annotation: item index
    rater: np.ndarray
    label: np.ndarray


def _encode(annotations: pd.DataFrame) -> _Data:
    missing = {"item_id", "rater_id", "label"} - set(annotations.columns)
    if missing:
        raise StoryevalError(f"the annotations need the column(s) {', '.join(sorted(missing))}")
    if annotations.empty:
        raise StoryevalError("there are no annotations")
    items = list(dict.fromkeys(annotations["item_id"]))
    raters = list(dict.fromkeys(annotations["rater_id"]))
    labels = sorted(set(annotations["label"]), key=lambda v: (str(type(v)), v))
    index = {
        name: {v: k for k, v in enumerate(values)}
        for name, values in (("item_id", items), ("rater_id", raters), ("label", labels))
    }
    return _Data(
        items,
        raters,
        labels,
        annotations["item_id"].map(index["item_id"]).to_numpy(),
        annotations["rater_id"].map(index["rater_id"]).to_numpy(),
        annotations["label"].map(index["label"]).to_numpy(),
    )


def _majority(data: _Data) -> np.ndarray:
    votes = np.zeros((len(data.items), len(data.labels)))
    np.add.at(votes, (data.item, data.label), 1.0)
    result: np.ndarray = votes / votes.sum(axis=1, keepdims=True)
    return result


def _ds_errors(data: _Data, probas: np.ndarray) -> np.ndarray:
    """``[rater, said, truth]``: the expected counts, floored at EPS where the rater used the
    label, normalised over the labels the rater used."""
    counts = np.zeros((len(data.raters), len(data.labels), len(data.labels)))
    np.add.at(counts, (data.rater, data.label), probas[data.item])
    used = np.zeros((len(data.raters), len(data.labels)), dtype=bool)
    used[data.rater, data.label] = True
    counts = np.where(used[:, :, None], np.maximum(counts, EPS), 0.0)
    errors: np.ndarray = counts / counts.sum(axis=1, keepdims=True)
    return errors


def _ds_posteriors(data: _Data, priors: np.ndarray, errors: np.ndarray) -> np.ndarray:
    logs = np.zeros((len(data.items), len(data.labels)))
    with np.errstate(divide="ignore"):
        np.add.at(logs, data.item, np.log2(errors[data.rater, data.label]))
    logs += np.log2(np.maximum(priors, EPS))
    scaled = np.exp2(logs - logs.max(axis=1, keepdims=True))
    result: np.ndarray = scaled / scaled.sum(axis=1, keepdims=True)
    return result


def _ds_bound(data: _Data, probas: np.ndarray, priors: np.ndarray, errors: np.ndarray) -> float:
    """crowd-kit's evidence lower bound per annotation (the prior counted per annotation)."""
    with np.errstate(divide="ignore"):
        per_annotation = np.log(errors[data.rater, data.label]) + np.log(np.maximum(priors, EPS))
    joint = float(
        np.nansum(probas[data.item] * np.where(np.isfinite(per_annotation), per_annotation, 0.0))
    )
    clipped = np.maximum(probas, EPS)
    entropy = -float((np.log(clipped) * clipped).sum())
    return (joint + entropy) / len(data.item)


def dawid_skene(annotations: pd.DataFrame, *, max_iter: int = 100, tol: float = 1e-5) -> Competence:
    """Dawid and Skene's (1979) model by EM (crowd-kit's recipe: majority-vote start, stop when
    the evidence lower bound per annotation gains less than ``tol``). ``annotations`` has
    ``item_id``, ``rater_id``, ``label``. A rater's competence is the probability that they
    give the true label (their confusion matrix's diagonal, weighted by the label priors).

    >>> frame = pd.DataFrame({"item_id": [1, 1, 1, 2, 2, 2], "rater_id": list("abcabc"),
    ...                       "label": ["x", "x", "y", "y", "y", "y"]})
    >>> dawid_skene(frame).items["label"].tolist()
    ['x', 'y']
    """
    data = _encode(annotations)
    probas = _majority(data)
    priors = probas.mean(axis=0)
    errors = _ds_errors(data, probas)
    bound, iterations = -math.inf, 0
    while iterations < max_iter:
        iterations += 1
        probas = _ds_posteriors(data, priors, errors)
        priors = probas.mean(axis=0)
        errors = _ds_errors(data, probas)
        new = _ds_bound(data, probas, priors, errors)
        if new - bound < tol:
            break
        bound = new
    competence = np.einsum("k,rkk->r", priors, errors)
    raters = _rater_table(data, competence, _beyond_chance(data, priors, competence) < SPAM_KAPPA)
    fields: dict[str, str | int | float] = {
        "model": "dawid-skene",
        "max_iter": max_iter,
        "tol": tol,
        "start": "majority",
    }
    return Competence(
        _item_table(data, probas), raters, iterations, Signature("competence", fields)
    )


def _beyond_chance(data: _Data, priors: np.ndarray, competence: np.ndarray) -> np.ndarray:
    """``(competence - chance) / (1 - chance)`` per rater, chance being the accuracy of
    drawing from the rater's own label distribution regardless of the truth."""
    said = np.zeros((len(data.raters), len(data.labels)))
    np.add.at(said, (data.rater, data.label), 1.0)
    chance = (said / said.sum(axis=1, keepdims=True)) @ priors
    result: np.ndarray = (competence - chance) / np.maximum(1 - chance, 1e-12)
    return result


def mace(
    annotations: pd.DataFrame,
    *,
    max_iter: int = 50,
    restarts: int = 10,
    smoothing: float = 0.01,
    seed: int = 0,
) -> Competence:
    """MACE (Hovy et al. 2013) by EM with add-``smoothing`` counts, ``restarts`` random starts
    (the run of the highest log-likelihood kept). A rater's competence is ``theta``, the
    probability that they know the answer rather than spam.

    >>> frame = pd.DataFrame({"item_id": [1, 1, 1, 2, 2, 2], "rater_id": list("abcabc"),
    ...                       "label": ["x", "x", "y", "y", "y", "y"]})
    >>> mace(frame).items["label"].tolist()
    ['x', 'y']
    """
    data = _encode(annotations)
    rng = np.random.default_rng(seed)
    best: tuple[float, np.ndarray, np.ndarray, np.ndarray] | None = None
    for _ in range(restarts):
        theta = rng.uniform(0.5, 0.9, len(data.raters))
        spam = rng.dirichlet(np.ones(len(data.labels)), len(data.raters))
        for _ in range(max_iter):
            probas, known, likelihood = _mace_e_step(data, theta, spam)
            theta, spam = _mace_m_step(data, probas, known, smoothing)
        probas, _, likelihood = _mace_e_step(data, theta, spam)
        if best is None or likelihood > best[0]:
            best = (likelihood, probas, theta, spam)
    assert best is not None
    _, probas, theta, _ = best
    raters = _rater_table(data, theta, theta < 0.5)
    fields: dict[str, str | int | float] = {
        "model": "mace",
        "max_iter": max_iter,
        "restarts": restarts,
        "smoothing": smoothing,
        "seed": seed,
    }
    return Competence(_item_table(data, probas), raters, max_iter, Signature("competence", fields))


def _mace_e_step(
    data: _Data, theta: np.ndarray, spam: np.ndarray
) -> tuple[np.ndarray, np.ndarray, float]:
    """Posteriors of the truth per item, of "knew it" per annotation and truth, and the log
    likelihood (uniform prior on the truth)."""
    k = len(data.labels)
    said = np.eye(k)[data.label]  # annotation x truth: 1 where the label equals the truth
    spam_part = ((1 - theta[data.rater]) * spam[data.rater, data.label])[:, None]
    knew_part = theta[data.rater][:, None] * said
    per = knew_part + spam_part  # P(label | truth) per annotation and truth
    logs = np.zeros((len(data.items), k))
    np.add.at(logs, data.item, np.log(np.maximum(per, 1e-300)))
    top = logs.max(axis=1, keepdims=True)
    scaled = np.exp(logs - top)
    total = scaled.sum(axis=1, keepdims=True)
    likelihood = float((np.log(total) + top).sum() - len(data.items) * math.log(k))
    probas: np.ndarray = scaled / total
    known: np.ndarray = knew_part / np.maximum(per, 1e-300)
    return probas, known, likelihood


def _mace_m_step(
    data: _Data, probas: np.ndarray, known: np.ndarray, smoothing: float
) -> tuple[np.ndarray, np.ndarray]:
    knew = (probas[data.item] * known).sum(axis=1)  # P(the rater knew) per annotation
    n_raters, k = len(data.raters), len(data.labels)
    knew_count = np.zeros(n_raters)
    np.add.at(knew_count, data.rater, knew)
    total = np.bincount(data.rater, minlength=n_raters).astype(float)
    theta = (knew_count + smoothing) / (total + 2 * smoothing)
    spam_counts = np.full((n_raters, k), smoothing)
    np.add.at(spam_counts, (data.rater, data.label), 1 - knew)
    spam = spam_counts / spam_counts.sum(axis=1, keepdims=True)
    return theta, spam


def _item_table(data: _Data, probas: np.ndarray) -> pd.DataFrame:
    table = pd.DataFrame(
        {
            "item_id": data.items,
            "label": [data.labels[k] for k in probas.argmax(axis=1)],
            "posterior": probas.max(axis=1),
        }
    )
    for k, label in enumerate(data.labels):
        table[f"p_{label}"] = probas[:, k]
    return table


def _rater_table(data: _Data, competence: np.ndarray, spammer: np.ndarray) -> pd.DataFrame:
    counts = np.bincount(data.rater, minlength=len(data.raters))
    top_share = np.zeros(len(data.raters))
    for r in range(len(data.raters)):
        said = data.label[data.rater == r]
        top_share[r] = np.bincount(said).max() / len(said) if len(said) else 0.0
    return pd.DataFrame(
        {
            "rater_id": data.raters,
            "competence": competence,
            "labels": counts,
            "spammer": spammer,
            "constant": (top_share >= CONSTANT_SHARE) & (counts >= 10),
        }
    )


def competence_tables(
    judgments: pd.DataFrame | Sequence[Any], *, model: str = "mace", seed: int = 0
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per criterion: the raters' competence and the items' posterior labels (``ordinal``:
    their locations with intervals), from long
    judgments (records or a frame with ``item_id``, ``rater_id``, ``criterion``, ``value``),
    stacked with ``criterion`` and ``model`` columns.

    Raises
    ------
    ValueError
        For a model other than ``mace`` or ``dawid-skene``.
    """
    check_choice(model, COMPETENCE_MODELS, "model")
    frame = (
        judgments.copy()
        if isinstance(judgments, pd.DataFrame)
        else pd.DataFrame(
            [
                {
                    "item_id": j.item_id,
                    "rater_id": j.rater_id,
                    "criterion": j.criterion,
                    "value": j.value,
                }
                for j in judgments
            ]
        )
    )
    frame = frame.rename(columns={"value": "label"})[["item_id", "rater_id", "criterion", "label"]]
    fits: dict[str, Any] = {
        "mace": lambda group: mace(group, seed=seed),
        "dawid-skene": dawid_skene,
        "ordinal": ordinal_ratings,
    }
    raters, items = [], []
    for criterion, group in frame.groupby("criterion", sort=False):
        fitted = fits[model](group)
        raters.append(fitted.raters.assign(criterion=criterion, model=model))
        items.append(fitted.items.assign(criterion=criterion, model=model))
    return pd.concat(raters, ignore_index=True), pd.concat(items, ignore_index=True)


COMPETENCE_MODELS = ("mace", "dawid-skene", "ordinal")


# --------------------------------------------------------------------------- ordinal ratings


@dataclass
class _Ordinal:
    """The parameters of the ordinal model, packed for the optimiser."""

    n_items: int
    n_raters: int
    n_cuts: int

    def unpack(self, x: np.ndarray) -> tuple[np.ndarray, ...]:
        i, r = self.n_items, self.n_raters
        mu, severity, log_a = x[:i], x[i : i + r], x[i + r : i + 2 * r]
        first, steps = x[i + 2 * r], x[i + 2 * r + 1 :]
        cuts = first + np.concatenate([[0.0], np.cumsum(np.exp(steps))])
        return mu, severity, log_a, cuts, steps


def _ordinal_objective(
    x: np.ndarray,
    shape: _Ordinal,
    item: np.ndarray,
    rater: np.ndarray,
    category: np.ndarray,
    prior: float,
) -> tuple[float, np.ndarray]:
    """Negative log posterior and its gradient (cumulative logit, Gaussian priors)."""
    mu, severity, log_a, cuts, steps = shape.unpack(x)
    a = np.exp(log_a)
    eta = a[rater] * (mu[item] - severity[rater])
    padded = np.concatenate([[-np.inf], cuts, [np.inf]])
    upper, lower = padded[category + 1] - eta, padded[category] - eta
    su, sl = _sigmoid(upper), _sigmoid(lower)
    p = np.maximum(su - sl, 1e-12)
    du, dl = su * (1 - su), sl * (1 - sl)  # 0 at the infinite ends
    d_eta = -(du - dl) / p  # d log p / d eta
    grad = np.zeros_like(x)
    i, r = shape.n_items, shape.n_raters
    np.add.at(grad, item, d_eta * a[rater])
    np.add.at(grad[i : i + r], rater, -d_eta * a[rater])
    np.add.at(grad[i + r : i + 2 * r], rater, d_eta * eta)
    d_cut = np.zeros(shape.n_cuts)  # d log p / d cut_k
    upper_index, lower_index = category, category - 1  # cut k of padded index k + 1
    inner_u, inner_l = upper_index < shape.n_cuts, lower_index >= 0
    np.add.at(d_cut, upper_index[inner_u], du[inner_u] / p[inner_u])
    np.add.at(d_cut, lower_index[inner_l], -dl[inner_l] / p[inner_l])
    grad[i + 2 * r] = d_cut.sum()
    # cut k = first + sum_{m < k} exp(step m): d/d step m sums the cuts after it
    grad[i + 2 * r + 1 :] = np.exp(steps) * np.cumsum(d_cut[::-1])[::-1][1:]
    log_posterior = float(np.log(p).sum())
    # weak priors on locations and severities, a unit one on log discrimination: the scale
    # is the one where a typical rater's discrimination is about 1
    weak = prior * WEAK_PRIOR
    penalty = 0.5 * (
        weak * float((mu**2).sum() + (severity**2).sum()) + prior * float((log_a**2).sum())
    )
    grad[: i + r] -= weak * x[: i + r]
    grad[i + r : i + 2 * r] -= prior * x[i + r : i + 2 * r]
    return -(log_posterior - penalty), -grad


def _sigmoid(values: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        result: np.ndarray = 1.0 / (1.0 + np.exp(-values))
    return result


def ordinal_ratings(
    annotations: pd.DataFrame, *, prior: float = 3.0, confidence: float = 0.95
) -> Competence:
    """An ordinal item-response model of Likert ratings: ``P(rating <= c) = sigmoid(cut_c -
    a_j (mu_i - b_j))`` with item location ``mu_i``, rater severity ``b_j`` (a severe rater
    rates lower) and discrimination ``a_j`` (how much the rater's ratings follow the items;
    near 0 for a rater who answers at random), fitted by maximum a posteriori (standard
    normal priors of precision ``prior`` on ``mu``, ``b`` and ``log a``; L-BFGS on the exact
    gradient). ``items`` gives each item's location with a Wald interval and its expected
    rating by an average rater; ``raters`` each rater's severity, discrimination (their
    ``competence``), ``rest_correlation`` (Spearman's rho of their ratings with the other
    raters' mean on the same items), ``spammer`` (that correlation not significantly above 0,
    one-sided, at ``1 - confidence``) and ``constant``. The priors on ``mu`` and ``b`` are ten times weaker than on ``log a``, so
    the scale is the one where a typical rater's discrimination is about 1.

    >>> frame = pd.DataFrame({"item_id": [1, 1, 2, 2, 3, 3], "rater_id": list("ababab"),
    ...                       "label": [1, 2, 3, 3, 5, 4]})
    >>> fitted = ordinal_ratings(frame)
    >>> fitted.items.sort_values("location")["item_id"].tolist()
    [1, 2, 3]
    """
    from scipy.optimize import minimize
    from scipy.stats import norm

    data = _encode(annotations)
    values = np.asarray(data.labels, dtype=float)
    shape = _Ordinal(len(data.items), len(data.raters), len(data.labels) - 1)
    if shape.n_cuts < 1:
        raise StoryevalError("every rating is the same: an ordinal model needs two or more")
    start = np.zeros(shape.n_items + 2 * shape.n_raters + shape.n_cuts)
    start[shape.n_items + 2 * shape.n_raters] = -(shape.n_cuts - 1) / 2
    args = (shape, data.item, data.rater, data.label, prior)
    result = minimize(_ordinal_objective, start, args=args, jac=True, method="L-BFGS-B")
    mu, severity, log_a, cuts, _ = shape.unpack(result.x)
    a = np.exp(log_a)
    info = _location_information(mu, severity, a, cuts, data) + prior
    se = 1.0 / np.sqrt(info)
    z = float(norm.ppf(0.5 + confidence / 2))
    typical = float(np.exp(log_a.mean())) * (mu - float(severity.mean()))  # an average rater
    expected = _sigmoid(cuts[None, :] - typical[:, None])  # P(rating <= c)
    probs = np.diff(np.column_stack([np.zeros(len(mu)), expected, np.ones(len(mu))]), axis=1)
    items = pd.DataFrame(
        {
            "item_id": data.items,
            "location": mu,
            "ci_low": mu - z * se,
            "ci_high": mu + z * se,
            "expected_rating": probs @ values,
        }
    )
    rest = _rest_agreement(data, values)
    raters = _rater_table(data, a, rest["p_value"].to_numpy() >= 1 - confidence)
    raters = raters.assign(severity=severity, rest_correlation=rest["correlation"].to_numpy())
    fields: dict[str, str | int | float] = {"model": "ordinal", "prior": prior, "link": "logit"}
    return Competence(items, raters, int(result.nit), Signature("competence", fields))


def _rest_agreement(data: _Data, values: np.ndarray) -> pd.DataFrame:
    """Per rater: Spearman's rho of their ratings with the mean of the other raters' ratings
    of the same items, and its one-sided p-value (no agreement: rho <= 0)."""
    from scipy.stats import spearmanr

    rating = values[data.label]
    totals = np.bincount(data.item, weights=rating, minlength=len(data.items))
    counts = np.bincount(data.item, minlength=len(data.items))
    rows = []
    for r in range(len(data.raters)):
        mine = (data.rater == r) & (counts[data.item] > 1)
        items = data.item[mine]
        rest = (totals[items] - rating[mine]) / (counts[items] - 1)
        if mine.sum() < 3 or np.ptp(rating[mine]) == 0 or np.ptp(rest) == 0:
            rows.append({"correlation": math.nan, "p_value": 1.0})
            continue
        test = spearmanr(rating[mine], rest, alternative="greater")
        rows.append({"correlation": float(test.statistic), "p_value": float(test.pvalue)})
    return pd.DataFrame(rows)


def _location_information(
    mu: np.ndarray, severity: np.ndarray, a: np.ndarray, cuts: np.ndarray, data: _Data
) -> np.ndarray:
    """Fisher information of each item's location (the expected squared score)."""
    eta = a[data.rater] * (mu[data.item] - severity[data.rater])
    cumulative = _sigmoid(cuts[None, :] - eta[:, None])
    padded = np.column_stack([np.zeros(len(eta)), cumulative, np.ones(len(eta))])
    p = np.maximum(np.diff(padded, axis=1), 1e-12)
    density = padded * (1 - padded)
    score = -(density[:, 1:] - density[:, :-1]) / p  # d log p(c) / d eta for each c
    per = (p * score**2).sum(axis=1) * a[data.rater] ** 2
    info = np.zeros(len(mu))
    np.add.at(info, data.item, per)
    return info
