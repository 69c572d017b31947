"""Precision and recall for generated text: quality and diversity as two numbers.

Le Bronnec et al. (2024) carry the k-nearest-neighbour support estimates of image generation
(Kynkäänniemi et al. 2019) to text: each story is a point in an embedding space; the
people's stories' support is the union of balls reaching each one's k-th nearest neighbour
among them, and likewise for a system's. **Precision** is the share of the system's stories
inside people's support (are they like some human story: quality); **recall** the share of
people's stories inside the system's support (does the system cover what people write:
diversity). **Density** and **coverage** (Naeem et al. 2020) are the variants robust to
outliers. Computed by chunks (memory linear in the number of stories), equal to the ``prdc``
package's (a test checks it).

Both sets are subsampled to the same size (``sample``, default the smaller set, at most 5,000
stories: the supports are exact k-nearest-neighbour balls, quadratic in the subsample) over
``seeds`` seeds, as the estimates depend on the set sizes; the mean and a t interval across
seeds are reported, as MAUVE's.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import numpy as np

from storyeval.base.signature import Signature
from storyeval.metrics.cards import MetricCard
from storyeval.metrics.context import ScoringContext
from storyeval.metrics.distributional import (
    REFERENCE_SYSTEM,
    MauveFeatures,
    _feature_scores,
    _plan,
)
from storyeval.metrics.function import INJECTED, Opt, Texts, metric
from storyeval.metrics.registry import MetricOption, SystemStatistic, SystemValue

STATISTICS = ("precision", "recall", "density", "coverage")
#: The default subsample size a side: exact k-nearest-neighbour supports cost the square of it,
#: so without a cap two sets of 100,000 stories take about 18 minutes on 2 cores; with it the
#: cost stops growing (the encoder pass, linear, dominates). ``sample`` sets any size.
DEFAULT_MAX_SAMPLE = 5000
_CHUNK = 1024


def _distances(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Euclidean distances between the rows of ``x`` and ``y`` (float64)."""
    squared = (x * x).sum(1)[:, None] + (y * y).sum(1)[None, :] - 2.0 * (x @ y.T)
    return np.asarray(np.sqrt(np.maximum(squared, 0.0)))


def knn_radii(features: np.ndarray, k: int) -> np.ndarray:
    """Each point's distance to its k-th nearest neighbour among the others (chunked)."""
    radii = np.empty(features.shape[0])
    for start in range(0, features.shape[0], _CHUNK):
        block = _distances(features[start : start + _CHUNK], features)
        radii[start : start + _CHUNK] = np.partition(block, k, axis=1)[:, k]  # 0: itself
    return radii


def prdc(reference: np.ndarray, system: np.ndarray, *, k: int = 5) -> dict[str, float]:
    """Precision, recall, density and coverage of ``system`` against ``reference`` (rows are
    feature vectors), with k nearest neighbours; as ``prdc.compute_prdc(reference, system, k)``.

    >>> rng = np.random.default_rng(0)
    >>> people = rng.normal(size=(200, 2))
    >>> one_mode = rng.normal(size=(200, 2)) * 0.2  # good but alike stories
    >>> r = prdc(people, one_mode, k=5)
    >>> r["precision"] > 0.9 and r["recall"] < 0.5
    True
    """
    reference = np.asarray(reference, dtype=np.float64)
    system = np.asarray(system, dtype=np.float64)
    if min(len(reference), len(system)) <= k:
        raise ValueError(f"precision and recall need more than k={k} texts a side")
    reference_radii = knn_radii(reference, k)
    system_radii = knn_radii(system, k)
    inside_reference = np.zeros(len(system), dtype=bool)  # system story in people's support
    neighbours = np.zeros(len(system))  # how many people's balls hold it
    covered = np.zeros(len(reference), dtype=bool)  # people's story in the system's support
    nearest = np.full(len(reference), np.inf)
    for start in range(0, len(reference), _CHUNK):
        block = _distances(reference[start : start + _CHUNK], system)
        radii = reference_radii[start : start + _CHUNK, None]
        inside = block < radii
        inside_reference |= inside.any(axis=0)
        neighbours += inside.sum(axis=0)
        covered[start : start + _CHUNK] = (block < system_radii[None, :]).any(axis=1)
        nearest[start : start + _CHUNK] = block.min(axis=1)
    return {
        "precision": float(inside_reference.mean()),
        "recall": float(covered.mean()),
        "density": float(neighbours.mean() / k),
        "coverage": float((nearest < reference_radii).mean()),
    }


@dataclass(frozen=True)
class PrecisionRecall:
    """:func:`precision_recall` over seeds: per statistic (``precision``, ``recall``,
    ``density``, ``coverage``) the mean, sd and t interval; a ``signature`` when computed from
    texts (:func:`text_precision_recall`)."""

    per_seed: dict[str, list[float]]
    sample: int
    k: int
    signature: Signature | None = None

    def estimate(self, statistic: str) -> float:
        """The mean over seeds."""
        return float(np.mean(self.per_seed[statistic]))

    def spread(self, statistic: str) -> tuple[float, float, float]:
        """``(sd, low, high)``: the sd over seeds and a 95% t interval of the mean."""
        from scipy import stats

        values = np.asarray(self.per_seed[statistic])
        if values.size < 2 or values.std() == 0:
            mean = float(values.mean())
            return 0.0, mean, mean
        sd = float(values.std(ddof=1))
        half = float(stats.t.ppf(0.975, values.size - 1)) * sd / np.sqrt(values.size)
        return sd, float(values.mean() - half), float(values.mean() + half)


def precision_recall(
    reference: np.ndarray,
    system: np.ndarray,
    *,
    k: int = 5,
    sample: int | None = None,
    seeds: int = 5,
    seed: int = 0,
) -> PrecisionRecall:
    """:func:`prdc` on ``seeds`` subsamples of ``sample`` texts a side (default: the smaller
    set's size, at most :data:`DEFAULT_MAX_SAMPLE`), seeded ``seed``, ``seed + 1``, ..."""
    smaller = min(len(reference), len(system))
    size = min(smaller, DEFAULT_MAX_SAMPLE) if sample is None else min(smaller, sample)
    per_seed: dict[str, list[float]] = {name: [] for name in STATISTICS}
    for offset in range(seeds):
        rng = np.random.default_rng(seed + offset)
        people = reference[np.sort(rng.choice(len(reference), size, replace=False))]
        texts = system[np.sort(rng.choice(len(system), size, replace=False))]
        for name, value in prdc(people, texts, k=k).items():
            per_seed[name].append(value)
    return PrecisionRecall(per_seed, size, k)


_MEMO: dict[str, PrecisionRecall] = {}


def _shared(
    system: np.ndarray, reference: np.ndarray, options: Mapping[str, Any]
) -> PrecisionRecall:
    """One computation for the four statistics of a system (memoised)."""
    digest = hashlib.sha1()
    for array in (system, reference):
        digest.update(np.ascontiguousarray(array).tobytes())
    settings = (options["k"], options["sample"], options["seeds"], options["seed"])
    digest.update(repr(settings).encode())
    key = digest.hexdigest()
    if key not in _MEMO:
        if len(_MEMO) > 64:
            _MEMO.clear()
        _MEMO[key] = precision_recall(
            reference,
            system,
            k=int(options["k"]),
            sample=options["sample"],
            seeds=int(options["seeds"]),
            seed=int(options["seed"]),
        )
    return _MEMO[key]


def _statistic(name: str) -> SystemStatistic:
    def compute(
        system_stats: np.ndarray,
        reference_stats: np.ndarray,
        system_stories: Sequence[Any],
        reference_stories: Sequence[Any],
        options: Mapping[str, Any],
    ) -> SystemValue:
        k = int(options["k"])
        if min(len(system_stories), len(reference_stories)) <= k:
            nan = float("nan")
            why = f"text_{name}: needs more than k={k} stories a side (precision_recall.k)"
            return SystemValue(nan, nan, nan, nan, len(system_stories), "none", notes=(why,))
        result = _shared(system_stats[:, :-1], reference_stats[:, :-1], options)
        sd, low, high = result.spread(name)
        seeds = len(result.per_seed[name])
        return SystemValue(
            estimate=result.estimate(name),
            ci_low=low,
            ci_high=high,
            sd=sd,
            n=len(system_stories),
            method=f"mean over {seeds} subsamples of {result.sample} a side, Student t interval"
            if seeds > 1
            else "none",
            fields={"n_reference": len(reference_stories), "sample": result.sample},
        )

    return SystemStatistic(f"text_{name}", compute, f"{name} of the system against people")


def _features(
    texts: Texts,
    *,
    features: Annotated[
        Literal["encoder", "causal-lm"], Opt("what gives each story's features")
    ] = "encoder",
    model: Annotated[
        str | None,
        Opt("encoder or causal LM: hub name or local directory (default: offline)", model=True),
    ] = None,
    layer: Annotated[int, Opt("encoder layer to mean-pool (negative counts from the top)")] = -1,
    max_tokens: Annotated[int, Opt("causal-lm features: tokens kept per story", minimum=2)] = 1024,
    batch_tokens: Annotated[int, Opt("tokens per batch", minimum=64, in_signature=False)] = 8192,
    scoring: ScoringContext = INJECTED,
    device: str | None = None,
    precision: str | None = None,
    progress: bool = False,
) -> MauveFeatures:
    """Each story's features (the corpus-level statistics compare a system's with people's)."""
    from dataclasses import replace

    options = dict(features=features, model=model, layer=layer, max_tokens=max_tokens)
    options.update(kmeans="sklearn", batch_tokens=batch_tokens)
    result = _feature_scores(list(texts), options, scoring)
    return replace(result, fields={k: v for k, v in result.fields.items() if k != "kmeans"})


_LIMITS = (
    "Needs a hundred or more stories a side: with few, every ball is large and both numbers "
    "approach 1. With equal sides of at most 5,000 and no `sample`, every seed takes every "
    "story and the interval is a point: set `sample` below the smaller side to see the "
    "sampling variance. Larger sides are subsampled to 5,000 by default (exact neighbours "
    "cost the square of the subsample; `sample` sets more). "
    "Depends on the embedding (in the signature), on k and on the sample size; "
    "compare systems under one signature. Outliers inflate the supports (density and coverage "
    "are the robust variants)."
)


def _card(name: str) -> MetricCard:
    reading = {
        "precision": "0-1, higher = more of the system's stories look like some human story "
        "(quality, fidelity).",
        "recall": "0-1, higher = the system covers more of what people write (diversity).",
    }[name]
    return MetricCard(
        measures=f"k-nearest-neighbour {name} (Kynkäänniemi et al. 2019) of a system's stories "
        "against people's (`reference_system`) in an embedding space (the offline encoder's "
        "mean-pooled last layer by default, as MAUVE's features): precision is the share of "
        "the system's stories within the k-NN balls of people's, recall the share of people's "
        "within the system's. Subsampled to equal sizes over `seeds` seeds (mean, t interval). "
        "`storyeval.metrics.precision_recall.precision_recall` also gives density and "
        "coverage (Naeem et al. 2020).",
        read=reading + " One value per system (corpus level). Read the two together: "
        "instruction-tuned models typically gain precision and lose recall.",
        papers="Le Bronnec et al. (2024) show that precision and recall separate quality from "
        "diversity where one-number distribution metrics (MAUVE) mix them: instruction tuning "
        "raises precision and lowers recall of LLM text.",
        limits=_LIMITS,
        refs="Le Bronnec et al. (2024), Exploring precision and recall to assess the quality "
        "and diversity of LLMs; Kynkäänniemi et al. (2019); Naeem et al. (2020).",
    )


#: The options of the per-system statistic (the per-text feature function takes none)
PR_OPTIONS = (
    REFERENCE_SYSTEM,
    MetricOption("k", int, 5, "nearest neighbours of the support estimate", minimum=1),
    MetricOption(
        "sample",
        int,
        None,
        "stories a side per subsample (default: the smaller side, at most 5,000)",
        minimum=2,
    ),
    MetricOption("seeds", int, 5, "subsamples (mean and t interval across them)", minimum=1),
    MetricOption("seed", int, 0, "the first subsample's seed"),
)


def _pr_metric(name: str) -> dict[str, Any]:
    return {
        "description": f"k-NN {name} of each system's stories against the reference "
        "system's in an embedding space ("
        + ("quality" if name == "precision" else "diversity")
        + ")",
        "families": ("precision_recall",),
        "model": "encoder",
        "value_range": (0.0, 1.0),
        "level": "corpus",
        "system_statistics": [_statistic(name)],
        "default": False,
        "plan": _plan,
        "backends": ("transformers", "torch"),
        "card": _card(name),
        "extra_options": PR_OPTIONS,
    }


text_precision_features = metric("text_precision", **_pr_metric("precision"))(_features)
metric("text_recall", **_pr_metric("recall"))(_features)


def text_precision_recall(
    texts: Texts,
    reference_texts: Texts,
    *,
    k: int = 5,
    sample: int | None = None,
    seeds: int = 5,
    seed: int = 0,
    model: Any = None,
    features: Literal["encoder", "causal-lm"] = "encoder",
    device: str | None = None,
    precision: str | None = None,
    scoring: ScoringContext = INJECTED,
) -> PrecisionRecall:
    """Precision, recall, density and coverage of ``texts`` (a system's) against
    ``reference_texts`` (people's), from the features ``storyeval score --metrics
    text_precision`` uses; the result's ``signature`` names them.

    >>> people = [f"The {w} walked home after the storm and made tea." for w in "abcdefgh"]
    >>> system = [f"Buy {w} now at the best price in town!" for w in "abcdefgh"]
    >>> result = text_precision_recall(system, people, k=2, seeds=1)
    >>> result.estimate("precision"), result.signature.name
    (0.0, 'text_precision_recall')
    """
    system, people = list(texts), list(reference_texts)
    both = text_precision_features(
        [*system, *people],
        model=model,
        features=features,
        device=device,
        precision=precision,
        scoring=scoring,
    )
    stats = both.features
    result = precision_recall(
        stats[len(system) :], stats[: len(system)], k=k, sample=sample, seeds=seeds, seed=seed
    )
    fields = {**both.signature.fields, "k": k, "sample": result.sample, "seeds": seeds}
    fields.update(seed=seed, n_p=len(system), n_q=len(people))
    fields.pop("reference_system", None)
    signature = Signature("text_precision_recall", fields, both.signature.version)
    return PrecisionRecall(result.per_seed, result.sample, k, signature)
