"""System ratings from pairwise comparisons: Bradley-Terry (with ties: Davidson 1970) and Elo.

A comparison says which of two systems won (or that they tied). The Bradley-Terry model gives
each system a strength ``theta`` such that ``P(i beats j) = 1 / (1 + exp(theta_j - theta_i))``;
storyeval reports ``theta`` on that log-odds scale, centred to mean 0, so a difference of 1
means odds of ``e`` to 1. Davidson's extension adds a tie parameter ``nu``:
``P(i beats j) = pi_i / (pi_i + pi_j + nu * sqrt(pi_i pi_j))`` with ``pi = exp(theta)``.

The maximum-likelihood estimate exists only when every system has beaten, and lost to, the
others through some chain of comparisons (the comparison graph is strongly connected; Zermelo
1929, Ford 1957). Otherwise the estimates diverge; storyeval then fits with a weak Gaussian
prior on ``theta`` and says so with a :class:`~storyeval.base.errors.DegenerateInputWarning`.

>>> fit = bradley_terry([("a", "b", "a"), ("a", "b", "a"), ("a", "b", "b"), ("b", "c", "b"),
...                      ("b", "c", "b"), ("b", "c", "c"), ("c", "a", "a"), ("c", "a", "c")])
>>> {s: round(t, 4) for s, t in fit.strengths.items()}
{'a': 0.2911, 'b': 0.0, 'c': -0.2911}
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from storyeval.base.errors import DegenerateInputWarning, warn
from storyeval.base.validation import check_choice

TieHandling = Literal["davidson", "half", "drop"]
TIES: tuple[str, ...] = ("davidson", "half", "drop")
SEPARATION_PRIOR = 0.01
"""Precision of the Gaussian prior on strengths used when the MLE does not exist."""

Comparison = tuple[str, str, str]
"""``(system_a, system_b, winner)`` with ``winner`` one of the two systems or ``"tie"``."""


@dataclass(frozen=True)
class ComparisonCounts:
    """Wins and ties between every ordered pair of systems.

    ``wins[i, j]`` is the number of times system ``i`` beat system ``j``; ``ties[i, j]`` the
    number of ties between them (symmetric).
    """

    systems: tuple[str, ...]
    wins: NDArray[np.float64]
    ties: NDArray[np.float64]

    @property
    def n(self) -> int:
        """The number of comparisons of each pair (wins both ways plus ties)."""
        return int(self.wins.sum() + np.triu(self.ties).sum())

    def win_rates(self) -> NDArray[np.float64]:
        """``[i, j]``: share of the comparisons of i and j that i won, ties counting half
        (NaN where the two were never compared)."""
        total = self.wins + self.wins.T + self.ties
        with np.errstate(invalid="ignore", divide="ignore"):
            rates = (self.wins + 0.5 * self.ties) / total
        return np.where(total > 0, rates, np.nan)


def count_comparisons(
    comparisons: Iterable[Comparison],
    *,
    systems: Sequence[str] | None = None,
    weights: Sequence[float] | None = None,
) -> ComparisonCounts:
    """Tally ``(system_a, system_b, winner)`` comparisons into win and tie matrices, each
    counting ``weights[k]`` (default 1: a margin-weighted tally gives a clear preference more
    weight than a slight one).

    Raises
    ------
    ValueError
        For a comparison of a system with itself, or a winner that is neither system nor
        ``"tie"``.
    """
    rows = list(comparisons)
    counts = [1.0] * len(rows) if weights is None else [float(w) for w in weights]
    if len(counts) != len(rows) or any(not w >= 0 for w in counts):
        raise ValueError("give one weight >= 0 per comparison")
    names = list(systems) if systems is not None else []
    for a, b, _ in rows:
        for s in (a, b):
            if s not in names:
                names.append(s)
    index = {s: i for i, s in enumerate(names)}
    k = len(names)
    wins = np.zeros((k, k))
    ties = np.zeros((k, k))
    for (a, b, winner), weight in zip(rows, counts, strict=True):
        if a == b:
            raise ValueError(f"a comparison needs two different systems; got {a!r} twice")
        if a not in index or b not in index:
            raise ValueError(f"system {a if a not in index else b!r} is not among {names}")
        i, j = index[a], index[b]
        if winner == a:
            wins[i, j] += weight
        elif winner == b:
            wins[j, i] += weight
        elif winner == "tie":
            ties[i, j] += weight
            ties[j, i] += weight
        else:
            raise ValueError(f"winner must be {a!r}, {b!r} or 'tie'; got {winner!r}")
    return ComparisonCounts(tuple(names), wins, ties)


def strongly_connected(counts: ComparisonCounts, *, ties_connect: bool = True) -> bool:
    """Whether every system reaches every other along "beat" (or tie) edges."""
    k = len(counts.systems)
    if k <= 1:
        return True
    edges = counts.wins > 0
    if ties_connect:
        edges = edges | (counts.ties > 0)

    def reach(adjacency: NDArray[np.bool_]) -> int:
        seen = {0}
        stack = [0]
        while stack:
            node = stack.pop()
            for other in np.flatnonzero(adjacency[node]):
                if int(other) not in seen:
                    seen.add(int(other))
                    stack.append(int(other))
        return len(seen)

    return reach(edges) == k and reach(edges.T) == k


@dataclass(frozen=True)
class BradleyTerryFit:
    """A fitted Bradley-Terry (or Davidson) model.

    Attributes
    ----------
    systems : tuple of str
    strengths : dict
        ``theta`` per system on the log-odds scale, centred to mean 0.
    tie_parameter : float or None
        Davidson's ``nu`` (``None`` when ties were not modelled).
    n : int
        Comparisons used.
    prior : float
        Precision of the Gaussian prior on ``theta`` (0: maximum likelihood).
    log_likelihood : float
    """

    systems: tuple[str, ...]
    strengths: dict[str, float]
    tie_parameter: float | None
    n: int
    prior: float
    log_likelihood: float
    notes: tuple[str, ...] = field(default_factory=tuple)

    def probability(self, a: str, b: str) -> float:
        """Modelled probability that ``a`` beats ``b`` (a tie counting half)."""
        ta, tb = self.strengths[a], self.strengths[b]
        if self.tie_parameter is None:
            return 1.0 / (1.0 + math.exp(tb - ta))
        pa, pb = math.exp(ta), math.exp(tb)
        tie = self.tie_parameter * math.sqrt(pa * pb)
        return (pa + 0.5 * tie) / (pa + pb + tie)


def _negative_log_likelihood(
    params: NDArray[np.float64],
    wins: NDArray[np.float64],
    ties: NDArray[np.float64],
    davidson: bool,
    prior: float,
) -> tuple[float, NDArray[np.float64]]:
    k = wins.shape[0]
    theta = params[:k]
    diff = theta[:, None] - theta[None, :]  # theta_i - theta_j
    grad = np.zeros_like(params)
    if davidson:
        eta = params[k]
        # log D_ij = log(e^ti + e^tj + e^(eta + (ti + tj)/2)), stably, relative to (ti + tj)/2
        half = diff / 2.0
        log_d = (theta[:, None] + theta[None, :]) / 2.0 + np.logaddexp(
            np.logaddexp(half, -half), eta
        )
        p_i = np.exp(theta[:, None] - log_d)  # P(i beats j)
        p_tie = np.exp(eta + (theta[:, None] + theta[None, :]) / 2.0 - log_d)
        ll = float((wins * (theta[:, None] - log_d)).sum())
        upper = np.triu(ties, 1)
        ll += float((upper * (eta + (theta[:, None] + theta[None, :]) / 2.0 - log_d)).sum())
        # d log D_ij / d theta_i = p_i + p_tie / 2
        dlogd_i = p_i + p_tie / 2.0
        n_ij = wins + wins.T  # decisive comparisons between i and j
        grad_theta = wins.sum(axis=1) - (n_ij * dlogd_i).sum(axis=1)
        grad_theta += 0.5 * ties.sum(axis=1) - (ties * dlogd_i).sum(axis=1)
        grad[:k] = grad_theta
        total = n_ij + ties
        grad[k] = float(np.triu(ties, 1).sum() - np.triu(total * p_tie, 1).sum())
    else:
        log_p = -np.logaddexp(0.0, -diff)  # log P(i beats j)
        ll = float((wins * log_p).sum())
        p = np.exp(log_p)
        n_ij = wins + wins.T
        grad[:k] = wins.sum(axis=1) - (n_ij * p).sum(axis=1)
    if prior > 0:
        ll -= 0.5 * prior * float((theta**2).sum())
        grad[:k] -= prior * theta
    return -ll, -grad


def bradley_terry(
    comparisons: Iterable[Comparison] | ComparisonCounts,
    *,
    ties: str = "davidson",
    prior: float = 0.0,
    systems: Sequence[str] | None = None,
) -> BradleyTerryFit:
    """Fit Bradley-Terry strengths by maximum likelihood (L-BFGS on the exact gradient).

    Parameters
    ----------
    comparisons : iterable of (system_a, system_b, winner) or ComparisonCounts
        ``winner`` is one of the two systems or ``"tie"``.
    ties : {"davidson", "half", "drop"}
        Davidson's tie model (default), a tie as half a win for each, or ties left out.
    prior : float
        Precision of a Gaussian prior on the strengths (0: maximum likelihood; when the MLE
        does not exist :data:`SEPARATION_PRIOR` is used and a warning says so).
    systems : sequence of str, optional
        The systems to rate (and their order); default: in order of appearance.

    Returns
    -------
    BradleyTerryFit

    Raises
    ------
    ValueError
        For an unknown ``ties`` value, fewer than two systems, or no comparison.
    """
    from scipy.optimize import minimize

    check_choice(ties, TIES, "ties")
    if prior < 0:
        raise ValueError(f"prior must be >= 0; got {prior}")
    counts = (
        comparisons
        if isinstance(comparisons, ComparisonCounts)
        else count_comparisons(comparisons, systems=systems)
    )
    k = len(counts.systems)
    if k < 2:
        raise ValueError(f"ranking needs at least two systems; got {list(counts.systems)}")
    wins, tie_counts = counts.wins.copy(), counts.ties.copy()
    if ties == "half":
        wins = wins + tie_counts / 2.0
        tie_counts = np.zeros_like(tie_counts)
    elif ties == "drop":
        tie_counts = np.zeros_like(tie_counts)
    if wins.sum() + tie_counts.sum() == 0:
        raise ValueError("there is no comparison to fit")
    davidson = ties == "davidson" and tie_counts.sum() > 0
    notes: list[str] = []
    decided = ComparisonCounts(counts.systems, wins, tie_counts)
    if prior == 0 and not strongly_connected(decided, ties_connect=davidson):
        prior = SEPARATION_PRIOR
        message = (
            "the maximum-likelihood Bradley-Terry strengths do not exist: some system never "
            "lost (or never won) against the others through any chain of comparisons; fitted "
            f"with a Gaussian prior of precision {SEPARATION_PRIOR}"
        )
        notes.append(message)
        warn(DegenerateInputWarning, message)
    start = np.zeros(k + (1 if davidson else 0))
    if davidson:
        decisive = wins.sum()
        tied = np.triu(tie_counts, 1).sum()
        start[k] = math.log(max(tied, 0.5) / max(decisive, 0.5))
    result = minimize(
        _negative_log_likelihood,
        start,
        args=(wins, tie_counts, davidson, prior),
        jac=True,
        method="L-BFGS-B",
        options={"maxiter": 2000, "gtol": 1e-10, "ftol": 1e-14},
    )
    theta = result.x[:k] - result.x[:k].mean()
    return BradleyTerryFit(
        systems=counts.systems,
        strengths={s: float(t) for s, t in zip(counts.systems, theta, strict=True)},
        tie_parameter=float(math.exp(result.x[k])) if davidson else None,
        n=counts.n,
        prior=prior,
        log_likelihood=float(-result.fun),
        notes=tuple(notes),
    )


def elo(
    comparisons: Sequence[Comparison],
    *,
    k_factor: float = 4.0,
    scale: float = 400.0,
    initial: float = 1000.0,
    systems: Sequence[str] | None = None,
) -> dict[str, float]:
    """Elo ratings after playing ``comparisons`` in the order given (a tie scores 0.5).

    Elo depends on the order of the games; :func:`storyeval.meta.comparisons` averages it over
    seeded shuffles.

    >>> elo([("a", "b", "a"), ("a", "b", "a")], k_factor=32)
    {'a': 1030.530..., 'b': 969.469...}
    """
    ratings: dict[str, float] = {s: initial for s in (systems or [])}
    for a, b, winner in comparisons:
        ra, rb = ratings.setdefault(a, initial), ratings.setdefault(b, initial)
        expected_a = 1.0 / (1.0 + 10 ** ((rb - ra) / scale))
        if winner == a:
            score_a = 1.0
        elif winner == b:
            score_a = 0.0
        elif winner == "tie":
            score_a = 0.5
        else:
            raise ValueError(f"winner must be {a!r}, {b!r} or 'tie'; got {winner!r}")
        ratings[a] = ra + k_factor * (score_a - expected_a)
        ratings[b] = rb - k_factor * (score_a - expected_a)
    return ratings


def anchored_bradley_terry(
    comparisons: Iterable[Comparison] | ComparisonCounts,
    anchors: Mapping[str, float],
    *,
    ties: str = "davidson",
    prior: float = SEPARATION_PRIOR,
    systems: Sequence[str] | None = None,
) -> BradleyTerryFit:
    """Bradley-Terry strengths of new systems against a stored rating table: the ``anchors``
    keep their strengths (so numbers stay comparable across runs: a new system joins the
    pool with a few comparisons against its neighbours), the other systems are fitted, with
    a weak Gaussian prior (precision ``prior``) centred on the anchors' mean so that a
    system that has only won or only lost stays finite.

    >>> fit = anchored_bradley_terry([("new", "a", "new"), ("new", "a", "new"), ("new", "b", "b")],
    ...                              {"a": 0.0, "b": 1.0}, ties="drop")
    >>> fit.strengths["a"], fit.strengths["b"], round(fit.strengths["new"], 2)
    (0.0, 1.0, 1.05)

    Raises
    ------
    ValueError
        No anchor among the compared systems, or an unknown ``ties`` value.
    """
    from scipy.optimize import minimize

    check_choice(ties, TIES, "ties")
    counts = (
        comparisons
        if isinstance(comparisons, ComparisonCounts)
        else count_comparisons(comparisons, systems=systems)
    )
    names = counts.systems
    fixed = np.array([s in anchors for s in names])
    if not fixed.any():
        raise ValueError("none of the compared systems is in the anchor table")
    wins, tie_counts = counts.wins.copy(), counts.ties.copy()
    if ties == "half":
        wins, tie_counts = wins + tie_counts / 2.0, np.zeros_like(tie_counts)
    elif ties == "drop":
        tie_counts = np.zeros_like(tie_counts)
    davidson = ties == "davidson" and tie_counts.sum() > 0
    k = len(names)
    theta = np.array([float(anchors.get(s, 0.0)) for s in names])
    centre = float(np.mean([anchors[s] for s in names if s in anchors]))
    free = np.flatnonzero(~fixed)

    def objective(params: NDArray[np.float64]) -> tuple[float, NDArray[np.float64]]:
        full = np.concatenate([theta, params[len(free) :]])
        full[free] = params[: len(free)]
        value, grad = _negative_log_likelihood(full, wins, tie_counts, davidson, 0.0)
        offset = params[: len(free)] - centre
        value += 0.5 * prior * float((offset**2).sum())
        return value, np.concatenate([grad[free] + prior * offset, grad[k:]])

    start = np.concatenate([np.full(len(free), centre), np.zeros(1 if davidson else 0)])
    result = minimize(objective, start, jac=True, method="L-BFGS-B")
    theta[free] = result.x[: len(free)]
    return BradleyTerryFit(
        systems=names,
        strengths={s: float(t) for s, t in zip(names, theta, strict=True)},
        tie_parameter=float(math.exp(result.x[len(free)])) if davidson else None,
        n=counts.n,
        prior=prior,
        log_likelihood=float(-result.fun),
        notes=(f"{int(fixed.sum())} system(s) anchored to a stored table",),
    )
