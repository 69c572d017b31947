"""The NLG triangle test: planning and analysis (González Corbelle et al. 2020, first paper; ISO 4120 / AENOR 2010).

A judge sees a *triad*: two texts by one subject (system or human) and one by another, and must
pick the odd one out (forced choice). Under the null hypothesis of no perceptible difference a
judge is right with probability 1/3. If a proportion ``p_d`` of the population perceives the
difference (and the rest guess), the probability of a correct answer is
``p_c = p_d + (1 - p_d) / 3``.

Everything here is computed from the exact binomial distribution, which reproduces the
published tables (see ``tests/human/test_triangle.py``):

* Table 1 (judges needed for ``alpha``, ``beta`` and ``p_d``): :func:`judges_needed`; the
  smallest ``n`` whose exact one-sided test at level ``alpha`` has power at least ``1 - beta``
  against ``p_d``. It reproduces 124 of the 125 published cells; for ``alpha = 0.05``,
  ``beta = 0.001``, ``p_d = 10%`` the exact computation gives 1178 judges (power 0.999012)
  where the table prints 1181, a rounding artefact of the original computation.
* Table 2 (minimum number of correct answers for a test of difference): :func:`min_correct`.
* Table 3 (maximum number of correct answers for a test of similarity): :func:`max_correct`.

The confidence bounds on ``p_d`` use the normal approximations printed in the paper
(:func:`pd_lower_bound`, :func:`pd_upper_bound`); exact (Clopper-Pearson) bounds are reported
beside them.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any, Literal, cast

import numpy as np

from storyeval.base.signature import Signature
from storyeval.base.validation import check_choice

TRIANGLE_ORDERS: tuple[str, ...] = ("AAB", "ABA", "BAA", "BBA", "BAB", "ABB")
"""The six triads of texts by subjects A and B (González Corbelle et al. 2020, section 4.1)."""

TriangleTest = Literal["difference", "similarity"]
TRIANGLE_TESTS: tuple[str, ...] = ("difference", "similarity")

MIN_JUDGES_RECOMMENDED: dict[str, int] = {"difference": 18, "similarity": 30}
"""Minimum numbers of judges recommended whatever the sensitivity (González Corbelle et al. 2020, footnote 2)."""

P_GUESS = 1.0 / 3.0


def _check_probability(name: str, value: float, *, low: float = 0.0, high: float = 1.0) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{name} must be a number; got {value!r}")
    if not low < value < high:
        raise ValueError(f"{name} must be strictly between {low} and {high}; got {value}")
    return float(value)


def _check_count(name: str, value: int, *, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ValueError(f"{name} must be an integer; got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}; got {value}")
    return int(value)


def p_correct(pd: float) -> float:
    """Probability of a correct answer when a proportion ``pd`` perceives the difference.

    >>> round(p_correct(0.5), 4)
    0.6667
    """
    return pd + (1.0 - pd) / 3.0


def _min_correct_array(n: np.ndarray, alpha: float) -> np.ndarray:
    """Exact critical values for an array of judge counts (n + 1 where impossible)."""
    from scipy.stats import binom

    x = binom.ppf(1.0 - alpha, n, P_GUESS).astype(np.int64) + 1
    # guard the floating-point edge: make x the smallest value with P(X >= x) <= alpha
    for _ in range(3):
        too_low = binom.sf(x - 1, n, P_GUESS) > alpha
        x = np.where(too_low, x + 1, x)
        lower_ok = (x > 0) & (binom.sf(x - 2, n, P_GUESS) <= alpha)
        x = np.where(lower_ok, x - 1, x)
    return cast("np.ndarray", np.minimum(x, n + 1))


def min_correct(judges: int, alpha: float) -> int | None:
    """Minimum number of correct answers to conclude that there is a perceptible difference.

    The smallest ``x`` with ``P(X >= x) <= alpha`` for ``X ~ Binomial(judges, 1/3)``;
    ``None`` when even ``judges`` correct answers would not be significant (the "-" cells of
    Table 2).

    Examples
    --------
    >>> min_correct(24, 0.05), min_correct(6, 0.001)
    (13, None)
    """
    n = _check_count("judges", judges)
    a = _check_probability("alpha", alpha)
    x = int(_min_correct_array(np.array([n]), a)[0])
    return None if x > n else x


def max_correct(judges: int, beta: float, pd: float) -> int | None:
    """Maximum number of correct answers to conclude that two samples are similar.

    The largest ``x`` with ``P(X <= x) <= beta`` for ``X ~ Binomial(judges, p_c(pd))``;
    ``None`` when no count qualifies (too few judges for this ``beta`` and ``pd``).

    Examples
    --------
    >>> max_correct(30, 0.05, 0.3), max_correct(18, 0.001, 0.1)
    (11, 0)
    """
    from scipy.stats import binom

    n = _check_count("judges", judges)
    b = _check_probability("beta", beta)
    d = _check_probability("pd", pd)
    cdf = binom.cdf(np.arange(n + 1), n, p_correct(d))
    ok = np.nonzero(cdf <= b)[0]
    return int(ok[-1]) if len(ok) else None


def power(judges: int, alpha: float, pd: float) -> float:
    """Probability that the exact test of difference at level ``alpha`` detects ``pd``.

    >>> round(power(23, 0.05, 0.5), 3)
    0.952
    """
    from scipy.stats import binom

    n = _check_count("judges", judges)
    a = _check_probability("alpha", alpha)
    d = _check_probability("pd", pd)
    x = int(_min_correct_array(np.array([n]), a)[0])
    if x > n:
        return 0.0
    return float(binom.sf(x - 1, n, p_correct(d)))


def judges_needed(alpha: float, beta: float, pd: float, *, max_judges: int = 100_000) -> int:
    """Number of judges needed for a triangle test with risks ``alpha``, ``beta`` and ``pd``.

    The smallest ``n`` for which the exact binomial test at level ``alpha`` reaches power
    ``1 - beta`` against a proportion ``pd`` of discriminators (Table 1 of González Corbelle et al. (2020), after
    Schlich 1993). The same table serves the test of similarity, where ``beta`` is the risk
    that matters most.

    Raises
    ------
    ValueError
        If a risk is outside (0, 1), or more than ``max_judges`` judges would be needed.

    Examples
    --------
    >>> judges_needed(0.05, 0.05, 0.5)
    23
    >>> judges_needed(0.05, 0.01, 0.3)
    98
    """
    from scipy.stats import binom

    a = _check_probability("alpha", alpha)
    b = _check_probability("beta", beta)
    d = _check_probability("pd", pd)
    pc = p_correct(d)
    start = 1
    chunk = 64
    while start <= max_judges:
        n = np.arange(start, min(start + chunk, max_judges + 1))
        x = _min_correct_array(n, a)
        achieved = np.where(x <= n, binom.sf(x - 1, n, pc), 0.0)
        hits = np.nonzero(achieved >= 1.0 - b)[0]
        if len(hits):
            return int(n[hits[0]])
        start += chunk
        chunk *= 2
    raise ValueError(
        f"more than {max_judges} judges would be needed for alpha={a}, beta={b}, pd={d}"
    )


def _z(level: float) -> float:
    from scipy.stats import norm

    return float(norm.ppf(1.0 - level))


def pd_estimate(judges: int, correct: int) -> float:
    """Point estimate of ``pd``: ``1.5 x / n - 0.5``, floored at 0.

    >>> round(pd_estimate(98, 36), 4)
    0.051
    """
    n, x = _check_nx(judges, correct)
    return max(0.0, 1.5 * x / n - 0.5)


def _check_nx(judges: int, correct: int) -> tuple[int, int]:
    n = _check_count("judges", judges)
    x = _check_count("correct", correct, minimum=0)
    if x > n:
        raise ValueError(f"correct must be <= judges ({n}); got {x}")
    return n, x


def pd_lower_bound(judges: int, correct: int, alpha: float) -> float:
    """Lower one-sided ``100(1 - alpha)%`` confidence bound of ``pd`` (test of difference).

    ``1.5 x/n - 0.5 - 1.5 z sqrt((x/n)(1 - x/n)/n)`` with ``z`` the ``1 - alpha`` normal
    quantile (González Corbelle et al. 2020, section 4.2.1), floored at 0 because ``pd`` is a proportion.

    >>> round(pd_lower_bound(24, 16, 0.05), 3)
    0.263
    """
    n, x = _check_nx(judges, correct)
    a = _check_probability("alpha", alpha)
    p = x / n
    value = 1.5 * p - 0.5 - 1.5 * _z(a) * math.sqrt(p * (1.0 - p) / n)
    return min(1.0, max(0.0, value))


def pd_upper_bound(judges: int, correct: int, beta: float) -> float:
    """Upper one-sided ``100(1 - beta)%`` confidence bound of ``pd`` (test of similarity).

    ``1.5 x/n - 0.5 + 1.5 z sqrt((n x - x^2)/n^3)`` with ``z`` the ``1 - beta`` normal
    quantile (González Corbelle et al. 2020, section 4.2.2), clipped to [0, 1]. The worked example of section 5.2
    (98 judges, 36 correct, ``beta = 0.01``) gives 0.221:

    >>> round(pd_upper_bound(98, 36, 0.01), 3)
    0.221
    """
    n, x = _check_nx(judges, correct)
    b = _check_probability("beta", beta)
    value = 1.5 * x / n - 0.5 + 1.5 * _z(b) * math.sqrt((n * x - x * x) / n**3)
    return min(1.0, max(0.0, value))


def _pd_from_pc(pc: float) -> float:
    return min(1.0, max(0.0, 1.5 * pc - 0.5))


def pd_bounds_exact(judges: int, correct: int, level: float) -> tuple[float, float]:
    """One-sided exact (Clopper-Pearson) bounds of ``pd`` at confidence ``1 - level`` each."""
    from scipy.stats import beta as beta_dist

    n, x = _check_nx(judges, correct)
    a = _check_probability("level", level)
    pc_low = 0.0 if x == 0 else float(beta_dist.ppf(a, x, n - x + 1))
    pc_high = 1.0 if x == n else float(beta_dist.ppf(1.0 - a, x + 1, n - x))
    return _pd_from_pc(pc_low), _pd_from_pc(pc_high)


def balanced_orders(judges: int, *, seed: int | None = 0) -> list[str]:
    """The triad order for each judge, balanced in groups of six.

    Each consecutive group of six judges sees the six orders in a random permutation, so each
    order is used ``judges // 6`` or ``judges // 6 + 1`` times (González Corbelle et al. 2020, section 4.1: with 64
    judges four orders are evaluated eleven times and two ten times).

    >>> sorted(Counter(balanced_orders(64)).values())
    [10, 10, 11, 11, 11, 11]
    """
    n = _check_count("judges", judges)
    rng = random.Random(seed)
    orders: list[str] = []
    while len(orders) < n:
        group = list(TRIANGLE_ORDERS)
        rng.shuffle(group)
        orders.extend(group)
    return orders[:n]


def odd_position(order: str) -> int:
    """1-based position of the odd sample in a triad order such as ``"ABA"``.

    >>> odd_position("AAB"), odd_position("ABA"), odd_position("BAA"), odd_position("ABB")
    (3, 2, 1, 1)
    """
    check_choice(order, TRIANGLE_ORDERS, "order")
    counts = Counter(order)
    odd = next(letter for letter, count in counts.items() if count == 1)
    return order.index(odd) + 1


@dataclass(frozen=True)
class TrianglePlan:
    """How many judges a triangle test needs, and what the test then looks like."""

    judges: int
    alpha: float
    beta: float
    pd: float
    test: str
    min_correct: int | None
    max_correct: int | None
    power: float
    minimum_recommended: int
    order_counts: dict[str, int]
    signature: str

    def to_dict(self) -> dict[str, Any]:
        """The plan as a JSON-ready mapping."""
        return asdict(self)


def plan(
    alpha: float, beta: float, pd: float, *, test: TriangleTest = "difference"
) -> TrianglePlan:
    """Plan a triangle test: judges needed (Table 1), and the decision rule at that size.

    ``minimum_recommended`` is the number of judges the standard asks for whatever the
    sensitivity (18 for a test of difference, 30 for a test of similarity); recruit at least
    ``max(judges, minimum_recommended)``.

    Examples
    --------
    >>> p = plan(0.05, 0.05, 0.5)
    >>> p.judges, p.min_correct
    (23, 12)
    """
    check_choice(test, TRIANGLE_TESTS, "test")
    n = judges_needed(alpha, beta, pd)
    counts = Counter(balanced_orders(n))
    return TrianglePlan(
        judges=n,
        alpha=float(alpha),
        beta=float(beta),
        pd=float(pd),
        test=test,
        min_correct=min_correct(n, alpha),
        max_correct=max_correct(n, beta, pd),
        power=power(n, alpha, pd),
        minimum_recommended=MIN_JUDGES_RECOMMENDED[test],
        order_counts={order: counts.get(order, 0) for order in TRIANGLE_ORDERS},
        signature=Signature(
            "triangle_plan",
            {
                "test": test,
                "alpha": float(alpha),
                "beta": float(beta),
                "pd": float(pd),
                "method": "exact-binomial",
            },
        ).render(),
    )


@dataclass(frozen=True)
class TriangleResult:
    """The analysis of a triangle test with ``judges`` evaluations and ``correct`` answers.

    Attributes
    ----------
    min_correct, significant, p_value
        Test of difference at ``alpha``: the exact binomial critical value, whether
        ``correct >= min_correct``, and the one-sided p-value ``P(X >= correct | p = 1/3)``.
    pd_estimate, pd_lower, pd_upper
        The point estimate of the proportion of discriminators and its normal-approximation
        bounds: lower at confidence ``1 - alpha``, upper at ``1 - beta`` (``1 - alpha`` when no
        ``beta`` is given).
    pd_lower_exact, pd_upper_exact
        The same bounds from the exact (Clopper-Pearson) interval of ``p_c``.
    max_correct, similar, similar_p_value
        Test of similarity (only with ``beta`` and ``pd``): the exact critical value, whether
        ``correct <= max_correct``, and ``P(X <= correct | p = p_c(pd))``. ``pd_upper_below_pd``
        is the paper's normal-approximation criterion ``pd_upper < pd``.
    """

    judges: int
    correct: int
    alpha: float
    beta: float | None
    pd: float | None
    proportion_correct: float
    min_correct: int | None
    significant: bool
    p_value: float
    pd_estimate: float
    pd_lower: float
    pd_upper: float
    pd_upper_confidence: float
    pd_lower_exact: float
    pd_upper_exact: float
    max_correct: int | None
    similar: bool | None
    similar_p_value: float | None
    pd_upper_below_pd: bool | None
    notes: tuple[str, ...]
    signature: str

    def to_dict(self) -> dict[str, Any]:
        """The result as a JSON-ready mapping."""
        record = asdict(self)
        record["notes"] = list(self.notes)
        return record


def analyse(
    judges: int,
    correct: int,
    *,
    alpha: float = 0.05,
    beta: float | None = None,
    pd: float | None = None,
) -> TriangleResult:
    """Analyse a triangle test for difference and, given ``beta`` and ``pd``, for similarity.

    Examples
    --------
    The non-expert use case of González Corbelle et al. (2020) (section 5.2): 98 judges, 36 correct answers,
    ``beta = 0.01``, ``pd = 30%``:

    >>> r = analyse(98, 36, alpha=0.05, beta=0.01, pd=0.3)
    >>> round(r.pd_upper, 3), r.similar, r.significant
    (0.221, True, False)
    """
    from scipy.stats import binom

    n, x = _check_nx(judges, correct)
    a = _check_probability("alpha", alpha)
    if (beta is None) != (pd is None) and pd is not None:
        raise ValueError("a test of similarity needs beta as well as pd")
    b = None if beta is None else _check_probability("beta", beta)
    d = None if pd is None else _check_probability("pd", pd)
    threshold = min_correct(n, a)
    p_value = float(binom.sf(x - 1, n, P_GUESS))
    upper_level = b if b is not None else a
    exact_low, _ = pd_bounds_exact(n, x, a)
    _, exact_high = pd_bounds_exact(n, x, upper_level)
    notes: list[str] = []
    max_ok: int | None = None
    similar: bool | None = None
    similar_p: float | None = None
    below: bool | None = None
    if d is not None:
        assert b is not None
        max_ok = max_correct(n, b, d)
        similar = max_ok is not None and x <= max_ok
        similar_p = float(binom.cdf(x, n, p_correct(d)))
        below = pd_upper_bound(n, x, b) < d
        if n < MIN_JUDGES_RECOMMENDED["similarity"]:
            notes.append(
                f"fewer than {MIN_JUDGES_RECOMMENDED['similarity']} judges: below the minimum "
                "recommended for a test of similarity"
            )
    if n < MIN_JUDGES_RECOMMENDED["difference"]:
        notes.append(
            f"fewer than {MIN_JUDGES_RECOMMENDED['difference']} judges: below the minimum "
            "recommended for a test of difference"
        )
    if threshold is None:
        notes.append(f"no number of correct answers out of {n} is significant at alpha={a}")
    fields: dict[str, Any] = {"alpha": a, "beta": b, "pd": d, "n": n, "method": "exact-binomial"}
    return TriangleResult(
        judges=n,
        correct=x,
        alpha=a,
        beta=b,
        pd=d,
        proportion_correct=x / n,
        min_correct=threshold,
        significant=threshold is not None and x >= threshold,
        p_value=p_value,
        pd_estimate=pd_estimate(n, x),
        pd_lower=pd_lower_bound(n, x, a),
        pd_upper=pd_upper_bound(n, x, upper_level),
        pd_upper_confidence=1.0 - upper_level,
        pd_lower_exact=exact_low,
        pd_upper_exact=exact_high,
        max_correct=max_ok,
        similar=similar,
        similar_p_value=similar_p,
        pd_upper_below_pd=below,
        notes=tuple(notes),
        signature=Signature("triangle", fields).render(),
    )


# ----------------------------------------------------------------------------- the tables

TABLE_RISKS: tuple[float, ...] = (0.2, 0.1, 0.05, 0.01, 0.001)
TABLE_PDS: tuple[float, ...] = (0.5, 0.4, 0.3, 0.2, 0.1)


def judges_table(
    alphas: tuple[float, ...] = TABLE_RISKS,
    betas: tuple[float, ...] = TABLE_RISKS,
    pds: tuple[float, ...] = TABLE_PDS,
) -> Any:
    """Table 1 of González Corbelle et al. (2020) as a tidy DataFrame: columns ``pd``, ``alpha``, ``beta``, ``judges``."""
    import pandas as pd_

    rows = [
        {"pd": d, "alpha": a, "beta": b, "judges": judges_needed(a, b, d)}
        for d in pds
        for a in alphas
        for b in betas
    ]
    return pd_.DataFrame(rows)


def min_correct_table(
    judges: tuple[int, ...] = tuple(range(6, 25)), alphas: tuple[float, ...] = TABLE_RISKS
) -> Any:
    """Table 2 of González Corbelle et al. (2020): columns ``judges``, ``alpha``, ``min_correct`` (``<NA>`` = "-")."""
    import pandas as pd_

    rows = [
        {"judges": n, "alpha": a, "min_correct": min_correct(n, a)} for n in judges for a in alphas
    ]
    frame = pd_.DataFrame(rows)
    frame["min_correct"] = frame["min_correct"].astype("Int64")
    return frame


def max_correct_table(
    judges: tuple[int, ...] = (18, 24, 30, 36),
    betas: tuple[float, ...] = (0.001, 0.01, 0.05, 0.1, 0.2),
    pds: tuple[float, ...] = (0.1, 0.2, 0.3, 0.4, 0.5),
) -> Any:
    """Table 3 of González Corbelle et al. (2020): columns ``judges``, ``beta``, ``pd``, ``max_correct``."""
    import pandas as pd_

    rows = [
        {"judges": n, "beta": b, "pd": d, "max_correct": max_correct(n, b, d)}
        for n in judges
        for b in betas
        for d in pds
    ]
    frame = pd_.DataFrame(rows)
    frame["max_correct"] = frame["max_correct"].astype("Int64")
    return frame
