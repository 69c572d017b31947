"""MAUVE (Pillutla et al. 2021; MAUVE* of Pillutla et al. 2023): how close the distribution of
a system's texts is to the distribution of people's texts, from text features.

The computation follows the reference implementation (``mauve-text``, GPLv3, used only as a
test-time reference; this module is storyeval's own, MIT):

1. the features of both sets (``q`` = people, ``p`` = the system) are L2-normalised and
   stacked (people first), reduced by PCA to the components that explain
   ``explained_variance`` of the variance, and quantised by k-means into ``num_buckets``
   clusters (``"auto"``: a tenth of the smaller set, at least 2);
2. each set becomes a histogram over the clusters (MAUVE*: with Krichevsky-Trofimov
   smoothing, half a count added to every cluster);
3. the divergence curve: for mixtures ``R = w P + (1 - w) Q`` at ``points`` weights,
   ``(exp(-c KL(Q || R)), exp(-c KL(P || R)))``; MAUVE is the area under it (1 when the
   histograms are equal, near 0 when they do not overlap).

k-means is seed-dependent (the complaint of mauve issue #11), so :func:`mauve_features`
quantises with several seeds and reports the mean with a Student t interval across seeds.
With the same features and seed, one run equals ``mauve.compute_mauve`` (tested).

Examples
--------
>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> people = rng.normal(size=(200, 8))
>>> result = mauve_features(rng.normal(size=(200, 8)), people, seeds=3, kmeans="sklearn")
>>> bool(result.mauve > 0.8), len(result.per_seed)
(True, 3)
>>> shifted = mauve_features(rng.normal(3.0, 1.0, size=(200, 8)), people, seeds=3, kmeans="sklearn")
>>> bool(shifted.mauve < 0.2)
True
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from storyeval.base.errors import StoryevalWarning, warn
from storyeval.base.signature import Signature
from storyeval.base.validation import check_choice

#: Below this many texts on either side, MAUVE's histogram has fewer than 10 clusters and its
#: value moves a lot with the k-means seed (mauve issues #9 and #18; the paper uses 5,000
#: texts a side). Scores are still computed, with a :class:`MauveWarning`.
MIN_TEXTS = 100
#: The medians of the two sides' lengths (in words) differing by more than this factor make
#: MAUVE measure length more than anything else: a :class:`MauveWarning` says so.
LENGTH_RATIO = 1.5

KMeansBackend = Literal["auto", "faiss", "sklearn"]


class MauveWarning(StoryevalWarning):
    """MAUVE was computed under conditions in which it is known to be unreliable."""


@dataclass(frozen=True)
class MauveRun:
    """MAUVE of one quantisation (one k-means seed)."""

    seed: int
    mauve: float
    mauve_star: float
    frontier_integral: float
    frontier_integral_star: float
    p_hist: np.ndarray
    q_hist: np.ndarray
    curve: np.ndarray


@dataclass(frozen=True)
class MauveResult:
    """MAUVE and MAUVE* over several quantisation seeds.

    Attributes
    ----------
    mauve, mauve_star : float
        Means over the seeds (higher: the system's texts are distributed more like people's).
    mauve_ci, mauve_star_ci : (float, float)
        Student t intervals of those means across seeds (nan with one seed).
    mauve_sd, mauve_star_sd : float
        Standard deviations across seeds.
    per_seed : tuple of MauveRun
        Each quantisation: its seed, scores, histograms and divergence curve.
    num_buckets : int
        The number of k-means clusters.
    n_p, n_q : int
        Texts of the system (p) and of people (q).
    dimensions : int
        PCA components kept (of the first seed's quantisation).
    kmeans : str
        The k-means implementation used (``faiss`` or ``sklearn``).
    notes : tuple of str
        Warnings raised (small samples, lengths that differ).
    signature : Signature or None
        The features and settings that reproduce it (set by
        :func:`storyeval.functional.mauve`).
    """

    mauve: float
    mauve_star: float
    mauve_ci: tuple[float, float]
    mauve_star_ci: tuple[float, float]
    mauve_sd: float
    mauve_star_sd: float
    per_seed: tuple[MauveRun, ...]
    num_buckets: int
    n_p: int
    n_q: int
    dimensions: int
    kmeans: str
    notes: tuple[str, ...] = field(default_factory=tuple)
    signature: Signature | None = None

    def curves(self) -> Any:
        """Every seed's divergence curve as a tidy DataFrame: ``seed``, ``point``, ``x``
        (``exp(-c KL(Q||R))``), ``y`` (``exp(-c KL(P||R))``)."""
        import pandas as pd

        rows = [
            {"seed": run.seed, "point": i, "x": float(x), "y": float(y)}
            for run in self.per_seed
            for i, (x, y) in enumerate(run.curve)
        ]
        return pd.DataFrame(rows, columns=["seed", "point", "x", "y"])


# --------------------------------------------------------------------------- the pieces


def kmeans_backend(requested: str = "auto") -> KMeansBackend:
    """``faiss`` when faiss-cpu is installed (the reference implementation's quantiser, so
    numbers match it), else ``sklearn``; a requested backend that is missing is an error."""
    check_choice(requested, ("auto", "faiss", "sklearn"), "kmeans")
    if requested == "sklearn":
        return "sklearn"
    try:
        import faiss  # noqa: F401
    except ImportError:
        if requested == "faiss":
            raise ImportError(
                "kmeans='faiss' needs faiss-cpu: pip install 'storyeval[models]'"
            ) from None
        return "sklearn"
    return "faiss"


def auto_buckets(n_p: int, n_q: int) -> int:
    """The reference implementation's default: a tenth of the smaller set, at least 2.

    >>> auto_buckets(60, 60), auto_buckets(5000, 4000), auto_buckets(5, 9)
    (6, 400, 2)
    """
    return max(2, round(min(n_p, n_q) / 10))


def _reduce(
    data: np.ndarray, explained_variance: float, seed: int, pca_max_data: int
) -> np.ndarray:
    """PCA to the components explaining ``explained_variance`` (float32, for k-means)."""
    from sklearn.decomposition import PCA

    pca = PCA(n_components=None, whiten=False, random_state=seed + 1)
    if pca_max_data < 0 or pca_max_data >= data.shape[0]:
        pca.fit(data)
    else:
        rows = np.random.RandomState(seed + 5).choice(data.shape[0], pca_max_data, replace=False)
        pca.fit(data[rows])
    kept = int(np.argmax(np.cumsum(pca.explained_variance_ratio_) >= explained_variance))
    return np.ascontiguousarray(pca.transform(data)[:, : kept + 1], dtype=np.float32)


def _cluster(
    data: np.ndarray, k: int, *, seed: int, num_redo: int, max_iter: int, backend: str
) -> np.ndarray:
    """Cluster labels of every row."""
    if backend == "faiss":
        import faiss

        kmeans = faiss.Kmeans(
            data.shape[1],
            k,
            niter=max_iter,
            verbose=False,
            nredo=num_redo,
            update_index=True,
            seed=seed + 2,
            min_points_per_centroid=1,
        )  # min_points_per_centroid only silences a warning
        kmeans.train(data)
        _, labels = kmeans.index.search(data, 1)
        return np.asarray(labels).reshape(-1)
    from sklearn.cluster import KMeans

    model = KMeans(n_clusters=k, n_init=num_redo, max_iter=max_iter, random_state=seed + 2)
    return np.asarray(model.fit_predict(data))


def quantize(
    p_features: np.ndarray,
    q_features: np.ndarray,
    *,
    num_buckets: int,
    seed: int,
    explained_variance: float = 0.9,
    num_redo: int = 5,
    max_iter: int = 500,
    pca_max_data: int = -1,
    kmeans: KMeansBackend = "auto",
) -> tuple[np.ndarray, np.ndarray, int]:
    """Cluster counts of ``p`` and ``q`` over shared k-means clusters, and the number of PCA
    dimensions kept.

    >>> rng = np.random.default_rng(1)
    >>> p_counts, q_counts, dims = quantize(rng.normal(size=(40, 5)), rng.normal(size=(30, 5)),
    ...                                     num_buckets=4, seed=0, kmeans="sklearn")
    >>> int(p_counts.sum()), int(q_counts.sum()), len(p_counts)
    (40, 30, 4)
    """
    from sklearn.preprocessing import normalize

    backend = kmeans_backend(kmeans)
    data = normalize(np.vstack([q_features, p_features]).astype(np.float64), norm="l2", axis=1)
    reduced = _reduce(data, explained_variance, seed, pca_max_data)
    labels = _cluster(
        reduced, num_buckets, seed=seed, num_redo=num_redo, max_iter=max_iter, backend=backend
    )
    n_q = len(q_features)
    q_counts = np.bincount(labels[:n_q], minlength=num_buckets)[:num_buckets]
    p_counts = np.bincount(labels[n_q:], minlength=num_buckets)[:num_buckets]
    return p_counts, q_counts, reduced.shape[1]


def _kl(a: np.ndarray, b: np.ndarray) -> float:
    if np.any((a != 0) & (b == 0)):
        return math.inf
    both = (a != 0) & (b != 0)
    return float(np.sum(a[both] * np.log(a[both] / b[both])))


def divergence_curve(
    p_hist: np.ndarray, q_hist: np.ndarray, *, points: int = 25, scaling: float = 5.0
) -> np.ndarray:
    """The divergence curve, shape ``(points + 2, 2)``: the two extreme points and, for each
    mixture weight ``w`` in ``linspace(1e-6, 1 - 1e-6, points)``, ``(exp(-c KL(Q||R)),
    exp(-c KL(P||R)))`` with ``R = w P + (1 - w) Q``.

    >>> curve = divergence_curve(np.array([0.5, 0.5]), np.array([0.5, 0.5]), points=3)
    >>> curve.round(3).tolist()
    [[1.0, 0.0], [1.0, 1.0], [1.0, 1.0], [1.0, 1.0], [0.0, 1.0]]
    """
    rows = [[0.0, math.inf]]
    for weight in np.linspace(1e-6, 1 - 1e-6, points):
        mixture = weight * p_hist + (1 - weight) * q_hist
        rows.append([_kl(q_hist, mixture), _kl(p_hist, mixture)])
    rows.append([math.inf, 0.0])
    return np.exp(-scaling * np.asarray(rows))


def _trapezoid(x: np.ndarray, y: np.ndarray) -> float:
    return float(np.sum((x[1:] - x[:-1]) * (y[1:] + y[:-1]) / 2))


def curve_area(curve: np.ndarray) -> float:
    """MAUVE from a divergence curve: the mean of the areas taken along each axis.

    >>> same = divergence_curve(np.array([0.3, 0.7]), np.array([0.3, 0.7]))
    >>> disjoint = divergence_curve(np.array([1.0, 0.0]), np.array([0.0, 1.0]))
    >>> round(curve_area(same), 4), round(curve_area(disjoint), 4)
    (1.0, 0.0041)
    """
    x, y = curve[:, 0], curve[:, 1]
    by_x, by_y = np.argsort(x, kind="stable"), np.argsort(y, kind="stable")
    return 0.5 * (_trapezoid(x[by_x], y[by_x]) + _trapezoid(y[by_y], x[by_y]))


def frontier_integral(p_hist: np.ndarray, q_hist: np.ndarray, *, scaling: float = 2.0) -> float:
    """The frontier integral (Liu et al. 2021; lower: closer), as the reference computes it.

    >>> frontier_integral(np.array([0.5, 0.5]), np.array([0.5, 0.5]))
    0.0
    """
    total = 0.0
    for a, b in zip(p_hist.tolist(), q_hist.tolist(), strict=True):
        if a == 0 and b == 0:
            continue
        if a == 0 or b == 0:
            total += (a + b) / 4
        elif abs(a - b) > 1e-8:
            total += 0.25 * (a + b) - 0.5 * a * b * (math.log(a) - math.log(b)) / (a - b)
    return total * scaling


def _one_seed(
    p_counts: np.ndarray, q_counts: np.ndarray, seed: int, points: int, scaling: float
) -> MauveRun:
    p_hist, q_hist = p_counts / p_counts.sum(), q_counts / q_counts.sum()
    p_smooth = (p_counts + 0.5) / (p_counts + 0.5).sum()
    q_smooth = (q_counts + 0.5) / (q_counts + 0.5).sum()
    curve = divergence_curve(p_hist, q_hist, points=points, scaling=scaling)
    star = divergence_curve(p_smooth, q_smooth, points=points, scaling=scaling)
    return MauveRun(
        seed=seed,
        mauve=curve_area(curve),
        mauve_star=curve_area(star),
        frontier_integral=frontier_integral(p_hist, q_hist),
        frontier_integral_star=frontier_integral(p_smooth, q_smooth),
        p_hist=p_hist,
        q_hist=q_hist,
        curve=curve,
    )


def _check_features(name: str, features: Any) -> np.ndarray:
    array = np.asarray(features, dtype=np.float64)
    if array.ndim != 2 or array.shape[0] == 0:
        raise ValueError(f"{name} must be a non-empty 2-d array (texts x dimensions)")
    if not np.isfinite(array).all():
        raise ValueError(f"{name} holds NaN or infinite values")
    return array


def _seed_list(seeds: int | Sequence[int], seed: int) -> list[int]:
    if isinstance(seeds, int):
        if seeds < 1:
            raise ValueError(f"seeds must be >= 1; got {seeds}")
        return [seed + i for i in range(seeds)]
    chosen = [int(s) for s in seeds]
    if not chosen:
        raise ValueError("seeds must not be empty")
    return chosen


def mauve_features(
    p_features: Any,
    q_features: Any,
    *,
    seeds: int | Sequence[int] = 5,
    seed: int = 25,
    num_buckets: int | Literal["auto"] = "auto",
    explained_variance: float = 0.9,
    num_redo: int = 5,
    max_iter: int = 500,
    pca_max_data: int = -1,
    points: int = 25,
    scaling: float = 5.0,
    kmeans: KMeansBackend = "auto",
    confidence: float = 0.95,
) -> MauveResult:
    """MAUVE and MAUVE* of features ``p`` (a system's texts) against ``q`` (people's).

    Parameters
    ----------
    p_features, q_features : array, shape (n, d)
        One feature vector per text (same dimension for both).
    seeds : int or sequence of int
        The k-means seeds: a count (``seed``, ``seed + 1``, ...) or the seeds themselves.
    seed : int
        The first seed when ``seeds`` is a count (25 is the reference implementation's).
    num_buckets : int or "auto"
        k-means clusters (``"auto"``: a tenth of the smaller set, at least 2).
    explained_variance : float
        Share of the variance the PCA keeps before k-means (0 < v < 1).
    num_redo, max_iter : int
        k-means restarts (the best objective is kept) and iterations.
    pca_max_data : int
        Fit the PCA on this many random rows (-1: all).
    points : int
        Mixture weights on the divergence curve.
    scaling : float
        The constant ``c`` of the curve (5 in the paper).
    kmeans : {"auto", "faiss", "sklearn"}
        The k-means implementation (``auto``: faiss when installed).
    confidence : float
        Coverage of the across-seed intervals.

    Returns
    -------
    MauveResult

    Raises
    ------
    ValueError
        For empty, non-2-d or non-finite features, dimensions that differ, or bad settings.
    """
    from storyeval.base.stats import mean_interval

    p = _check_features("p_features", p_features)
    q = _check_features("q_features", q_features)
    if p.shape[1] != q.shape[1]:
        raise ValueError(f"p and q features differ in dimension: {p.shape[1]} vs {q.shape[1]}")
    if not 0 < explained_variance < 1:
        raise ValueError(f"explained_variance must be in (0, 1); got {explained_variance}")
    if points < 2 or scaling <= 0:
        raise ValueError("points must be >= 2 and scaling > 0")
    buckets = auto_buckets(len(p), len(q)) if num_buckets == "auto" else int(num_buckets)
    if buckets < 2 or buckets > len(p) + len(q):
        raise ValueError(f"num_buckets must be between 2 and the number of texts; got {buckets}")
    notes = []
    if min(len(p), len(q)) < MIN_TEXTS:
        notes.append(
            f"MAUVE on {len(p)} system texts and {len(q)} reference texts: below {MIN_TEXTS} a "
            "side its value varies strongly with the k-means seed (see the interval)"
        )
    backend = kmeans_backend(kmeans)
    runs, dims = [], 0
    for index, current in enumerate(_seed_list(seeds, seed)):
        p_counts, q_counts, kept = quantize(
            p,
            q,
            num_buckets=buckets,
            seed=current,
            explained_variance=explained_variance,
            num_redo=num_redo,
            max_iter=max_iter,
            pca_max_data=pca_max_data,
            kmeans=backend,
        )
        dims = kept if index == 0 else dims
        runs.append(_one_seed(p_counts, q_counts, current, points, scaling))
    for note in notes:
        warn(MauveWarning, note)
    m, m_sd, m_low, m_high = mean_interval([r.mauve for r in runs], confidence=confidence)
    s, s_sd, s_low, s_high = mean_interval([r.mauve_star for r in runs], confidence=confidence)
    return MauveResult(
        mauve=m,
        mauve_star=s,
        mauve_ci=(m_low, m_high),
        mauve_star_ci=(s_low, s_high),
        mauve_sd=m_sd,
        mauve_star_sd=s_sd,
        per_seed=tuple(runs),
        num_buckets=buckets,
        n_p=len(p),
        n_q=len(q),
        dimensions=dims,
        kmeans=backend,
        notes=tuple(notes),
    )


def length_note(p_lengths: Sequence[float], q_lengths: Sequence[float]) -> str:
    """A warning text when the median lengths differ by more than :data:`LENGTH_RATIO`
    (MAUVE then mostly measures length), else ``""``.

    >>> length_note([10, 12, 11], [30, 31, 29])
    'median lengths differ strongly (11 vs 30 words): MAUVE then mostly measures length; compare texts of similar length (e.g. truncate both sides to the same number of words)'
    >>> length_note([10, 12], [11, 13])
    ''
    """
    if len(p_lengths) == 0 or len(q_lengths) == 0:
        return ""
    a, b = float(np.median(p_lengths)), float(np.median(q_lengths))
    if min(a, b) <= 0 or max(a, b) / min(a, b) <= LENGTH_RATIO:
        return ""
    return (
        f"median lengths differ strongly ({a:g} vs {b:g} words): MAUVE then mostly measures "
        "length; compare texts of similar length (e.g. truncate both sides to the same number "
        "of words)"
    )
