"""How good is each rater? Dawid-Skene and MACE: latent-truth models of categorical labels
that estimate each rater's competence and each item's label with a posterior.

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

from storyeval.errors import StoryevalError
from storyeval.signature import Signature

EPS = 1e-10  # crowd-kit's floor on probabilities
CONSTANT_SHARE = 0.95
SPAM_KAPPA = 0.2  # Dawid-Skene: a rater's accuracy beyond their own chance below this


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
    """Per criterion: the raters' competence and the items' posterior labels, from long
    judgments (records or a frame with ``item_id``, ``rater_id``, ``criterion``, ``value``),
    stacked with ``criterion`` and ``model`` columns.

    Raises
    ------
    ValueError
        For a model other than ``mace`` or ``dawid-skene``.
    """
    if model not in COMPETENCE_MODELS:
        raise ValueError(f"model must be one of {', '.join(COMPETENCE_MODELS)}; got {model!r}")
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
    raters, items = [], []
    for criterion, group in frame.groupby("criterion", sort=False):
        fitted = mace(group, seed=seed) if model == "mace" else dawid_skene(group)
        raters.append(fitted.raters.assign(criterion=criterion, model=model))
        items.append(fitted.items.assign(criterion=criterion, model=model))
    return pd.concat(raters, ignore_index=True), pd.concat(items, ignore_index=True)


COMPETENCE_MODELS = ("mace", "dawid-skene")
