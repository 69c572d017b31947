"""Adaptive assignment: send the next rater where the study's estimate is least certain.

The study server and :func:`simulate_adaptive` share these functions, so the simulation shows
what the server does. An item's uncertainty is the width of a normal interval of its mean
judgment (per judged text and criterion; an item's width is its widest). The within-item
variance is shrunk toward the study's pooled within-item variance with the weight of
``prior_weight`` judgments, a conjugate-style prior that keeps two raters who happen to agree
from settling an item alone, and the width uses the judgments already *planned* (done plus
reserved), so participants who claim at the same moment spread over items instead of all
being sent to the same one.

Routing (:func:`route`): items below ``min_raters`` planned judgments first (coverage before
refinement, in claiming order), then the widest anticipated interval first; an item whose
anticipated width is within ``target_width`` waits for its pending judgments; an item whose
width from done judgments alone is within the target is *settled* and gets no more raters.
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from storyeval.human.model import AdaptiveAssignment


@dataclass(frozen=True)
class Moments:
    """Count, sum and sum of squares of one cell's judgments (one text and criterion)."""

    n: int
    total: float
    squares: float

    @property
    def variance(self) -> float:
        """The sample variance (``n - 1`` denominator; 0 below two judgments)."""
        if self.n < 2:
            return 0.0
        mean = self.total / self.n
        return max(0.0, (self.squares - self.n * mean * mean) / (self.n - 1))


def moments_of(values: Iterable[float]) -> Moments:
    """The :class:`Moments` of some judgments."""
    array = np.asarray(list(values), dtype=float)
    return Moments(int(array.size), float(array.sum()), float((array * array).sum()))


def pooled_variance(
    cells: Iterable[Moments], *, fallback: float = 1.0, floor: float = 0.0
) -> float:
    """The within-cell variance pooled over cells with two or more judgments: ``fallback``
    when there are none or when every such cell is unanimous (nothing is known of the spread
    then), and never below ``floor`` (so raters who agree on everything cannot make every
    interval narrow).

    >>> pooled_variance([Moments(2, 3.0, 5.0), Moments(3, 9.0, 27.0)])  # (0.5 * 1 + 0 * 2) / 3
    0.16666666666666666
    >>> pooled_variance([Moments(2, 6.0, 18.0), Moments(3, 9.0, 27.0)], fallback=2.0)  # unanimous
    2.0
    >>> pooled_variance([Moments(2, 3.0, 5.0)], floor=0.8)
    0.8
    """
    numerator = 0.0
    dof = 0
    for cell in cells:
        if cell.n >= 2:
            numerator += cell.variance * (cell.n - 1)
            dof += cell.n - 1
    pooled = numerator / dof if dof and numerator > 0 else fallback
    return max(pooled, floor)


def interval_width(
    cell: Moments, planned: int, *, pooled: float, prior_weight: float, confidence: float
) -> float:
    """The width of the ``confidence`` normal interval of the cell's mean once ``planned``
    judgments are in (infinite with none planned), its variance shrunk toward ``pooled``.

    >>> round(interval_width(Moments(4, 12.0, 40.0), 4, pooled=1.0, prior_weight=2.0, confidence=0.95), 3)
    2.263
    """
    if planned <= 0:
        return math.inf
    dof = max(cell.n - 1, 0)
    shrunk = (prior_weight * pooled + dof * cell.variance) / (prior_weight + dof or 1.0)
    variance = max(shrunk, cell.variance)  # the prior only guards against chance agreement
    z = float(_normal_quantile(0.5 + confidence / 2))
    return 2 * z * math.sqrt(variance / planned)


@functools.lru_cache(maxsize=16)  # one confidence per study: not a scipy call per item
def _normal_quantile(p: float) -> float:
    from scipy.stats import norm

    return float(norm.ppf(p))


@dataclass(frozen=True)
class ItemState:
    """Where one item stands: judgments done and planned, and its interval widths."""

    item_key: str
    done: int
    planned: int
    width: float
    anticipated_width: float
    settled: bool


def item_states(
    cells: Mapping[str, Sequence[Moments]],
    done: Mapping[str, int],
    planned: Mapping[str, int],
    settings: AdaptiveAssignment,
    *,
    fallback_variance: float = 1.0,
) -> dict[str, ItemState]:
    """Every item's :class:`ItemState` from its cells' moments (of the judgments that may
    settle it) and its done and planned counts (items are the keys of ``planned`` and
    ``done``). The pooled variance is at least ``settings.variance_floor`` times
    ``fallback_variance`` (the prior spread); an item's width from done judgments counts the
    judgments its moments hold, so judgments left out of them settle nothing."""
    pooled = pooled_variance(
        (c for group in cells.values() for c in group),
        fallback=fallback_variance,
        floor=settings.variance_floor * fallback_variance,
    )
    options = {
        "pooled": pooled,
        "prior_weight": settings.prior_weight,
        "confidence": settings.confidence,
    }
    states = {}
    for key in sorted(set(planned) | set(done)):
        groups = cells.get(key) or [Moments(0, 0.0, 0.0)]
        n_done, n_planned = done.get(key, 0), max(planned.get(key, 0), done.get(key, 0))
        counted = min(min(c.n for c in groups), n_done)
        width = max(interval_width(c, counted, **options) for c in groups)
        pending = counted + n_planned - n_done  # the reserved judgments may count once in
        anticipated = max(interval_width(c, pending, **options) for c in groups)
        settled = counted >= settings.min_raters and width <= settings.target_width
        states[key] = ItemState(key, n_done, n_planned, width, anticipated, settled)
    return states


def route(
    candidates: Sequence[str], states: Mapping[str, ItemState], settings: AdaptiveAssignment
) -> list[str]:
    """The candidate items in routing order, without those that should get no rater now.

    ``candidates`` are item keys in claiming order (an item may repeat: one entry per open
    slot). Items under ``min_raters`` planned judgments keep that order and go first; the rest
    follow by anticipated width, widest first; settled items and items whose pending
    judgments should bring them within the target are left out.
    """
    coverage: list[tuple[int, str]] = []
    refine: list[tuple[float, int, str]] = []
    for position, key in enumerate(candidates):
        state = states.get(key)
        if state is None or state.planned < settings.min_raters:
            coverage.append((position, key))
        elif not state.settled and state.anticipated_width > settings.target_width:
            refine.append((-state.anticipated_width, position, key))
    return [key for _, key in coverage] + [key for _, _, key in sorted(refine)]


# ----------------------------------------------------------------------------- simulation


@dataclass(frozen=True)
class SimulatedItems:
    """Items of a simulated Likert study: true means and each item's rater disagreement."""

    means: np.ndarray
    noise: np.ndarray
    scale: int

    def rate(self, item: int, rng: np.random.Generator) -> float:
        """One rater's judgment of ``item``, rounded and clipped to the scale."""
        value = rng.normal(self.means[item], self.noise[item])
        return float(min(self.scale, max(1, round(value))))


def simulated_items(
    n_items: int,
    *,
    scale: int = 5,
    noise: Sequence[float] = (0.5, 1.5),
    contested_share: float = 0.3,
    seed: int = 0,
) -> SimulatedItems:
    """Items whose true means spread over the scale; a ``contested_share`` of them draw
    raters' noise ``noise[1]``, the rest ``noise[0]`` (studies mix clear and contested
    stories)."""
    rng = np.random.default_rng(seed)
    means = rng.uniform(1.5, scale - 0.5, size=n_items)
    contested = rng.random(n_items) < contested_share
    return SimulatedItems(means, np.where(contested, noise[1], noise[0]), scale)


def _run_adaptive(
    items: SimulatedItems, settings: AdaptiveAssignment, most: int, batch: int, seed: int
) -> dict[int, list[float]]:
    """Participants of ``batch`` items claim by :func:`route` and answer before the next
    claims, until nothing is routed (every item settled or at ``most`` raters)."""
    rng = np.random.default_rng(seed)
    order = list(range(len(items.means)))
    random.Random(seed).shuffle(order)
    values: dict[int, list[float]] = {i: [] for i in order}
    fallback = (items.scale**2 - 1) / 12
    while True:
        cells = {str(i): [moments_of(v)] for i, v in values.items()}
        counts = {str(i): len(v) for i, v in values.items()}
        states = item_states(cells, counts, counts, settings, fallback_variance=fallback)
        candidates = [str(i) for i in order if len(values[i]) < most]
        routed = list(dict.fromkeys(route(candidates, states, settings)))[:batch]
        if not routed:
            return values
        for key in routed:
            values[int(key)].append(items.rate(int(key), rng))


def true_spread(items: SimulatedItems) -> np.ndarray:
    """Each item's true standard deviation of one judgment (of the rounded, clipped normal)."""
    from scipy.stats import norm

    points = np.arange(1, items.scale + 1, dtype=float)
    upper = norm.cdf((points[None, :] + 0.5 - items.means[:, None]) / items.noise[:, None])
    upper[:, -1] = 1.0
    lower = np.concatenate([np.zeros((len(items.means), 1)), upper[:, :-1]], axis=1)
    probability = upper - lower
    mean = probability @ points
    return np.asarray(np.sqrt(np.maximum(probability @ points**2 - mean**2, 0.0)), dtype=float)


def _true_widths(spread: np.ndarray, counts: np.ndarray, confidence: float) -> np.ndarray:
    z = _normal_quantile(0.5 + confidence / 2)
    return np.asarray(2 * z * spread / np.sqrt(np.maximum(counts, 1)), dtype=float)


def simulate_adaptive(
    settings: AdaptiveAssignment,
    *,
    n_items: int = 200,
    raters_per_item: int = 10,
    batch: int = 10,
    scale: int = 5,
    noise: Sequence[float] = (0.5, 1.5),
    contested_share: float = 0.3,
    repeats: int = 5,
    seed: int = 0,
) -> pd.DataFrame:
    """How many judgments adaptive assignment saves for the same interval widths.

    For each repeat, a simulated study (see :func:`simulated_items`) is run with adaptive
    assignment as the server does it; the fixed design that matches it gives every item the
    same number of raters, the smallest number at which at least as many items reach
    ``target_width`` as the adaptive run did (widths from the items' true noise, so neither
    design is judged by its own estimate). One row per repeat and design: judgments, items
    within the target, mean and largest true width, and the saving.
    """
    rows = []
    for repeat in range(repeats):
        items = simulated_items(
            n_items, scale=scale, noise=noise, contested_share=contested_share, seed=seed + repeat
        )
        values = _run_adaptive(items, settings, raters_per_item, batch, seed + repeat)
        counts = np.array([len(values[i]) for i in range(n_items)])
        spread = true_spread(items)
        widths = _true_widths(spread, counts, settings.confidence)
        reached = int((widths <= settings.target_width).sum())
        fixed_raters, fixed_widths = raters_per_item, widths
        for raters in range(1, raters_per_item + 1):
            fixed_widths = _true_widths(spread, np.full(n_items, raters), settings.confidence)
            if (fixed_widths <= settings.target_width).sum() >= reached:
                fixed_raters = raters
                break
        adaptive_total, fixed_total = int(counts.sum()), fixed_raters * n_items
        for design, total, chosen in (
            ("adaptive", adaptive_total, widths),
            ("fixed", fixed_total, fixed_widths),
        ):
            rows.append(
                {
                    "repeat": repeat,
                    "design": design,
                    "judgments": total,
                    "items": n_items,
                    "within_target": int((chosen <= settings.target_width).sum()),
                    "mean_width": float(chosen.mean()),
                    "max_width": float(chosen.max()),
                    "saving": 1 - adaptive_total / fixed_total if design == "adaptive" else 0.0,
                }
            )
    return pd.DataFrame(rows)
