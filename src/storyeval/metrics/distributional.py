"""Distribution-level metrics: MAUVE and MAUVE* of each system's stories against people's.

Corpus-level metrics (level ``"corpus"``): a story has no MAUVE of its own. Each story's
feature vector is its sufficient statistic; after every story is featurised, each system's
features are compared with the reference system's (option ``reference_system``, default
``human``) by :func:`storyeval.metrics.divergence.mauve_features`, over several k-means seeds.

Features (option ``features``):

- ``encoder`` (default): the mean of the encoder's token states at a layer (the last by
  default), read from the run's shared encoder cache (one encoder pass serves BERTScore and
  MAUVE alike); long stories are encoded in overlapping windows, never cut;
- ``causal-lm``: the causal LM's final hidden state at the story's last token (what MAUVE's
  authors do with GPT-2 large); a story longer than ``max_tokens`` keeps its first
  ``max_tokens`` tokens (as the reference implementation does), counted in a note and
  recorded in the signature.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal

import numpy as np

from storyeval.metrics.cards import MetricCard
from storyeval.metrics.context import ScoringContext, resolve_layer
from storyeval.metrics.function import INJECTED, Opt, Scores, Texts, metric
from storyeval.metrics.registry import (
    MetricBatch,
    MetricOption,
    SystemStatistic,
    SystemValue,
    get_metric,
)

if TYPE_CHECKING:  # pragma: no cover
    from storyeval.metrics.divergence import MauveResult

FEATURES = ("encoder", "causal-lm")


@dataclass(frozen=True)
class MauveFeatures(Scores):
    """Each text's features for MAUVE (``stats``: the feature vector, then the length in
    words); a text has no MAUVE of its own (``values`` are NaN)."""

    @property
    def features(self) -> np.ndarray:
        """The feature vectors, shape ``(n, dimensions)``."""
        assert self.stats is not None
        return self.stats[:, :-1]


def _encoder_layer(batch: MetricBatch, options: Mapping[str, Any]) -> tuple[Any, int]:
    cache = batch.context.cache(options["model"])
    return cache, resolve_layer(cache.encoder.model, int(options["layer"]))


def _plan(
    batch: MetricBatch, options: Mapping[str, Any]
) -> Iterable[tuple[str | None, list[str], list[int]]]:
    if options["features"] != "encoder":
        return
    _, layer = _encoder_layer(batch, options)
    yield options["model"], [s.story for s in batch.stories], [layer]


def causal_lm_features(
    lm: Any, texts: Sequence[str], *, max_tokens: int = 1024, batch_tokens: int = 8192
) -> tuple[np.ndarray, int]:
    """The final hidden state at each text's last token (at most ``max_tokens`` tokens kept),
    shape ``(n, hidden)``, and the number of texts that were longer.

    >>> from storyeval.models import load_causal_lm
    >>> features, cut = causal_lm_features(load_causal_lm(), ["It rained.", "The sun came out."])
    >>> features.shape[0], cut
    (2, 0)
    """
    import torch

    from storyeval.models.devices import model_device

    tokenizer, model = lm.tokenizer, lm.model
    device = model_device(lm)
    bos = tokenizer.bos_token_id
    ids = []
    longer = 0
    for text in texts:
        row = tokenizer(text, add_special_tokens=False)["input_ids"]
        row = ([bos] if bos is not None else []) + list(row)
        if len(row) > max_tokens:
            longer += 1
            row = row[:max_tokens]
        ids.append(row)
    hidden = int(model.config.hidden_size)
    features = np.zeros((len(texts), hidden), dtype=np.float32)
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    start = 0
    with torch.inference_mode():
        while start < len(order):
            width = len(ids[order[start]])
            end = start + 1
            while end < len(order) and (end - start + 1) * len(ids[order[end]]) <= batch_tokens:
                end += 1
            chunk = order[start:end]
            width = max(len(ids[i]) for i in chunk)
            input_ids = torch.full((len(chunk), width), int(pad), dtype=torch.long)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for r, i in enumerate(chunk):
                input_ids[r, : len(ids[i])] = torch.tensor(ids[i])
                mask[r, : len(ids[i])] = 1
            out = model(
                input_ids=input_ids.to(device),
                attention_mask=mask.to(device),
                output_hidden_states=True,
            )
            last = out.hidden_states[-1]
            for r, i in enumerate(chunk):
                features[i] = last[r, len(ids[i]) - 1].float().cpu().numpy()
            start = end
    return features, longer


def _with_lengths(features: np.ndarray, texts: Sequence[str]) -> np.ndarray:
    """Each story's statistics: its features, then its length in words (for the length
    warning), so MAUVE needs nothing but the statistics gathered after the map."""
    lengths = np.array([[len(text.split())] for text in texts], dtype=np.float64)
    return np.hstack([np.asarray(features, dtype=np.float64), lengths])


def _feature_scores(
    texts: Sequence[str], options: Mapping[str, Any], scoring: ScoringContext
) -> MauveFeatures:
    """The MAUVE features of ``texts`` (see the module docstring)."""
    from storyeval.metrics.divergence import kmeans_backend

    backend = kmeans_backend(options["kmeans"])
    if options["features"] == "encoder":
        cache = scoring.cache(options["model"])
        layer = resolve_layer(cache.encoder.model, int(options["layer"]))
        cache.request(texts, [layer])
        cache.run()
        stats = _with_lengths(
            np.stack([cache.sentence_embedding(text, layer) for text in texts]), texts
        )
        return MauveFeatures(
            np.full(len(texts), np.nan),
            stats=stats,
            models={"model": cache.identity},
            fields={"layer": layer, "kmeans": backend},
            omit=("max_tokens",),
        )
    lm = scoring.causal_lm(options["model"])
    features, longer = causal_lm_features(
        lm, texts, max_tokens=int(options["max_tokens"]), batch_tokens=int(options["batch_tokens"])
    )
    notes: tuple[str, ...] = ()
    if longer:
        notes = (
            f"{longer} stories are longer than {options['max_tokens']} tokens: their features "
            "come from the first max_tokens tokens (mauve.max_tokens)",
        )
    return MauveFeatures(
        np.full(len(texts), np.nan),
        stats=_with_lengths(features, texts),
        models={"model": lm.identity},
        fields={"kmeans": backend},
        notes=notes,
        omit=("layer",),
    )


def _mauve_text_features(
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
    max_tokens: Annotated[
        int, Opt("causal-lm features: tokens kept per story (the reference's 1024)", minimum=2)
    ] = 1024,
    kmeans: Annotated[
        Literal["auto", "faiss", "sklearn"],
        Opt("k-means implementation (auto: faiss when installed)"),
    ] = "auto",
    batch_tokens: Annotated[int, Opt("tokens per batch", minimum=64, in_signature=False)] = 8192,
    scoring: ScoringContext = INJECTED,
    device: str | None = None,
    precision: str | None = None,
    progress: bool = False,
) -> MauveFeatures:
    """The features MAUVE compares, per text (the registered metrics ``mauve`` and
    ``mauve_star`` are computed per system from them, with the options of
    :data:`MAUVE_OPTIONS`; :func:`mauve` compares two sets)."""
    options = dict(features=features, model=model, layer=layer, max_tokens=max_tokens)
    options.update(kmeans=kmeans, batch_tokens=batch_tokens)
    return _feature_scores(list(texts), options, scoring)


#: Whose stories the corpus-level metrics compare each system with
REFERENCE_SYSTEM = MetricOption(
    "reference_system", str, "human", "the system whose stories are the reference (people)"
)
#: The options of MAUVE's per-system statistic (the registry's; the per-text feature function
#: takes none of them, so setting one there is refused rather than ignored)
MAUVE_OPTIONS = (
    REFERENCE_SYSTEM,
    MetricOption("seeds", int, 5, "k-means seeds (mean and t interval across them)", minimum=1),
    MetricOption("seed", int, 25, "the first k-means seed (25: the reference's)"),
    MetricOption(
        "num_buckets", int, None, "k-means clusters (auto: a tenth of the smaller side)", minimum=2
    ),
    MetricOption(
        "explained_variance", float, 0.9, "variance kept by the PCA", minimum=0.01, maximum=0.99
    ),
    MetricOption("kmeans_redo", int, 5, "k-means restarts", minimum=1),
    MetricOption("kmeans_iter", int, 500, "k-means iterations", minimum=1),
    MetricOption("scaling", float, 5.0, "the divergence curve's constant c", minimum=0.001),
    MetricOption("points", int, 25, "mixture weights on the divergence curve", minimum=2),
)

_MEMO: dict[str, Any] = {}


def _mauve(
    system_stats: np.ndarray, reference_stats: np.ndarray, options: Mapping[str, Any]
) -> Any:
    """The MAUVE result of two feature sets (memoised: mauve and mauve_star share it)."""
    from storyeval.metrics.divergence import mauve_features

    digest = hashlib.sha1()
    for array in (system_stats, reference_stats):
        digest.update(np.ascontiguousarray(array).tobytes())
    digest.update(repr(sorted((k, v) for k, v in options.items() if k != "batch_tokens")).encode())
    key = digest.hexdigest()
    if key not in _MEMO:
        if len(_MEMO) > 64:
            _MEMO.clear()
        _MEMO[key] = mauve_features(
            system_stats,
            reference_stats,
            seeds=int(options["seeds"]),
            seed=int(options["seed"]),
            num_buckets=options["num_buckets"] or "auto",
            explained_variance=float(options["explained_variance"]),
            num_redo=int(options["kmeans_redo"]),
            max_iter=int(options["kmeans_iter"]),
            points=int(options["points"]),
            scaling=float(options["scaling"]),
            kmeans=options["kmeans"],
        )
    return _MEMO[key]


def _statistic(star: bool) -> SystemStatistic:
    name = "mauve_star" if star else "mauve"

    def compute(
        system_stats: np.ndarray,
        reference_stats: np.ndarray,
        system_stories: Sequence[Any],
        reference_stories: Sequence[Any],
        options: Mapping[str, Any],
    ) -> SystemValue:
        import warnings

        from storyeval.metrics.divergence import length_note

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the notes below carry them
            result = _mauve(system_stats[:, :-1], reference_stats[:, :-1], options)
        notes = list(result.notes)
        lengths = length_note(system_stats[:, -1].tolist(), reference_stats[:, -1].tolist())
        if lengths:
            notes.append(lengths)
        low, high = result.mauve_star_ci if star else result.mauve_ci
        seeds = len(result.per_seed)
        return SystemValue(
            estimate=result.mauve_star if star else result.mauve,
            ci_low=low,
            ci_high=high,
            sd=result.mauve_star_sd if star else result.mauve_sd,
            n=len(system_stories),
            method=f"mean over {seeds} k-means seeds, Student t interval" if seeds > 1 else "none",
            fields={
                "n_reference": len(reference_stories),
                "buckets": result.num_buckets,
                "kmeans": result.kmeans,
            },
            notes=tuple(notes),
            details=result,
        )

    return SystemStatistic(name, compute, f"{name} of the system's stories against the reference")


_MAUVE_CARD = MetricCard(
    measures="MAUVE (Pillutla et al. 2021): how close the distribution of a system's "
    "stories is to the distribution of people's stories (`reference_system`, default "
    "`human`). Each story becomes a feature vector (default: the offline encoder's "
    "mean-pooled last layer; `features=causal-lm`: the causal LM's last-token state, as "
    "the authors do with GPT-2 large); both sets are L2-normalised, reduced by PCA (90% "
    "of the variance) and quantised together by k-means into n/10 clusters; MAUVE is the "
    "area under the divergence curve of the two cluster histograms. k-means depends on "
    "its seed, so storyeval runs `seeds` quantisations and reports their mean with a "
    "Student t interval across seeds. Implemented in storyeval (MIT) and tested equal to "
    "the authors' `mauve-text` on the same features and seed.",
    read="0-1, higher = closer to people's stories (1: indistinguishable in feature "
    "space). A corpus-level metric: one value per system, no value per story (`storyeval "
    "score` writes no per-story record for it; the per-system table has it). `storyeval "
    "mauve STORIES -o DIR` writes the table, every seed's divergence curve and a plot; "
    "`storyeval report --mauve DIR` adds them to a report.",
    papers="Pillutla et al. (2021) compute MAUVE on web text with GPT-2 large features "
    "and 5,000 texts a side, where nucleus sampling scores far above greedy decoding and "
    "larger models above smaller ones. Values depend on the feature model, so they are "
    "not comparable with the offline encoder's.",
    limits="Needs many texts: below 100 a side (a warning says so) the histogram has "
    "fewer than 10 clusters and the value moves with the seed (see the interval); the "
    "authors use 5,000. When the two sides' lengths differ strongly (median ratio above "
    "1.5, warned), MAUVE mostly measures length: truncate both to similar lengths. "
    "Values are comparable only under the same features, model, buckets and seeds (all in "
    "the signature). On short texts the features carry little signal (mauve issue #9).",
    refs="Pillutla et al. (2021), MAUVE (NeurIPS); Pillutla et al. (2023), MAUVE "
    "scores for generative models (JMLR); Liu et al. (2021), divergence frontiers.",
)
_MAUVE_STAR_CARD = MetricCard(
    measures="MAUVE* (Pillutla et al. 2023): MAUVE computed from cluster histograms "
    "with Krichevsky-Trofimov smoothing (half a count added to every cluster), which "
    "lowers its bias on small samples. Same features, quantisation and seeds as `mauve` "
    "(the two share one computation).",
    read="0-1, higher = closer to people's stories; usually a little above MAUVE on "
    "small samples. One value per system (corpus level).",
    papers="Pillutla et al. (2023) recommend the smoothed estimate for small samples; "
    "no story-generation values are reported.",
    limits="As for `mauve`: many texts needed, lengths matter, comparable only under the "
    "same signature.",
    refs="Pillutla et al. (2023), MAUVE scores for generative models (JMLR).",
)


def _mauve_metric(star: bool) -> dict[str, Any]:
    return {
        "description": ("MAUVE* (smoothed histograms)" if star else "MAUVE")
        + " of each system's stories against the reference system's: the area under the "
        "divergence curve of their quantised feature distributions (1 = indistinguishable)",
        "families": ("mauve",),
        "model": "encoder",
        "value_range": (0.0, 1.0),
        "level": "corpus",
        "system_statistics": [_statistic(star)],
        "default": False,
        "plan": _plan,
        "backends": ("transformers", "torch", "scikit-learn", "faiss-cpu"),
        "card": _MAUVE_STAR_CARD if star else _MAUVE_CARD,
        "extra_options": MAUVE_OPTIONS,
    }


mauve_features = metric("mauve", **_mauve_metric(False))(_mauve_text_features)
metric("mauve_star", **_mauve_metric(True))(_mauve_text_features)


def mauve(
    texts: Texts,
    reference_texts: Texts,
    *,
    model: Any = None,
    features: Literal["encoder", "causal-lm"] = "encoder",
    seeds: int = 5,
    seed: int = 25,
    num_buckets: int | None = None,
    device: str | None = None,
    precision: str | None = None,
    scoring: ScoringContext = INJECTED,
    **options: Any,
) -> MauveResult:
    """MAUVE and MAUVE* (Pillutla et al. 2021) of ``texts`` against ``reference_texts``
    (people's), over several k-means seeds, from the features ``storyeval score --metrics
    mauve`` uses; the result's ``signature`` names them.

    Parameters
    ----------
    texts : sequence of str
        A system's texts (``p``).
    reference_texts : sequence of str
        People's texts (``q``).
    model : str, loaded model or None
        The encoder (``features="encoder"``) or causal LM (``"causal-lm"``); None: offline.
    features : {"encoder", "causal-lm"}
        Mean-pooled encoder states, or the causal LM's last-token state (as MAUVE's authors).
    seeds, seed : int
        k-means seeds: ``seed``, ``seed + 1``, ... (mean and t interval across them).
    num_buckets : int, optional
        k-means clusters (default: a tenth of the smaller side).
    device, precision, scoring
        Where the feature model runs (or a context to share).
    **options
        Further options of the ``mauve`` metric (``explained_variance``, ``kmeans``, ...).

    Examples
    --------
    >>> people = [f"The {w} walked home after the storm and made tea." for w in ("girl", "man", "dog", "cat", "boy", "woman")]
    >>> system = [f"Buy {w} now at the best price in town!" for w in ("shoes", "hats", "cars", "bikes", "tea", "maps")]
    >>> result = mauve(system, people, seeds=2, num_buckets=2, kmeans="sklearn")
    >>> bool(result.mauve < 0.5), len(result.per_seed), result.signature.name
    (True, 2, 'mauve')
    """
    import warnings
    from dataclasses import replace as with_field

    system, people = list(texts), list(reference_texts)
    if not system or not people:
        raise ValueError("mauve: both texts and reference_texts must be non-empty")
    statistic = {option.name for option in MAUVE_OPTIONS}
    settings: dict[str, Any] = {"seeds": seeds, "seed": seed, "num_buckets": num_buckets}
    settings.update({k: v for k, v in options.items() if k in statistic})
    both = mauve_features(
        [*system, *people],
        features=features,
        model=model,
        device=device,
        precision=precision,
        scoring=scoring,
        **{k: v for k, v in options.items() if k not in statistic},
    )
    spec = get_metric("mauve")
    parsed = {o.name: o.parse(settings[o.name]) for o in spec.options if o.name in settings}
    resolved = {**spec.defaults(), **dict(both.fields), **parsed, "features": features}
    stats = both.features
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        result = _mauve(stats[: len(system)], stats[len(system) :], resolved)
    shown = {k: (v if v is not None else "auto") for k, v in parsed.items() if k in statistic}
    signature = both.signature.with_fields(**shown, n_p=len(system), n_q=len(people))
    return with_field(result, signature=signature)  # type: ignore[no-any-return]
