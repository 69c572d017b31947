"""Bradley-Terry and Elo ratings from comparisons.

Provenance: plain Bradley-Terry against ``choix.ilsr_pairwise`` (Maystre & Grossglauser's
iterative Luce spectral ranking, an independent maximum-likelihood solver) on the same
comparisons; Davidson's tie model against a direct maximisation of its likelihood by
Nelder-Mead (scipy) and by recovery of known strengths from simulated comparisons; Elo against
a hand-worked update."""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest

from storyeval.base.errors import DegenerateInputWarning
from storyeval.meta.bradley_terry import bradley_terry, count_comparisons, elo, strongly_connected


def _simulate(strengths: dict[str, float], n: int, seed: int, nu: float = 0.0):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    systems = list(strengths)
    comparisons = []
    for _ in range(n):
        a, b = rng.choice(systems, size=2, replace=False)
        pa, pb = math.exp(strengths[a]), math.exp(strengths[b])
        tie = nu * math.sqrt(pa * pb)
        u = rng.random() * (pa + pb + tie)
        winner = a if u < pa else (b if u < pa + pb else "tie")
        comparisons.append((str(a), str(b), str(winner)))
    return comparisons


def test_bradley_terry_matches_choix():
    import choix  # a dev dependency (installed by make test)

    comparisons = _simulate({"a": 0.8, "b": 0.2, "c": -0.1, "d": -0.9}, 400, seed=1)
    fit = bradley_terry(comparisons, ties="drop", systems=["a", "b", "c", "d"])
    index = {s: i for i, s in enumerate("abcd")}
    data = [(index[w], index[b if w == a else a]) for a, b, w in comparisons]
    reference = choix.ilsr_pairwise(4, data, alpha=0.0, max_iter=10_000, tol=1e-12)
    reference = reference - reference.mean()
    ours = np.array([fit.strengths[s] for s in "abcd"])
    np.testing.assert_allclose(ours, reference, atol=1e-6)


def test_davidson_ties_maximise_their_likelihood_and_recover_the_truth():
    from scipy.optimize import minimize

    truth = {"a": 1.0, "b": 0.3, "c": -0.2, "d": -1.1}
    comparisons = _simulate(truth, 6000, seed=4, nu=0.6)
    fit = bradley_terry(comparisons, ties="davidson", systems=list(truth))
    counts = count_comparisons(comparisons, systems=list(truth))

    def negative_ll(params: np.ndarray) -> float:
        theta = np.append(params[:3], -params[:3].sum())  # centred, like the fit
        nu = math.exp(params[3])
        total = 0.0
        for i, j in itertools.permutations(range(4), 2):
            pi, pj = math.exp(theta[i]), math.exp(theta[j])
            d = pi + pj + nu * math.sqrt(pi * pj)
            total += counts.wins[i, j] * math.log(pi / d)
            if i < j:
                total += counts.ties[i, j] * math.log(nu * math.sqrt(pi * pj) / d)
        return -total

    start = np.zeros(4)
    reference = minimize(
        negative_ll,
        start,
        method="Nelder-Mead",
        options={"xatol": 1e-9, "fatol": 1e-10, "maxiter": 20000},
    )
    ours = np.array([fit.strengths[s] for s in "abc"])
    np.testing.assert_allclose(ours, reference.x[:3], atol=2e-4)
    assert fit.tie_parameter == pytest.approx(math.exp(reference.x[3]), rel=1e-3)
    assert fit.log_likelihood == pytest.approx(-reference.fun, rel=1e-8)
    for s, value in truth.items():  # 6000 comparisons pin the strengths within ~0.07
        assert abs(fit.strengths[s] - (value - np.mean(list(truth.values())))) < 0.12, s
    assert 0.5 < fit.tie_parameter < 0.7


def test_a_system_that_never_loses_gets_a_prior_and_a_warning():
    comparisons = [("a", "b", "a")] * 5 + [("b", "c", "b"), ("c", "b", "c")]
    assert not strongly_connected(count_comparisons(comparisons))
    with pytest.warns(DegenerateInputWarning, match="do not exist"):
        fit = bradley_terry(comparisons)
    assert fit.prior > 0 and fit.strengths["a"] > fit.strengths["b"]
    assert all(math.isfinite(v) for v in fit.strengths.values())


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="two different systems"):
        count_comparisons([("a", "a", "a")])
    with pytest.raises(ValueError, match="winner must be"):
        count_comparisons([("a", "b", "c")])
    with pytest.raises(ValueError, match="ties must be one of"):
        bradley_terry([("a", "b", "a")], ties="split")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DegenerateInputWarning)
        with pytest.raises(ValueError, match="at least two systems"):
            bradley_terry(count_comparisons([], systems=["a"]))


def test_elo_by_hand():
    """a (1000) beats b (1000): expected 0.5, so a gains K/2 = 16 with K = 32."""
    ratings = elo([("a", "b", "a")], k_factor=32)
    assert ratings == {"a": 1016.0, "b": 984.0}
    tie = elo([("a", "b", "tie")], k_factor=32)
    assert tie == {"a": 1000.0, "b": 1000.0}
