"""The ordered-logit (cumulative link) model of ratings on a discrete scale (McCullagh 1980),
the ``ordinal`` rating loss of a preference model.

A story with score ``s`` gets a rating at or below level ``k`` with probability
``sigmoid(theta_k - s)``; the thresholds ``theta_1 < ... < theta_{K-1}`` are learned, kept in
order by learning the first one and the logarithms of the gaps. Unlike a squared error on mean
ratings, each person's rating is a sample from the story's distribution over the scale, so
the model learns how far apart the scale's points are (a 4 may be much closer to a 5 than to
a 3) and gives that distribution when asked.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

#: The most distinct rating values an ordinal scale may have.
MAX_LEVELS = 20


def initial_thresholds(levels: int) -> dict[str, Any]:
    """Trainable thresholds for ``levels`` rating levels, spread evenly over [-1.5, 1.5]."""
    import torch

    if levels < 2:
        raise ValueError(f"an ordinal scale needs at least 2 levels; got {levels}")
    first = torch.full((1,), -1.5 if levels > 2 else 0.0, dtype=torch.float64)
    gap = math.log(3.0 / (levels - 2)) if levels > 2 else 0.0
    gaps = torch.full((levels - 2,), gap, dtype=torch.float64)
    return {"cut0": first.requires_grad_(True), "log_gaps": gaps.requires_grad_(True)}


def thresholds(params: Mapping[str, Any]) -> Any:
    """The ordered thresholds (a tensor, or an array for saved weights)."""
    if isinstance(params["cut0"], np.ndarray):
        first = params["cut0"]
        return np.concatenate([first, first + np.cumsum(np.exp(params["log_gaps"]))])
    import torch

    first = params["cut0"]
    return torch.cat([first, first + torch.cumsum(torch.exp(params["log_gaps"]), dim=0)])


def ordinal_nll(params: Mapping[str, Any], scores: Any, levels: Any) -> Any:
    """The mean negative log-likelihood of ratings at ``levels`` (indices from 0) for stories
    with ``scores`` (one score per rating)."""
    import torch

    below = torch.sigmoid(thresholds(params)[None, :] - scores[:, None])
    zeros, ones = torch.zeros_like(below[:, :1]), torch.ones_like(below[:, :1])
    upper = torch.cat([below, ones], dim=1).gather(1, levels[:, None])[:, 0]
    lower = torch.cat([zeros, below], dim=1).gather(1, levels[:, None])[:, 0]
    return -torch.log((upper - lower).clamp_min(1e-12)).mean()


def level_probabilities(weights: Mapping[str, np.ndarray], scores: np.ndarray) -> np.ndarray:
    """Each score's probability of each level, shape ``(len(scores), K)``; rows sum to 1.

    >>> weights = {"cut0": np.array([-1.0]), "log_gaps": np.array([np.log(2.0)])}
    >>> level_probabilities(weights, np.array([0.0])).round(3)
    array([[0.269, 0.462, 0.269]])
    """
    cuts = thresholds(weights)
    below = 1.0 / (1.0 + np.exp(-(cuts[None, :] - np.asarray(scores, dtype=float)[:, None])))
    upper = np.concatenate([below, np.ones((len(below), 1))], axis=1)
    lower = np.concatenate([np.zeros((len(below), 1)), below], axis=1)
    result: np.ndarray = upper - lower
    return result


def expected_ratings(
    weights: Mapping[str, np.ndarray], scores: np.ndarray, levels: Sequence[float]
) -> np.ndarray:
    """Each score's expected rating over the scale's ``levels`` (ascending values)."""
    expected: np.ndarray = level_probabilities(weights, scores) @ np.asarray(levels, dtype=float)
    return expected
