"""The preference head: a scalar score fitted with pointwise, Bradley-Terry and Davidson objectives."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from storyeval.learn.preference.config import PreferenceConfig

# --------------------------------------------------------------------------- the head


@dataclass
class PreferenceHead:
    """The fitted head: standardisation, weights, the length coefficient, the pair scale and
    Davidson's tie parameter, and the pair temperature."""

    mean: np.ndarray
    sd: np.ndarray
    weights: dict[str, np.ndarray]
    length_mean: float = 0.0
    length_sd: float = 1.0
    temperature: float = 1.0

    def scores(self, features: np.ndarray) -> np.ndarray:
        """The standardised score of each story (the length effect left out); a metric
        feature undefined for a story counts as the training stories' mean."""
        x = (np.where(np.isnan(features), self.mean, features) - self.mean) / self.sd
        w = self.weights
        if "w1" in w:
            x = np.tanh(x @ w["w1"] + w["b1"])
        result: np.ndarray = np.asarray(x @ w["w"] + float(w["b"][0]), dtype=np.float64)
        return result

    @property
    def length_effect(self) -> float:
        """The score points of one sd of log length (what was left out of the scores)."""
        return float(self.weights.get("length", np.zeros(1))[0])

    @property
    def pair_scale(self) -> float:
        """The Bradley-Terry logit of one score point."""
        return float(np.exp(self.weights["log_scale"][0]))

    def pair_probability(self, first: float, second: float) -> float:
        """P(first preferred) from two scores (calibrated; ties ignored)."""
        logit = self.pair_scale * (first - second) / self.temperature
        return float(1.0 / (1.0 + math.exp(-logit)))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form."""
        return {
            "mean": self.mean.tolist(),
            "sd": self.sd.tolist(),
            "weights": {k: v.tolist() for k, v in self.weights.items()},
            "length_mean": self.length_mean,
            "length_sd": self.length_sd,
            "temperature": self.temperature,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PreferenceHead:
        """The head :meth:`to_dict` wrote."""
        return cls(
            np.asarray(data["mean"], dtype=np.float64),
            np.asarray(data["sd"], dtype=np.float64),
            {k: np.asarray(v, dtype=np.float64) for k, v in data["weights"].items()},
            float(data["length_mean"]),
            float(data["length_sd"]),
            float(data["temperature"]),
        )


def fit_head(
    features: np.ndarray,
    lengths: np.ndarray,
    targets: np.ndarray,
    pairs: Sequence[tuple[int, int, float]],
    config: PreferenceConfig,
    ratings: Sequence[tuple[int, int]] = (),
    levels: int = 0,
    negatives: Sequence[tuple[int, int]] = (),
) -> PreferenceHead:
    """Fit the head on standardised features: mean squared error on the rated stories (or,
    with the ordinal rating loss, the ordered-logit likelihood of ``ratings``, ``(story,
    level)`` on a scale of ``levels``), the Davidson-Bradley-Terry likelihood of the pairs,
    both when both exist (weighted so that each counts as one objective), the ranking loss of
    the ``negatives`` (``(original, copy)``: the copy must score lower, with weight
    ``config.negative_weight``), plus weight decay. The copies are left out of the features'
    standardisation, so a head that learns nothing from them equals one trained without."""
    import torch

    from storyeval.learn.ordinal import initial_thresholds

    if config.l2 == "auto":
        raise ValueError("l2='auto' is chosen per training set: fit through train_preference")
    real = np.ones(len(features), dtype=bool)
    real[[copy for _, copy in negatives]] = False
    mean, sd = _column_moments(features[real])
    length_mean, length_sd = float(lengths[real].mean()), float(lengths[real].std() + 1e-6)
    generator = torch.Generator().manual_seed(config.seed)
    filled = np.where(np.isnan(features), mean, features)  # undefined: the mean (standard 0)
    x = np.asarray((filled - mean) / sd, dtype=np.float64)
    z = np.asarray((lengths - length_mean) / length_sd, dtype=np.float64)
    params = _initial_weights(x.shape[1], config, generator)
    ordinal = config.rating_loss == "ordinal" and len(ratings) > 0
    if ordinal:
        params.update(initial_thresholds(levels))
    initial = {k: v.detach().numpy().copy() for k, v in params.items()}
    if ordinal or config.hidden:
        weights = _fit_with_autograd(x, z, initial, targets, pairs, negatives, config, ratings)
    else:  # the common head: its gradient in closed form (see _fit_linear)
        weights = _fit_linear(x, z, initial, targets, pairs, negatives, config)
    return PreferenceHead(mean, sd, weights, length_mean, length_sd)


def _fit_with_autograd(
    x: np.ndarray,
    z: np.ndarray,
    initial: dict[str, np.ndarray],
    targets: np.ndarray,
    pairs: Sequence[tuple[int, int, float]],
    negatives: Sequence[tuple[int, int]],
    config: PreferenceConfig,
    ratings: Sequence[tuple[int, int]] = (),
) -> dict[str, np.ndarray]:
    """Full-batch Adam on the head's loss through torch's autograd: the fit of the hidden
    layer and of the ordinal loss, and the reference the tests check :func:`_fit_linear`
    against (the same arguments, ``ratings`` aside)."""
    import torch

    x_t, z_t = torch.as_tensor(x), torch.as_tensor(z)
    params = {k: torch.tensor(v).requires_grad_(True) for k, v in initial.items()}
    l2 = float(config.l2)
    objectives = _HeadObjectives(targets, pairs, ratings, negatives, config)
    optimizer = torch.optim.Adam(list(params.values()), lr=config.learning_rate)
    for _ in range(config.steps):
        optimizer.zero_grad()
        plain = _forward(params, x_t)  # the score without length: what is reported
        score = plain + (params["length"] * z_t if config.length_covariate else 0.0)
        loss = objectives(params, score, plain)
        penalty = _penalty(params, len(config.metric_features))
        (loss + l2 * penalty).backward()
        optimizer.step()
    return {k: v.detach().numpy().copy() for k, v in params.items()}


#: torch's Adam defaults, which both fits use.
_BETAS, _EPS = (0.9, 0.999), 1e-8


def _fit_linear(
    x: np.ndarray,
    z: np.ndarray,
    weights: dict[str, np.ndarray],
    targets: np.ndarray,
    pairs: Sequence[tuple[int, int, float]],
    negatives: Sequence[tuple[int, int]],
    config: PreferenceConfig,
) -> dict[str, np.ndarray]:
    """The linear head's full-batch Adam in NumPy, with the loss's gradient in closed form:
    the same objective, initial weights and steps as :func:`_fit_with_autograd`, equal to
    rounding (about 1e-12), several times faster (torch spent a millisecond a step on the
    overhead of a few dozen small operations, and ``l2="auto"`` fits about a hundred heads).
    A weight the loss does not reach (the pair scale without pairs, the length coefficient
    without the covariate) keeps its initial value, as autograd leaves it."""
    gradient = _LinearGradient(x, z, targets, pairs, negatives, config)
    moments = {k: (np.zeros_like(v), np.zeros_like(v)) for k, v in weights.items()}
    (beta1, beta2), rate = _BETAS, config.learning_rate
    for step in range(1, config.steps + 1):
        grads = gradient(weights)
        correction1, correction2 = 1 - beta1**step, 1 - beta2**step
        for name, grad in grads.items():
            first, second = moments[name]
            first *= beta1
            first += (1 - beta1) * grad
            second *= beta2
            second += (1 - beta2) * grad * grad
            denominator = np.sqrt(second) / math.sqrt(correction2) + _EPS
            weights[name] = weights[name] - (rate / correction1) * first / denominator
    return weights


class _LinearGradient:
    """The gradient of the linear head's loss (that of :class:`_HeadObjectives` plus the weight
    decay of :func:`_penalty`) with respect to each weight it reaches."""

    def __init__(
        self,
        x: np.ndarray,
        z: np.ndarray,
        targets: np.ndarray,
        pairs: Sequence[tuple[int, int, float]],
        negatives: Sequence[tuple[int, int]],
        config: PreferenceConfig,
    ) -> None:
        self.x, self.z, self.n = x, z, len(x)
        self.rated = np.flatnonzero(np.isfinite(targets))
        self.y = np.asarray(targets, dtype=np.float64)[self.rated]
        self.pairs = bool(pairs)
        if self.pairs:
            first, second, outcome = zip(*pairs, strict=True)
            self.first, self.second = np.asarray(first), np.asarray(second)
            self.won = (np.asarray(outcome) == 1.0).astype(np.float64)
        self.weight = config.negative_weight
        self.negatives = bool(negatives) and bool(self.weight)
        if self.negatives:
            original, copy = zip(*negatives, strict=True)
            self.original, self.copy = np.asarray(original), np.asarray(copy)
        self.length = config.length_covariate
        self.free = len(config.metric_features)  # the last columns: no weight decay
        self.l2 = float(config.l2)

    def __call__(self, weights: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        plain = self.x @ weights["w"] + weights["b"][0]
        score = plain + weights["length"][0] * self.z if self.length else plain
        on_score = np.zeros(self.n)
        grads: dict[str, np.ndarray] = {}
        if len(self.rated):
            on_score[self.rated] += 2.0 * (score[self.rated] - self.y) / len(self.rated)
        if self.pairs:
            grads.update(self._pairs(weights, score, on_score))
        on_plain = on_score.copy()
        if self.negatives:
            gap = plain[self.copy] - plain[self.original]
            push = self.weight / len(gap) / (1.0 + np.exp(-gap))  # d softplus = sigmoid
            np.add.at(on_plain, self.copy, push)
            np.add.at(on_plain, self.original, -push)
        decay = 2.0 * self.l2 * weights["w"]
        if self.free:
            decay[len(decay) - self.free :] = 0.0
        grads["w"] = self.x.T @ on_plain + decay
        grads["b"] = np.array([on_plain.sum()])
        if self.length:
            grads["length"] = np.array([on_score @ self.z])
        return grads

    def _pairs(
        self, weights: Mapping[str, np.ndarray], score: np.ndarray, on_score: np.ndarray
    ) -> dict[str, np.ndarray]:
        """Add the Davidson likelihood's gradient to ``on_score``; return the scale's and
        the tie parameter's."""
        scale = math.exp(weights["log_scale"][0])
        s1, s2 = score[self.first], score[self.second]
        a, b = scale * s1, scale * s2
        tie = weights["log_tie"][0] + (a + b) / 2
        top = np.maximum(np.maximum(a, b), tie)
        ea, eb, et = np.exp(a - top), np.exp(b - top), np.exp(tie - top)
        total = ea + eb + et
        count = len(a)
        on_tie = (et / total - (1.0 - self.won)) / count
        on_a = (ea / total - self.won) / count + on_tie / 2
        on_b = eb / total / count + on_tie / 2
        np.add.at(on_score, self.first, scale * on_a)
        np.add.at(on_score, self.second, scale * on_b)
        return {
            "log_scale": np.array([scale * (on_a @ s1 + on_b @ s2)]),
            "log_tie": np.array([on_tie.sum()]),
        }


class _HeadObjectives:
    """The head's loss: the ratings' objective, the pairs' and the negatives'."""

    def __init__(
        self,
        targets: np.ndarray,
        pairs: Sequence[tuple[int, int, float]],
        ratings: Sequence[tuple[int, int]],
        negatives: Sequence[tuple[int, int]],
        config: PreferenceConfig,
    ) -> None:
        import torch

        self.ordinal = config.rating_loss == "ordinal" and len(ratings) > 0
        if self.ordinal:
            self.rated_story, self.rated_level = (
                torch.tensor(c) for c in zip(*ratings, strict=True)
            )
        self.rated = torch.tensor(np.isfinite(targets))
        self.y = torch.tensor(np.nan_to_num(targets), dtype=torch.float64)
        self.pairs = [torch.tensor(c) for c in zip(*pairs, strict=True)] if pairs else []
        self.weight = config.negative_weight
        self.negatives = (
            [torch.tensor(c) for c in zip(*negatives, strict=True)]
            if negatives and self.weight
            else []
        )

    def __call__(self, params: Mapping[str, Any], score: Any, plain: Any) -> Any:
        import torch
        import torch.nn.functional as F

        from storyeval.learn.ordinal import ordinal_nll

        loss = torch.zeros((), dtype=torch.float64)
        if self.ordinal:
            loss = loss + ordinal_nll(params, score[self.rated_story], self.rated_level)
        elif bool(self.rated.any()):
            loss = loss + ((score - self.y)[self.rated] ** 2).mean()
        if self.pairs:
            first, second, outcome = self.pairs
            loss = loss + _davidson_nll(params, score[first], score[second], outcome)
        if self.negatives:  # length is left out: a repeated sentence may not buy length's credit
            original, copy = self.negatives
            loss = loss + self.weight * F.softplus(plain[copy] - plain[original]).mean()
        return loss


def _penalty(params: Mapping[str, Any], metric_columns: int) -> Any:
    """The weight decay: every weight of the embedding; a linear head's metric features
    (the last columns) are left free, as the length covariate is: a few named features,
    each worth what the data say, should not be shrunk towards the embedding's hundreds."""
    if "w1" in params:
        return (params["w1"] ** 2).sum() + (params["w"] ** 2).sum()
    weights = params["w"][: params["w"].shape[0] - metric_columns]
    return (weights**2).sum()


def _column_moments(features: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each column's mean and sd over its defined values (NaN: a metric feature undefined for
    a story); a column with none gets mean 0, and a constant column sd 1e-6 as before."""
    if not np.isnan(features).any():
        return features.mean(axis=0), features.std(axis=0) + 1e-6
    defined = ~np.isnan(features)
    counts = np.maximum(defined.sum(axis=0), 1)
    mean = np.where(defined, features, 0.0).sum(axis=0) / counts
    spread = np.where(defined, (features - mean) ** 2, 0.0).sum(axis=0) / counts
    return mean, np.sqrt(spread) + 1e-6


def _initial_weights(width: int, config: PreferenceConfig, generator: Any) -> dict[str, Any]:
    import torch

    def parameter(*shape: int, scale: float = 0.0) -> Any:
        values = torch.randn(*shape, generator=generator, dtype=torch.float64) * scale
        return values.requires_grad_(True)

    params = {"b": parameter(1), "length": parameter(1), "log_scale": parameter(1)}
    params["log_tie"] = parameter(1)
    params["log_tie"].data.fill_(-1.0)
    if config.hidden:
        params["w1"] = parameter(width, config.hidden, scale=1 / math.sqrt(width))
        params["b1"] = parameter(config.hidden)
        params["w"] = parameter(config.hidden, scale=1 / math.sqrt(config.hidden))
    else:
        params["w"] = parameter(width)
    return params


def _forward(params: Mapping[str, Any], x: Any) -> Any:
    import torch

    if "w1" in params:
        x = torch.tanh(x @ params["w1"] + params["b1"])
    return x @ params["w"] + params["b"]


def _davidson_nll(params: Mapping[str, Any], first: Any, second: Any, outcome: Any) -> Any:
    """Davidson's (1970) ties: P(i) ∝ pi_i, P(j) ∝ pi_j, P(tie) ∝ nu sqrt(pi_i pi_j), with
    log pi = scale * score."""
    import torch

    k = torch.exp(params["log_scale"])
    a, b = k * first, k * second
    tie = params["log_tie"] + (a + b) / 2
    log_norm = torch.logsumexp(torch.stack([a, b, tie.expand_as(a)]), dim=0)
    won = outcome == 1.0
    ll = torch.where(won, a - log_norm, tie - log_norm)
    return -ll.mean()


def fit_temperature(
    head: PreferenceHead, scores: np.ndarray, pairs: Sequence[tuple[int, int, float]]
) -> float:
    """The temperature that makes held-out pair probabilities calibrated (the NLL over the
    decided pairs, on a grid then refined); 1 without decided pairs."""
    decided = [(i, j) for i, j, outcome in pairs if outcome == 1.0]
    if len(decided) < 5:
        return 1.0
    gaps = np.array([scores[i] - scores[j] for i, j in decided]) * head.pair_scale

    def nll(temperature: float) -> float:
        return float(np.mean(np.logaddexp(0.0, -gaps / temperature)))

    grid = np.exp(np.linspace(math.log(0.05), math.log(20.0), 121))
    best = float(grid[int(np.argmin([nll(t) for t in grid]))])
    return best
