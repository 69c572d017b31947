"""A story's features for the preference head: encoder or causal-LM states, metric scores, length."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from storyeval.corpus import Story
from storyeval.learn.preference.config import PreferenceConfig

# --------------------------------------------------------------------------- features


def story_features(
    stories: Sequence[Story],
    config: PreferenceConfig,
    *,
    device: str = "cpu",
    precision: str = "float32",
    scoring: Any = None,
) -> tuple[np.ndarray, np.ndarray, str]:
    """Each story's features, its length covariate (log of 1 + words) and the feature
    model's identity. ``scoring`` (a ScoringContext) shares a scoring run's encoder cache,
    so texts other metrics encoded are not encoded again."""
    if scoring is not None:
        device, precision = scoring.device, scoring.precision
    encode, identity = feature_encoder(config, device=device, precision=precision, scoring=scoring)
    features = encode(_feature_texts(stories, config))
    if config.metric_features:
        columns, _ = metric_columns(
            stories, config, scoring=scoring, device=device, precision=precision
        )
        features = np.hstack([features, columns])
    return features, _lengths(stories), identity


def metric_columns(
    stories: Sequence[Story],
    config: PreferenceConfig,
    *,
    scoring: Any = None,
    device: str = "cpu",
    precision: str = "float32",
) -> tuple[np.ndarray, dict[str, str]]:
    """A column per metric of ``config.metric_features`` (see
    :func:`storyeval.learn.metric_features.metric_feature_columns`), and each metric's
    signature."""
    from storyeval.learn.metric_features import metric_feature_columns

    columns, signatures = metric_feature_columns(
        stories,
        config.metric_features,
        config.metric_options,
        scoring=scoring,
        device=device,
        precision=precision,
    )
    return columns, dict(zip(config.metric_features, signatures, strict=True))


def _lengths(stories: Sequence[Story]) -> np.ndarray:
    return np.log1p([len(s.story.split()) for s in stories])


def _feature_texts(stories: Sequence[Story], config: PreferenceConfig) -> list[str]:
    return [
        f"{s.prompt.strip()}\n\n{s.story.strip()}"
        if config.with_prompt and s.prompt.strip()
        else s.story
        for s in stories
    ]


def feature_encoder(
    config: PreferenceConfig,
    *,
    device: str = "cpu",
    precision: str = "float32",
    scoring: Any = None,
) -> tuple[Callable[[list[str]], np.ndarray], str]:
    """The function that gives texts their features (float64 rows), and the feature model's
    identity; the model is loaded, nothing is encoded yet."""
    if config.features == "none":

        def nothing(texts: list[str]) -> np.ndarray:
            return np.zeros((len(texts), 0))

        return nothing, "none"
    if config.features == "causal-lm":
        from storyeval.metrics.distributional import causal_lm_features
        from storyeval.models import load_causal_lm
        from storyeval.models.devices import place

        lm = place(load_causal_lm(config.model), device)

        def last_states(texts: list[str]) -> np.ndarray:
            return causal_lm_features(lm, texts)[0].astype(np.float64)

        return last_states, str(lm.identity)
    from storyeval.metrics.context import ScoringContext

    context = scoring or ScoringContext(device=device, precision=precision)
    cache = context.cache(config.model)
    return cache.text_embeddings, cache.identity
