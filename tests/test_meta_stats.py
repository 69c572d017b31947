"""Correlation primitives: parity with scipy, exact small-n p-values, properties."""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from storyeval.base.stats import (
    exact_permutation_p,
    kendall_resampled,
    percentile_interval,
    rows_correlation,
    sign_flip_test,
)
from storyeval.meta import DegenerateInputWarning, correlation

SCIPY = {
    "pearson": lambda x, y: stats.pearsonr(x, y),
    "spearman": lambda x, y: stats.spearmanr(x, y),
    "kendall": lambda x, y: stats.kendalltau(x, y),
}


def _tied_sample(seed: int, n: int = 40) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.integers(1, 6, n).astype(float)  # Likert-like, many ties
    y = x + rng.normal(0, 1.2, n)
    return x, np.round(y, 1)


@pytest.mark.parametrize("method", ["pearson", "spearman", "kendall"])
def test_point_estimate_and_p_match_scipy(method):
    """Parity: estimates and p-values are scipy.stats' (n > 8, so no exact p-value)."""
    x, y = _tied_sample(1)
    estimate, p_value, n = correlation(x, y, method=method)
    reference = SCIPY[method](x, y)
    assert n == 40
    assert estimate == pytest.approx(reference.statistic, abs=1e-12)
    assert p_value == pytest.approx(reference.pvalue, rel=1e-9)


def test_kendall_tau_c_matches_scipy():
    x, y = _tied_sample(2)
    estimate, p_value, _ = correlation(x, y, method="kendall", kendall_variant="c")
    reference = stats.kendalltau(x, y, variant="c")
    assert estimate == pytest.approx(reference.statistic, abs=1e-12)
    assert p_value == pytest.approx(reference.pvalue, rel=1e-9)
    assert estimate != pytest.approx(stats.kendalltau(x, y).statistic)  # b and c differ with ties


def test_missing_pairs_are_dropped():
    x = np.array([1.0, 2, np.nan, 4, 5, 6, 7, 8, 9, 10])
    y = np.array([2.0, 1, 3, np.nan, 5, 7, 6, 9, 8, 10])
    estimate, _, n = correlation(x, y, method="spearman")
    keep = np.isfinite(x) & np.isfinite(y)
    assert n == 8
    assert estimate == pytest.approx(stats.spearmanr(x[keep], y[keep]).statistic)


@pytest.mark.parametrize(
    ("method", "variant"), [("pearson", "b"), ("spearman", "b"), ("kendall", "b"), ("kendall", "c")]
)
def test_row_estimators_match_scipy(method, variant):
    """The vectorised bootstrap estimators equal scipy row by row, ties included."""
    rng = np.random.default_rng(3)
    x = rng.integers(0, 4, (60, 25)).astype(float)
    y = x + rng.integers(0, 3, (60, 25))
    ours = rows_correlation(x, y, method=method, kendall_variant=variant)
    if method == "kendall":
        ref = [stats.kendalltau(a, b, variant=variant).statistic for a, b in zip(x, y, strict=True)]
    else:
        ref = [SCIPY[method](a, b).statistic for a, b in zip(x, y, strict=True)]
    np.testing.assert_allclose(ours, ref, atol=1e-12)


def test_row_estimators_give_nan_for_constant_rows():
    x = np.array([[1.0, 1, 1, 1], [1, 2, 3, 4]])
    y = np.array([[1.0, 2, 3, 4], [2, 2, 2, 2]])
    for method in ("pearson", "spearman", "kendall"):
        assert np.isnan(rows_correlation(x, y, method=method)).all()


@pytest.mark.parametrize("variant", ["b", "c"])
def test_kendall_from_resample_weights_matches_scipy(variant):
    """tau of a bootstrap resample computed from multiplicity weights equals scipy's tau of
    the resampled data (repeated items tie with themselves)."""
    rng = np.random.default_rng(4)
    n = 50
    x = rng.integers(0, 5, n).astype(float)
    y = np.round(x + rng.normal(0, 1, n))
    idx = rng.integers(0, n, (25, n))
    weights = np.zeros((25, n))
    np.add.at(weights, (np.repeat(np.arange(25), n), idx.ravel()), 1.0)
    ours = kendall_resampled(x, y, weights, variant=variant)
    ref = [stats.kendalltau(x[i], y[i], variant=variant).statistic for i in idx]
    np.testing.assert_allclose(ours, ref, atol=1e-12)


def test_exact_p_value_for_three_points():
    """Hand-worked: 3 points ranked identically are one of 3! = 6 pairings; the two-sided
    exact p-value counts the identical and the reversed pairing: 2/6. scipy's asymptotic
    p-value for rho = 1 at n = 3 is 0, which would be an invented certainty."""
    estimate, p_value, _ = correlation([1, 2, 3], [10, 20, 30], method="spearman")
    assert estimate == pytest.approx(1.0)
    assert p_value == pytest.approx(2 / 6)
    assert stats.spearmanr([1, 2, 3], [10, 20, 30]).pvalue == 0.0


@pytest.mark.parametrize("method", ["pearson", "spearman", "kendall"])
def test_exact_p_value_equals_brute_force_enumeration(method):
    x = np.array([0.3, 1.2, 0.7, 2.5, 1.9, 3.1])
    y = np.array([1.0, 2.0, 1.5, 2.2, 3.0, 2.9])
    observed = abs(SCIPY[method](x, y).statistic)
    hits = 0
    perms = list(itertools.permutations(range(6)))
    for perm in perms:
        value = SCIPY[method](x[list(perm)], y).statistic
        hits += abs(value) >= observed - 1e-12
    assert exact_permutation_p(x, y, method=method) == pytest.approx(hits / len(perms))


def test_sign_flip_test_exact_and_randomized():
    # Hand-worked: 5 equal positive values; only all-plus and all-minus sign patterns reach
    # |mean| = 1, so p = 2 / 2^5.
    assert sign_flip_test([1, 1, 1, 1, 1]) == pytest.approx(2 / 32)
    values = np.linspace(-0.2, 0.9, 30)
    p1 = sign_flip_test(values, seed=5)
    assert p1 == sign_flip_test(values, seed=5)
    assert 0 < p1 < 0.01
    assert math.isnan(sign_flip_test([0.0, 0.0]))


def test_degenerate_inputs_give_nan_with_a_named_warning():
    with pytest.warns(DegenerateInputWarning, match="constant"):
        estimate, p_value, n = correlation([3, 3, 3, 3], [1, 2, 3, 4])
    assert math.isnan(estimate) and math.isnan(p_value) and n == 4
    with pytest.warns(DegenerateInputWarning, match="2 complete pair"):
        estimate, _, _ = correlation([1, 2, np.nan], [1, 2, 3], method="kendall")
    assert math.isnan(estimate)


def test_unknown_method_is_refused():
    with pytest.raises(ValueError, match="must be one of pearson, spearman, kendall"):
        correlation([1, 2, 3], [1, 2, 3], method="pearsonr")


def test_percentile_interval_handles_undefined_replicates():
    with pytest.warns(Warning, match="2 of 10 bootstrap replicates"):
        low, high = percentile_interval([np.nan, np.nan, *range(8)], confidence=0.5)
    assert (low, high) == pytest.approx(tuple(np.quantile(np.arange(8), [0.25, 0.75])))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert all(math.isnan(v) for v in percentile_interval([np.nan] * 6 + [1.0]))


finite_floats = st.integers(min_value=-300, max_value=300).map(lambda v: v / 7)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(finite_floats, finite_floats), min_size=9, max_size=30),
    st.randoms(use_true_random=False),
)
def test_properties_row_order_and_monotone_transforms(pairs, random):
    """Row order never matters; rho and tau are unchanged by strictly increasing transforms."""
    x = np.array([p[0] for p in pairs])
    y = np.array([p[1] for p in pairs])
    order = list(range(len(pairs)))
    random.shuffle(order)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for method in ("pearson", "spearman", "kendall"):
            a = correlation(x, y, method=method)
            b = correlation(x[order], y[order], method=method)
            if math.isnan(a[0]):
                assert math.isnan(b[0])
                continue
            assert a[0] == pytest.approx(b[0], abs=1e-9)
            assert a[1] == pytest.approx(b[1], rel=1e-6, abs=1e-12)
        for method in ("spearman", "kendall"):
            a = correlation(x, y, method=method)
            transformed = correlation(np.arctan(x / 100) * 7 + 3, y**3, method=method)
            if math.isnan(a[0]):
                continue
            assert transformed[0] == pytest.approx(a[0], abs=1e-9)
