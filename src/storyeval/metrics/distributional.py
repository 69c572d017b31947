"""Distribution-level metrics: MAUVE and MAUVE* of each system's stories against people's.

Corpus-level metrics (level ``"corpus"``): a story has no MAUVE of its own. Each story's
feature vector is its sufficient statistic; after every story is featurised, each system's
features are compared with the reference system's (option ``reference_system``, default
``human``) by :func:`storyeval.distribution.mauve_features`, over several k-means seeds.

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
from typing import Any

import numpy as np

from storyeval.metrics.context import resolve_layer
from storyeval.metrics.registry import (
    MetricBatch,
    MetricOption,
    MetricOutput,
    SystemStatistic,
    SystemValue,
    register_metric,
)

FEATURES = ("encoder", "causal-lm")

OPTIONS = [
    MetricOption(
        "reference_system", str, "human", "the system whose stories are the reference (people)"
    ),
    MetricOption("features", str, "encoder", "what gives each story's features", choices=FEATURES),
    MetricOption(
        "model", str, None, "encoder or causal LM: hub name or local directory (default: offline)"
    ),
    MetricOption("layer", int, -1, "encoder layer to mean-pool (negative counts from the top)"),
    MetricOption(
        "max_tokens",
        int,
        1024,
        "causal-lm features: tokens kept per story (the reference's 1024)",
        minimum=2,
    ),
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
    MetricOption(
        "kmeans",
        str,
        "auto",
        "k-means implementation (auto: faiss when installed)",
        choices=("auto", "faiss", "sklearn"),
    ),
    MetricOption("batch_tokens", int, 8192, "tokens per batch", minimum=64, in_signature=False),
]


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

    tokenizer, model = lm.tokenizer, lm.model
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
            out = model(input_ids=input_ids, attention_mask=mask, output_hidden_states=True)
            last = out.hidden_states[-1]
            for r, i in enumerate(chunk):
                features[i] = last[r, len(ids[i]) - 1].float().numpy()
            start = end
    return features, longer


def _with_lengths(features: np.ndarray, texts: Sequence[str]) -> np.ndarray:
    """Each story's statistics: its features, then its length in words (for the length
    warning), so MAUVE needs nothing but the statistics gathered after the map."""
    lengths = np.array([[len(text.split())] for text in texts], dtype=np.float64)
    return np.hstack([np.asarray(features, dtype=np.float64), lengths])


def _features(batch: MetricBatch, options: Mapping[str, Any]) -> MetricOutput:
    from storyeval.distribution import kmeans_backend

    texts = [s.story for s in batch.stories]
    backend = kmeans_backend(options["kmeans"])
    if options["features"] == "encoder":
        cache, layer = _encoder_layer(batch, options)
        stats = _with_lengths(
            np.stack([cache.sentence_embedding(text, layer) for text in texts]), texts
        )
        return MetricOutput(
            np.full(len(texts), np.nan),
            stats=stats,
            models={"model": cache.identity},
            fields={"layer": layer, "kmeans": backend},
            omit=("max_tokens",),
        )
    lm = batch.context.causal_lm(options["model"])
    features, longer = causal_lm_features(
        lm, texts, max_tokens=int(options["max_tokens"]), batch_tokens=int(options["batch_tokens"])
    )
    stats = _with_lengths(features, texts)
    notes = []
    if longer:
        notes.append(
            f"{longer} stories are longer than {options['max_tokens']} tokens: their features "
            "come from the first max_tokens tokens (mauve.max_tokens)"
        )
    return MetricOutput(
        np.full(len(texts), np.nan),
        stats=stats,
        models={"model": lm.identity},
        fields={"kmeans": backend},
        notes=notes,
        omit=("layer",),
    )


_MEMO: dict[str, Any] = {}


def _mauve(
    system_stats: np.ndarray, reference_stats: np.ndarray, options: Mapping[str, Any]
) -> Any:
    """The MAUVE result of two feature sets (memoised: mauve and mauve_star share it)."""
    from storyeval.distribution import mauve_features

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

        from storyeval.distribution import length_note

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


for _star in (False, True):
    register_metric(
        "mauve_star" if _star else "mauve",
        description=("MAUVE* (smoothed histograms)" if _star else "MAUVE")
        + " of each system's stories against the reference system's: the area under the "
        "divergence curve of their quantised feature distributions (1 = indistinguishable)",
        families=("mauve",),
        model="encoder",
        higher_is_better=True,
        value_range=(0.0, 1.0),
        level="corpus",
        options=OPTIONS,
        system_statistics=[_statistic(_star)],
        default=False,
        plan=_plan,
        backends=("transformers", "torch", "scikit-learn", "faiss-cpu"),
    )(_features)
