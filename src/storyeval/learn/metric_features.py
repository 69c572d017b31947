"""Metric scores as features of a story reward model (``train preference --metric-features``).

A mean-pooled encoder embedding hardly moves when a sentence is repeated or the sentences are
shuffled (the judge audit of a reward model shows it), yet repetition is the commonest error of
generated stories. Metrics that measure such things directly (repeated n-grams, distinct
n-grams, perplexity, sentence-to-sentence similarity) can sit beside the embedding as extra
features, as NUBIA (Kane et al. 2020) combines metrics: the head learns how much each is
worth from people's judgments. Only metrics that
read the story alone (and, optionally, its prompt) qualify, so a model scores a story the same
way wherever it is used.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from storyeval.corpus import Story


def check_metric_features(names: Sequence[str], options: Sequence[tuple[str, str]]) -> None:
    """Refuse unknown metrics, metrics that need more than a story and its prompt or whose
    value of a story depends on the other stories scored with it (self-BLEU, Vendi, MAUVE's
    features), the preference metric itself, repeated names, and options of metrics that are
    not features.

    Raises
    ------
    ValueError
        With the reason, naming the metric.
    """
    from storyeval.metrics.function import metric_function

    if len(set(names)) != len(names):
        raise ValueError(f"metric features named twice: {', '.join(names)}")
    for key, _ in options:
        if key.split(".", 1)[0] not in names:
            raise ValueError(f"option {key}: {key.split('.', 1)[0]} is not a metric feature")
    for name in names:
        if name == "preference":
            raise ValueError("preference cannot be a feature of a preference model")
        try:
            described = metric_function(name).__metric__  # type: ignore[attr-defined]
        except KeyError as exc:  # a metric registered without a typed function
            raise ValueError(str(exc.args[0])) from None
        if _depends_on_others(name, options):
            raise ValueError(
                f"{name} scores a story against the others scored with it: a preference "
                "model must score each story alone"
            )
        needs = [
            k for k in described.inputs[1:] if k not in described.optional_inputs | {"prompts"}
        ]
        if needs:
            raise ValueError(
                f"{name} needs {', '.join(needs)} beside the story: a preference model's "
                "features must come from the story (and its prompt) alone"
            )


def _depends_on_others(name: str, options: Sequence[tuple[str, str]]) -> bool:
    """Whether the metric's value of a story depends on the other stories of the run."""
    from storyeval.metrics import get_metric
    from storyeval.metrics.block_work import corpus_wide

    spec = get_metric(name)
    settings = spec.defaults()
    known = spec.option_map
    for key, value in options:
        field = key.split(".", 1)[1]
        if key.split(".", 1)[0] == name and field in known:
            settings[field] = known[field].parse(value, where=key)
    return spec.level != "item" or corpus_wide(spec, settings)


def parse_metric_options(assignments: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """``["perplexity.model=DIR"]`` as ``(("perplexity.model", "DIR"),)``.

    >>> parse_metric_options(["repeated_ngram_rate.n=3"])
    (('repeated_ngram_rate.n', '3'),)
    """
    parsed = []
    for text in assignments:
        key, sep, value = text.partition("=")
        if not sep or "." not in key or not key.split(".", 1)[1]:
            raise ValueError(f"metric option {text!r}: write NAME.KEY=VALUE")
        parsed.append((key.strip(), value.strip()))
    return tuple(parsed)


def metric_feature_columns(
    stories: Sequence[Story],
    names: Sequence[str],
    options: Sequence[tuple[str, str]] = (),
    *,
    scoring: Any = None,
    device: str = "cpu",
    precision: str = "float32",
) -> tuple[np.ndarray, list[str]]:
    """Each story's value of each metric, shape ``(len(stories), len(names))`` (NaN where a
    metric is undefined for a story), and each metric's signature. ``scoring`` shares loaded
    models with a scoring run."""
    from storyeval.metrics.function import call_metric

    texts = [s.story for s in stories]
    prompts = [s.prompt for s in stories]
    columns = np.full((len(stories), len(names)), np.nan)
    signatures = []
    for k, name in enumerate(names):
        settings = _settings(name, options, scoring, device, precision)
        result = call_metric(name, texts, prompts=prompts, **settings)
        values = np.asarray(result.values, dtype=float)
        if values.shape != (len(stories),):
            raise ValueError(f"{name} gave {values.shape} values for {len(stories)} stories")
        columns[:, k] = values
        signatures.append(result.signature.render())
    return columns, signatures


def _settings(
    name: str,
    options: Sequence[tuple[str, str]],
    scoring: Any,
    device: str,
    precision: str,
) -> dict[str, Any]:
    """The metric's options, and where its model runs when it has one."""
    from storyeval.metrics.function import metric_function

    settings: dict[str, Any] = {
        key.split(".", 1)[1]: value for key, value in options if key.split(".", 1)[0] == name
    }
    parameters = inspect.signature(metric_function(name)).parameters
    if "scoring" in parameters and scoring is not None:
        settings["scoring"] = scoring
    elif "device" in parameters:
        settings.setdefault("device", device)
        settings.setdefault("precision", precision)
    return settings


def describe_metric_features(names: Sequence[str], options: Mapping[str, str]) -> str:
    """The features as the signature writes them: ``name`` or ``name(key=value,...)``, a model
    given as a local file or directory written by its content (``DIR@HASH``, as encoders are
    signed), never by its path, so that two machines holding the same model sign alike.

    >>> describe_metric_features(["distinct2", "perplexity"], {"perplexity.model": "lm"})
    'distinct2,perplexity(model=lm)'
    """
    from storyeval.metrics.function import metric_function

    shown = []
    for name in names:
        models = metric_function(name).__metric__.model_options  # type: ignore[attr-defined]
        mine = []
        for key, value in options.items():
            if key.startswith(name + "."):
                field = key.split(".", 1)[1]
                mine.append(f"{field}={_model_value(value) if field in models else value}")
        shown.append(f"{name}({','.join(mine)})" if mine else name)
    return ",".join(shown)


def _model_value(value: str) -> str:
    """A model option's value as signed: a local path by its content, a hub name as it is."""
    from storyeval.models.loading import content_identity

    return content_identity(value) if Path(value).exists() else value
