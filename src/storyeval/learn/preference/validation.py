"""Splits by prompt, cross-validation, the penalty and column choice within training folds."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from storyeval.base.signature import Signature
from storyeval.corpus import Score
from storyeval.learn.preference.config import (
    _T,
    HELDOUT_METRIC,
    PreferenceConfig,
    PreferenceDataError,
)
from storyeval.learn.preference.data import PreferenceData
from storyeval.learn.preference.evaluation import _negative_rows, _summary_rows
from storyeval.learn.preference.head import PreferenceHead, _column_moments, fit_head

# --------------------------------------------------------------------------- splits and CV


def group_folds(groups: Sequence[str], folds: int, seed: int) -> list[np.ndarray]:
    """The stories of each fold (by group: no group in two folds), groups shuffled by
    ``seed`` and dealt round-robin by size.

    >>> [f.tolist() for f in group_folds(["p1", "p1", "p2", "p3", "p3", "p4"], 2, 0)]
    [[2, 3, 4], [0, 1, 5]]
    """
    names = sorted(set(groups))
    if folds < 2 or folds > len(names):
        raise PreferenceDataError(f"{folds} folds need between 2 and {len(names)} groups")
    order = np.random.default_rng(seed).permutation(len(names))
    members: dict[str, list[int]] = {}
    for i, group in enumerate(groups):
        members.setdefault(group, []).append(i)
    ranked = sorted((names[k] for k in order), key=lambda g: -len(members[g]))
    buckets: list[list[int]] = [[] for _ in range(folds)]
    for group in ranked:
        smallest = min(range(folds), key=lambda f: (len(buckets[f]), f))
        buckets[smallest] += members[group]
    return [np.array(sorted(bucket), dtype=np.int64) for bucket in buckets]


@dataclass
class CrossValidation:
    """Held-out predictions of every story, the fold that held each out (-1: none) and the
    summary table."""

    predictions: np.ndarray
    table: Any
    folds: int
    fold_of: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))


def cross_validate(
    data: PreferenceData,
    features: np.ndarray | None,
    lengths: np.ndarray,
    config: PreferenceConfig,
    *,
    folds: int = 5,
    n_boot: int = 1000,
    tuned: Callable[[np.ndarray], np.ndarray] | None = None,
) -> CrossValidation:
    """Train on all folds but one and predict the held-out one, for every fold: the held-out
    pairwise accuracy (decided pairs with both stories held out) and the story-level Kendall
    tau between predictions and mean ratings, pooled over folds, with percentile bootstrap
    intervals; a length-only baseline beside them. ``tuned(train)`` (instead of
    ``features``, which may then be None) gives every story's features from a model trained
    on the fold's training stories only (a fine-tuned encoder)."""
    predictions = np.full(len(data.stories), np.nan)
    fold_of = np.full(len(data.stories), -1, dtype=np.int64)
    for number, held in enumerate(_story_folds(data, folds, config.seed)):
        fold_of[held] = number
        train = np.setdiff1d(np.arange(len(data.stories)), held)
        fold_features = tuned(train) if tuned is not None else features
        if fold_features is None:
            raise ValueError("give features or tuned")
        head = _fit_subset(data, fold_features, lengths, config, train)
        predictions[held] = _held_out(head, fold_features[held], data)
    rows = [
        _summary_rows("model", predictions, data, n_boot, config.seed),
        _summary_rows("length (log words)", lengths, data, n_boot, config.seed),
        _negative_rows("model", predictions, data, n_boot, config.seed),
        _negative_rows("length (log words)", lengths, data, n_boot, config.seed),
    ]
    import pandas as pd

    table = pd.DataFrame([row for pair in rows for row in pair])
    return CrossValidation(predictions, table, folds, fold_of)


def heldout_scores(
    data: PreferenceData, result: CrossValidation, signature: Signature, *, name: str = ""
) -> list[Score]:
    """The judged stories' held-out predictions as scores (metric
    ``preference_heldout:NAME``, NAME the model directory's name so that several models'
    files can be read together; in standard deviations of the mean rating, each with its
    fold), to compare the model with any metric on the same stories (``storyeval
    correlate``, ``compare``, ``report``): every story was scored by a head that never saw
    its prompt. Copies are left out."""
    heldout = Signature(HELDOUT_METRIC, {**signature.fields, "folds": result.folds})
    rendered = heldout.render()
    metric = f"{HELDOUT_METRIC}:{name}" if name else HELDOUT_METRIC
    return [
        Score(story.id, metric, float(prediction), rendered, {"fold": int(fold)})
        for story, prediction, fold, synthetic in zip(
            data.stories, result.predictions, result.fold_of, data.synthetic, strict=True
        )
        if not synthetic and fold >= 0
    ]


def _story_folds(
    data: PreferenceData, folds: int, seed: int, members: np.ndarray | None = None
) -> list[np.ndarray]:
    """The folds of the judged stories (:func:`group_folds`; of those among ``members``),
    each perturbed copy in its original's: the copies change neither the folds nor, when not
    learned from, the numbers."""
    real = np.flatnonzero(~data.synthetic)
    if members is not None:
        real = np.intersect1d(real, members)
    dealt = group_folds([data.groups[i] for i in real], folds, seed)
    fold_of = {int(real[k]): number for number, fold in enumerate(dealt) for k in fold}
    for original, copy, _ in data.negatives:
        if original in fold_of:
            fold_of[copy] = fold_of[original]
    stories: list[list[int]] = [[] for _ in dealt]
    for story, number in sorted(fold_of.items()):
        stories[number].append(story)
    return [np.array(fold, dtype=np.int64) for fold in stories]


def _held_out(head: PreferenceHead, features: np.ndarray, data: PreferenceData) -> np.ndarray:
    """Predictions comparable across folds: the standardised score, or with the ordinal loss
    the expected rating, standardised as the mean ratings are."""
    scores = head.scores(features)
    if not data.ratings:
        return scores
    from storyeval.learn.ordinal import expected_ratings

    expected = expected_ratings(head.weights, scores, data.levels)
    standard: np.ndarray = (expected - data.target_mean) / data.target_sd
    return standard


def pairs_within(
    pairs: Sequence[tuple[int, int, _T]], members: np.ndarray
) -> list[tuple[int, int, _T]]:
    """The pairs (or negatives) whose two stories are both among ``members``, indexed by
    position there.

    >>> pairs_within([(0, 2, 1.0), (1, 2, 0.5)], np.array([0, 2]))
    [(0, 1, 1.0)]
    """
    position = {int(i): k for k, i in enumerate(members)}
    return [(position[i], position[j], o) for i, j, o in pairs if i in position and j in position]


def _fit_subset(
    data: PreferenceData,
    features: np.ndarray,
    lengths: np.ndarray,
    config: PreferenceConfig,
    members: np.ndarray,
) -> PreferenceHead:
    """A head fitted on the stories ``members`` (their targets and the pairs within them);
    with ``select_features``, the features are first chosen within them
    (:func:`selected_columns`); with ``l2="auto"``, the weight decay is first chosen by
    cross-validation within them."""
    if config.select_features:
        columns = selected_columns(data, features, lengths, config, members)
        offset = features.shape[1] - len(config.metric_features)
        kept = tuple(config.metric_features[c - offset] for c in columns if c >= offset)
        plain = replace(config, select_features=False, metric_features=kept)  # their count:
        head = _fit_subset(data, features[:, columns], lengths, plain, members)  # left free
        return _expanded(head, columns, features.shape[1])
    if config.l2 == "auto":
        config = replace(config, l2=chosen_l2(data, features, lengths, config, members))
    pairs = pairs_within(data.pairs, members)
    position = {int(i): k for k, i in enumerate(members)}
    ratings = [(position[i], level) for i, level in data.ratings if i in position]
    return fit_head(
        features[members],
        lengths[members],
        data.targets[members],
        pairs,
        config,
        ratings,
        len(data.levels),
        negatives_within(data.negatives, members),
    )


#: The weight decays ``l2="auto"`` chooses from.
L2_GRID = (0.01, 0.1, 1.0, 10.0, 100.0)
#: The folds of that choice.
L2_FOLDS = 3


def chosen_l2(
    data: PreferenceData,
    features: np.ndarray,
    lengths: np.ndarray,
    config: PreferenceConfig,
    members: np.ndarray,
) -> float:
    """The weight decay of :data:`L2_GRID` whose heads, trained on all but one of
    :data:`L2_FOLDS` prompt-disjoint folds of ``members``, agree best with people on the
    held-out fold (Kendall tau-b with the mean ratings, pooled over folds; the pairwise
    accuracy without ratings); the larger on a tie. The smallest when ``members`` hold too
    few prompts to split."""
    from scipy.stats import kendalltau

    judged = members[~data.synthetic[members]]
    if len({data.groups[i] for i in judged}) < L2_FOLDS:
        return L2_GRID[0]
    folds = _story_folds(data, L2_FOLDS, config.seed, members)
    rated = judged[np.isfinite(data.targets[judged])]
    decided = [(i, j) for i, j, o in pairs_within(data.pairs, judged) if o == 1.0]
    best, best_agreement = L2_GRID[0], -np.inf
    for l2 in L2_GRID:
        trial = replace(config, l2=l2)
        predictions = np.full(len(data.stories), np.nan)
        for held in folds:
            head = _fit_subset(data, features, lengths, trial, np.setdiff1d(members, held))
            predictions[held] = _held_out(head, features[held], data)
        if len(rated) >= 3:
            agreement = float(kendalltau(predictions[rated], data.targets[rated]).statistic)
        else:
            gaps = [predictions[judged[i]] - predictions[judged[j]] for i, j in decided]
            agreement = float(np.mean(np.sign(gaps))) if gaps else 0.0
        if np.nan_to_num(agreement, nan=-1.0) >= best_agreement:
            best, best_agreement = l2, np.nan_to_num(agreement, nan=-1.0)
    return best


#: The most metric features :func:`selected_columns` adds one by one
SELECT_MOST = 5


def selected_columns(
    data: PreferenceData,
    features: np.ndarray,
    lengths: np.ndarray,
    config: PreferenceConfig,
    members: np.ndarray,
) -> np.ndarray:
    """The feature columns a head fitted on ``members`` uses, chosen within them: metric
    features (the last columns) added one at a time, each time the one whose linear models,
    trained on all but one of :data:`L2_FOLDS` folds of ``members``, agree best with people on
    the held-out fold, while that agreement grows (at most :data:`SELECT_MOST`: a few strong
    scores); then every metric feature, and every feature (the encoder's with them), each
    kept only if it agrees better still. The search fits a ridge regression to the ratings,
    or a logistic regression to the pairs' feature differences (fast); the head is then
    fitted on the columns chosen."""
    width, count = features.shape[1], len(config.metric_features)
    metric = list(range(width - count, width))
    judged = members[~data.synthetic[members]]
    if len({data.groups[i] for i in judged}) < L2_FOLDS:
        return np.arange(width)
    folds = _story_folds(data, L2_FOLDS, config.seed, members)

    def agreement(columns: list[int]) -> float:
        predictions = np.full(len(data.stories), np.nan)
        for held in folds:
            train = np.setdiff1d(judged, held)
            predictions[held] = _proxy_predictions(data, features[:, columns], train, held)
        return float(np.nan_to_num(_column_agreement(data, predictions, judged), nan=-1.0))

    chosen: list[int] = []
    best = -np.inf
    while len(chosen) < min(SELECT_MOST, count):
        found, column = max((agreement([*chosen, c]), c) for c in metric if c not in chosen)
        if found <= best + 1e-12:
            break
        chosen, best = [*chosen, column], found
    for larger in ([*metric], list(range(width))):
        if len(larger) > len(chosen) and agreement(larger) > best + 1e-12:
            chosen, best = larger, agreement(larger)
    return np.sort(np.asarray(chosen))


def _head_notes(
    summary: dict[str, Any], head: PreferenceHead, config: PreferenceConfig, width: int
) -> None:
    """A warning when the held-out agreement is below chance, and the features a selecting
    head kept."""
    warning = wrong_sign_note(summary.get("cross_validation", []), config, head.length_effect)
    if warning:
        summary["notes"].append(warning)
        summary["held_out_below_chance"] = True
    if config.select_features:
        summary["selected_features"] = selected_names(head, config, width)


def wrong_sign_note(
    table: Sequence[Mapping[str, Any]], config: PreferenceConfig, length_effect: float
) -> str:
    """A warning when the held-out agreement is below chance with its whole interval (the
    model learned a direction its held-out stories contradict), and the likely cause: with
    the length covariate, a length effect learned beside features that go with length leaves
    them weighted against it (suppression), so the scores, without length, order stories
    against people while length alone orders them with people. Empty when there is none."""
    rows = {(r["predictor"], r["statistic"]): r for r in table}
    for statistic, chance in (("kendall_tau_b", 0.0), ("pairwise_accuracy", 0.5)):
        model = rows.get(("model", statistic))
        if model is None or not model["ci_high"] < chance:
            continue
        note = (
            f"WARNING: the held-out {statistic} is {model['estimate']:.3f} "
            f"[{model['ci_low']:.3f}, {model['ci_high']:.3f}], below chance ({chance:g}): the "
            "model learned a direction its held-out stories contradict; do not use its scores"
        )
        length = rows.get(("length (log words)", statistic))
        if config.length_covariate and length is not None and length["estimate"] > chance:
            note += (
                f". Length alone agrees with people ({length['estimate']:.3f}) and its effect "
                f"({length_effect:+.2f} sd) was learned beside the features and left out of "
                "the scores, which leaves features that go with length weighted against it: "
                "train with --no-length-covariate"
            )
        return note
    return ""


def selected_names(head: PreferenceHead, config: PreferenceConfig, width: int) -> list[str]:
    """The features a selecting head kept: its metric features by name, ``encoder`` for the
    encoder's."""
    kept = [int(c) for c in head.weights.get("selected", np.arange(width))]
    offset = width - len(config.metric_features)
    names = [config.metric_features[c - offset] for c in kept if c >= offset]
    return (["encoder"] if any(c < offset for c in kept) else []) + names


def _proxy_predictions(
    data: PreferenceData, features: np.ndarray, train: np.ndarray, held: np.ndarray
) -> np.ndarray:
    """The held-out scores of a quick linear model of the training stories: ridge regression
    on the mean ratings where three or more are rated, else logistic regression on the
    decided pairs' standardised feature differences (both orders)."""
    from sklearn.linear_model import LogisticRegression, Ridge

    mean, sd = _column_moments(features[train])
    x = (np.where(np.isnan(features), mean, features) - mean) / sd
    rated = train[np.isfinite(data.targets[train])]
    if len(rated) >= 3:
        return np.asarray(Ridge(alpha=1.0).fit(x[rated], data.targets[rated]).predict(x[held]))
    decided = [(train[i], train[j]) for i, j, o in pairs_within(data.pairs, train) if o == 1.0]
    if not decided:
        return np.zeros(len(held))
    gaps = np.array([x[i] - x[j] for i, j in decided])
    model = LogisticRegression(C=1.0, fit_intercept=False, max_iter=1000)
    model.fit(np.vstack([gaps, -gaps]), np.r_[np.ones(len(gaps)), np.zeros(len(gaps))])
    return np.asarray(x[held] @ model.coef_[0])


def _column_agreement(data: PreferenceData, values: np.ndarray, members: np.ndarray) -> float:
    """How well ``values`` order the people's judgments of ``members``: Kendall's tau-b with
    the mean ratings where there are three or more, else the mean sign of the decided pairs'
    gaps (2 x pairwise accuracy - 1)."""
    from scipy.stats import kendalltau

    judged = members[~data.synthetic[members]]
    rated = judged[np.isfinite(data.targets[judged]) & np.isfinite(values[judged])]
    if len(rated) >= 3:
        return float(kendalltau(values[rated], data.targets[rated]).statistic)
    decided = [(i, j) for i, j, o in pairs_within(data.pairs, judged) if o == 1.0]
    gaps = [values[judged[i]] - values[judged[j]] for i, j in decided]
    gaps = [g for g in gaps if np.isfinite(g)]
    return float(np.mean(np.sign(gaps))) if gaps else 0.0


def _expanded(head: PreferenceHead, columns: np.ndarray, width: int) -> PreferenceHead:
    """A head fitted on some feature columns, as a head over all ``width`` columns (the others
    weighted 0); ``weights["selected"]`` records the columns."""
    mean, sd = np.zeros(width), np.ones(width)
    mean[columns], sd[columns] = head.mean, head.sd
    weights = dict(head.weights)
    first = "w1" if "w1" in weights else "w"
    full = np.zeros((width, *weights[first].shape[1:]))
    full[columns] = weights[first]
    weights[first] = full
    weights["selected"] = np.asarray(columns, dtype=np.float64)
    return replace(head, mean=mean, sd=sd, weights=weights)


def negatives_within(
    negatives: Sequence[tuple[int, int, str]], members: np.ndarray
) -> list[tuple[int, int]]:
    """The negatives whose original and copy are both among ``members``, indexed there.

    >>> negatives_within([(0, 3, "repetition"), (1, 4, "repetition")], np.array([0, 1, 3]))
    [(0, 2)]
    """
    return [(i, j) for i, j, _ in pairs_within(negatives, members)]
