"""Every metric as a plain function: data positional, options keyword-only, a named result.

These are the functions the metrics are written as (see :mod:`storyeval.metrics.function`):
``storyeval score``, the server and the Dask engine run the same code, so a number computed
in a notebook equals the number in a score file, and its ``signature`` says so. Each takes
its model options as names (a hub name or a local directory; ``None`` is the offline
default) or as objects already loaded (:func:`storyeval.models.load_encoder`,
:func:`storyeval.models.wrap_model`), and ``device``/``precision`` where a model runs; pass
``scoring=ScoringContext(...)`` to several calls to share loaded models and encoded texts.

Examples
--------
>>> from storyeval import functional as F
>>> result = F.bleu(["the cat sat on the mat"], ["the cat sat on a mat"])
>>> round(result.corpus, 2), result.signature.fields["tokenize"], result.counts.tolist()
(53.73, '13a', [[5.0, 3.0, 2.0, 1.0]])
>>> F.distinct2(["a b a b", "a b c d"]).values.tolist()
[0.6666666666666666, 1.0]
>>> sorted(F.METRICS) == sorted(__import__("storyeval.metrics", fromlist=["x"]).available_metrics())
True
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

from storyeval.base.validation import check_choice
from storyeval.learn.metrics import LearnedScores, nsp_prev, nsp_prompt, nubia, preference, union
from storyeval.metrics.coherence import (
    CoherenceScores,
    bertscore_prev,
    bertscore_prompt,
    embedding_coherence,
)
from storyeval.metrics.context import ScoringContext
from storyeval.metrics.distributional import MauveFeatures, mauve, mauve_features
from storyeval.metrics.diversity import (
    TextScores,
    concreteness_noun,
    concreteness_verb,
    distinct1,
    distinct2,
    distinct3,
    sentence_length,
)
from storyeval.metrics.diversity import repeated_ngram_rate_scores as repeated_ngram_rate
from storyeval.metrics.diversity import repeated_sentence_rate_scores as repeated_sentence_rate
from storyeval.metrics.edits import EditScores
from storyeval.metrics.edits import jaccard_similarity as jaccard
from storyeval.metrics.edits import levenshtein_distance as levenshtein
from storyeval.metrics.edits import user_scores as user
from storyeval.metrics.embedding import BertScores, bertscore_f, bertscore_p, bertscore_r
from storyeval.metrics.function import INJECTED, Scores, call_metric, metric_function
from storyeval.metrics.lm import PerplexityScores, perplexity
from storyeval.metrics.mover import MoverScores, moverscore, sms, swms, wms
from storyeval.metrics.novelty import creativity_index, ngram_novelty
from storyeval.metrics.overlap import (
    BleuScores,
    RougeScores,
    SelfBleuScores,
    bleu,
    bleu1,
    rouge1,
    rouge2,
    rougeL,
    self_bleu,
)
from storyeval.metrics.precision_recall import PrecisionRecall, text_precision_features
from storyeval.metrics.precision_recall import text_precision_recall as precision_recall
from storyeval.metrics.prose import (
    ProseScores,
    cross_story_repetition,
    not_but_rate,
    overused_phrase_rate,
    paragraph_length_cv,
    sentence_length_cv,
    slop_index,
)
from storyeval.metrics.registry import available_metrics
from storyeval.metrics.set_diversity import (
    SetDiversityScores,
    compression_ratio,
    functional_diversity,
    homogenization,
    plot_reuse,
    vendi_score,
)

ModelArg = Any  # a name, a local path, None (the offline default) or a loaded model object
References = Sequence[str] | Sequence[Sequence[str]]

# the names of earlier versions
MetricResult = Scores
BleuScore = BleuScores
BertScore = BertScores
Perplexity = PerplexityScores

mauve_star = mauve
"""MAUVE* comes with MAUVE: :func:`mauve`'s result carries both (``.mauve_star``)."""

#: Every registered metric's function, by registered name, derived from the metric registry
#: (the built-in metrics, the learned ones and those of installed plug-ins): ``mauve`` and
#: ``mauve_star`` give the per-text features their per-system statistics compare;
#: :func:`mauve` compares two sets of texts.
METRICS: dict[str, Callable[..., Any]] = {
    name: metric_function(name) for name in available_metrics()
}


def metric(
    name: str,
    texts: Sequence[str],
    references: References | None = None,
    *,
    prompts: Sequence[str] | None = None,
    groups: Sequence[str] | None = None,
    originals: Sequence[str] | None = None,
    ids: Sequence[str] | None = None,
    **options: Any,
) -> Scores:
    """Any registered metric by name, with its options as keywords (as ``--option
    NAME.KEY=VALUE`` on the command line); the inputs it does not read are ignored (see
    :func:`storyeval.metrics.function.call_metric`).

    Examples
    --------
    >>> metric("rougeL", ["the cat sat"], ["the cat sat down"]).values.round(3).tolist()
    [0.857]
    """
    return call_metric(
        name,
        texts,
        references,
        prompts=prompts,
        groups=groups,
        originals=originals,
        ids=ids,
        **options,
    )


def bertscore(
    texts: Sequence[str],
    references: References,
    *,
    model: ModelArg = None,
    layer: int | None = None,
    idf: bool = False,
    baseline: str | None = None,
    rescale: bool = False,
    device: str | None = None,
    precision: Literal["float32", "bfloat16", "float16"] | None = None,
    scoring: ScoringContext = INJECTED,
) -> BertScores:
    """BERTScore (Zhang et al. 2020) precision, recall and F1 from one encoding of each text
    (``.precision``, ``.recall``, ``.f1``; ``values`` is F1).

    Examples
    --------
    >>> result = bertscore(["The cat sat on the mat."], ["A cat was sitting on the mat."])
    >>> 0.5 < float(result.f1[0]) <= 1.0, result.signature.name, result.signature.fields["layer"]
    (True, 'bertscore_f', 4)

    The signature names ``bertscore_f``, the metric a score file holds the same numbers under.
    """
    return bertscore_f(
        texts,
        references,
        model=model,
        layer=layer,
        idf=idf,
        baseline=baseline,
        rescale=rescale,
        device=device,
        precision=precision,
        scoring=scoring,
    )


def rouge(
    texts: Sequence[str],
    references: References,
    *,
    kind: Literal["rouge1", "rouge2", "rougeL"] = "rougeL",
    component: Literal["f", "p", "r"] = "f",
    stemmer: bool = False,
) -> RougeScores:
    """ROUGE of ``kind`` (:func:`rouge1`, :func:`rouge2` or :func:`rougeL`).

    >>> rouge(["the cat sat"], [["a dog", "the cat sat down"]], kind="rouge1").values.round(3).tolist()
    [0.857]
    """
    functions = {"rouge1": rouge1, "rouge2": rouge2, "rougeL": rougeL}
    check_choice(kind, functions, "rouge: kind")
    return functions[kind](texts, references, component=component, stemmer=stemmer)


def distinct(
    texts: Sequence[str], *, n: Literal[1, 2, 3] = 1, punctuation: bool = False
) -> TextScores:
    """distinct-n (:func:`distinct1`, :func:`distinct2`, :func:`distinct3`).

    >>> distinct(["the cat and the dog"], n=1).values.tolist()
    [0.8]
    """
    functions = {1: distinct1, 2: distinct2, 3: distinct3}
    if n not in functions:
        raise ValueError(f"distinct: n must be 1, 2 or 3; got {n!r}")
    return functions[n](texts, punctuation=punctuation)


def repetition(texts: Sequence[str], *, n: int = 4, punctuation: bool = False) -> TextScores:
    """seq-rep-n (:func:`repeated_ngram_rate`).

    >>> repetition(["a b a b a b"], n=2).values.round(2).tolist()
    [0.6]
    """
    return repeated_ngram_rate(texts, n=n, punctuation=punctuation)


__all__ = [
    "METRICS",
    "BertScore",
    "BertScores",
    "BleuScore",
    "BleuScores",
    "CoherenceScores",
    "EditScores",
    "LearnedScores",
    "MauveFeatures",
    "MetricResult",
    "MoverScores",
    "Perplexity",
    "PerplexityScores",
    "PrecisionRecall",
    "ProseScores",
    "RougeScores",
    "Scores",
    "ScoringContext",
    "SelfBleuScores",
    "SetDiversityScores",
    "TextScores",
    "bertscore",
    "bertscore_f",
    "bertscore_p",
    "bertscore_prev",
    "bertscore_prompt",
    "bertscore_r",
    "bleu",
    "bleu1",
    "compression_ratio",
    "concreteness_noun",
    "concreteness_verb",
    "creativity_index",
    "cross_story_repetition",
    "distinct",
    "distinct1",
    "distinct2",
    "distinct3",
    "embedding_coherence",
    "functional_diversity",
    "homogenization",
    "jaccard",
    "levenshtein",
    "mauve",
    "mauve_features",
    "mauve_star",
    "metric",
    "moverscore",
    "ngram_novelty",
    "not_but_rate",
    "nsp_prev",
    "nsp_prompt",
    "nubia",
    "overused_phrase_rate",
    "paragraph_length_cv",
    "perplexity",
    "plot_reuse",
    "precision_recall",
    "preference",
    "repeated_ngram_rate",
    "repeated_sentence_rate",
    "repetition",
    "rouge",
    "rouge1",
    "rouge2",
    "rougeL",
    "self_bleu",
    "sentence_length",
    "sentence_length_cv",
    "slop_index",
    "sms",
    "swms",
    "text_precision_features",
    "union",
    "user",
    "vendi_score",
    "wms",
]
