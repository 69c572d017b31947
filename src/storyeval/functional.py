"""Metrics as plain functions: data positional, options keyword-only, a named result.

Each function here runs the same code as the registered metric of the same name (the one
``storyeval score`` and :func:`storyeval.metrics.score_stories` run), so a number computed in
a notebook equals the number in a score file, and its ``signature`` says so. A model may be
named (a hub name or a local directory; ``None`` is the offline default) or passed in as an
object the caller already loaded (:func:`storyeval.models.load_encoder`,
:func:`storyeval.models.wrap_model` for a transformers model you have).

Examples
--------
>>> from storyeval import functional as F
>>> result = F.bleu(["the cat sat on the mat"], ["the cat sat on a mat"])
>>> round(result.corpus, 2), result.signature.fields["tokenize"]
(53.73, '13a')
>>> F.distinct(["a b a b", "a b c d"], n=2).values.tolist()
[0.6666666666666666, 1.0]
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from storyeval.corpus import Story
from storyeval.signature import Signature

ModelArg = Any  # a name, a local path, None (the offline default) or a loaded model object
References = Sequence[str] | Sequence[Sequence[str]]

__all__ = [
    "BertScore",
    "BleuScore",
    "MetricResult",
    "Perplexity",
    "bertscore",
    "bleu",
    "distinct",
    "mauve",
    "metric",
    "moverscore",
    "nubia",
    "perplexity",
    "repetition",
    "rouge",
    "self_bleu",
    "sms",
    "swms",
    "union",
    "wms",
]


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class MetricResult:
    """Values of one metric for each text, with the signature that reproduces them.

    Attributes
    ----------
    values : numpy array, shape (n,)
        One value per input text, in input order; NaN where undefined.
    signature : Signature
        Every setting that changes the numbers (``signature.render()`` prints it).
    corpus : dict of str to float
        Corpus-level statistics of all texts as one corpus (e.g. ``corpus_bleu``).
    notes : tuple of str
        What the user should know (e.g. texts scored in windows).
    """

    values: np.ndarray
    signature: Signature
    corpus_values: Mapping[str, float] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.values)

    def mean(self) -> float:
        """The mean over the texts with a defined value (NaN when there is none)."""
        finite = self.values[~np.isnan(self.values)]
        return float(finite.mean()) if len(finite) else math.nan


@dataclass(frozen=True)
class BleuScore(MetricResult):
    """Sentence BLEU per hypothesis (``values``, 0-100) and corpus BLEU (``corpus``)."""

    @property
    def scores(self) -> np.ndarray:
        """Sentence BLEU of each hypothesis (0-100)."""
        return self.values

    @property
    def corpus(self) -> float:
        """Corpus BLEU of all hypotheses (equal to ``sacrebleu.corpus_bleu``)."""
        return float(next(iter(self.corpus_values.values())))


@dataclass(frozen=True)
class BertScore:
    """BERTScore precision, recall and F1 per candidate, and their signature.

    The signature is the F1's (the three differ only in their name).
    """

    precision: np.ndarray
    recall: np.ndarray
    f1: np.ndarray
    signature: Signature
    notes: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.f1)


@dataclass(frozen=True)
class Perplexity(MetricResult):
    """Perplexity per text (``values``), and of all texts as one corpus (``corpus``):
    ``exp`` of the mean negative log-likelihood of all their tokens."""

    @property
    def corpus(self) -> float:
        """Perplexity of all texts as one corpus."""
        return float(self.corpus_values["corpus_perplexity"])


# --------------------------------------------------------------------------- the engine


def _texts(name: str, values: Sequence[str], what: str) -> list[str]:
    if isinstance(values, str):
        raise TypeError(f"{name}: {what} must be a sequence of strings, not one string")
    texts = list(values)
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"{name}: {what}[{index}] is {type(text).__name__}, not str")
    return texts


def _reference_lists(name: str, references: References, n: int) -> list[list[str]]:
    if isinstance(references, str):
        raise TypeError(f"{name}: references must be a sequence, not one string")
    rows = list(references)
    if len(rows) != n:
        raise ValueError(f"{name}: {n} candidates but {len(rows)} references")
    result = []
    for index, row in enumerate(rows):
        refs = [row] if isinstance(row, str) else list(row)
        if not refs or not all(isinstance(r, str) for r in refs):
            raise ValueError(f"{name}: references[{index}] must be a string or strings")
        result.append(refs)
    return result


def _stories(
    name: str,
    candidates: Sequence[str],
    references: References | None,
    prompts: Sequence[str] | None,
) -> list[Story]:
    texts = _texts(name, candidates, "candidates")
    if not texts:
        raise ValueError(f"{name}: no text to score")
    refs = _reference_lists(name, references, len(texts)) if references is not None else None
    heads = _texts(name, prompts, "prompts") if prompts is not None else None
    if heads is not None and len(heads) != len(texts):
        raise ValueError(f"{name}: {len(texts)} candidates but {len(heads)} prompts")
    return [
        Story(
            str(index),
            heads[index] if heads is not None else "",
            text,
            reference=refs[index] if refs is not None else None,
            system="all",
        )
        for index, text in enumerate(texts)
    ]


def _prepare(
    name: str,
    stories: list[Story],
    options: Mapping[str, Any],
    models: Mapping[str, ModelArg] | None = None,
) -> tuple[Any, dict[str, Any], Any]:
    """Run the registered metric ``name`` on ``stories`` with ``options`` (its own keys):
    its spec, resolved options and raw output."""
    from storyeval.metrics.context import ScoringContext
    from storyeval.metrics.registry import MetricBatch, get_metric, resolve_options

    spec = get_metric(name)
    context = ScoringContext()
    given = {key: context.use(value) for key, value in (models or {}).items()}
    settings = {f"{name}.{key}": value for key, value in {**options, **given}.items()}
    resolved = resolve_options([name], settings)[name]
    batch = MetricBatch(stories, context, list(stories))
    if spec.plan is not None:
        for encoder_name, texts, layers in spec.plan(batch, resolved):
            context.cache(encoder_name).request(texts, layers)
        for cache in context.caches:
            cache.run()
    return spec, resolved, spec.compute(batch, resolved)


def _run(
    name: str,
    stories: list[Story],
    options: Mapping[str, Any],
    models: Mapping[str, ModelArg] | None = None,
) -> MetricResult:
    """Run the registered metric ``name`` on ``stories`` with ``options`` (its own keys)."""
    spec, resolved, output = _prepare(name, stories, options, models)
    values = np.asarray(output.values, dtype=np.float64)
    corpus = {}
    if output.stats is not None:
        stats = np.asarray(output.stats, dtype=np.float64)
        corpus = {statistic.name: statistic.compute(stats, resolved) for statistic in spec.corpus}
    signature = spec.signature(resolved, output.models, output.fields, output.omit)
    return MetricResult(values, signature, corpus, tuple(output.notes))


def _as(kind: type[MetricResult], result: MetricResult) -> Any:
    return kind(result.values, result.signature, result.corpus_values, result.notes)


# --------------------------------------------------------------------------- the functions


def metric(
    name: str,
    candidates: Sequence[str],
    references: References | None = None,
    *,
    prompts: Sequence[str] | None = None,
    **options: Any,
) -> MetricResult:
    """Any registered metric by name, with its options as keywords.

    Parameters
    ----------
    name : str
        A registered metric (``storyeval metrics`` lists them).
    candidates : sequence of str
        The texts to score.
    references : sequence of str or of sequences of str, optional
        One reference (or several) per candidate, for metrics that need them.
    prompts : sequence of str, optional
        One prompt per candidate, for metrics that read it.
    **options
        The metric's options (``layer=4``), as ``--option NAME.KEY=VALUE`` on the command line.

    Returns
    -------
    MetricResult

    Raises
    ------
    UnknownMetricError, OptionError, TypeError, ValueError

    Examples
    --------
    >>> metric("rougeL", ["the cat sat"], ["the cat sat down"]).values.round(3).tolist()
    [0.857]
    """
    return _run(name, _stories(name, candidates, references, prompts), options)


def bleu(
    hypotheses: Sequence[str],
    references: References,
    *,
    max_order: int = 4,
    tokenize: Literal["13a", "intl", "none", "char"] = "13a",
    lowercase: bool = False,
    smooth: Literal["exp", "floor", "add-k", "none"] = "exp",
) -> BleuScore:
    """BLEU (sacrebleu): sentence BLEU per hypothesis and corpus BLEU.

    Parameters
    ----------
    hypotheses : sequence of str
    references : sequence of str, or of sequences of str (several references per hypothesis)
    max_order : int
        Largest n-gram order (``max_order=1`` is the unigram BLEU of ``bleu1``).
    tokenize, lowercase, smooth
        sacrebleu's settings (smoothing applies to sentence BLEU).

    Returns
    -------
    BleuScore
        ``.scores`` (sentence BLEU, 0-100), ``.corpus`` (equal to ``sacrebleu.corpus_bleu``)
        and ``.signature``.

    Examples
    --------
    >>> result = bleu(["the cat sat on the mat", "a dog ran"], ["the cat sat on a mat", "a dog ran away"])
    >>> result.scores.round(2).tolist(), round(result.corpus, 2)
    ([53.73, 71.65], 53.42)
    """
    name = "bleu1" if max_order == 1 else "bleu"
    options = {"max_order": max_order, "tokenize": tokenize, "lowercase": lowercase}
    stories = _stories(name, hypotheses, references, None)
    return _as(BleuScore, _run(name, stories, {**options, "smooth": smooth}))  # type: ignore[no-any-return]


def rouge(
    hypotheses: Sequence[str],
    references: References,
    *,
    kind: Literal["rouge1", "rouge2", "rougeL"] = "rougeL",
    component: Literal["f", "p", "r"] = "f",
    stemmer: bool = False,
) -> MetricResult:
    """ROUGE (the rouge-score package), the best reference counting.

    Examples
    --------
    >>> rouge(["the cat sat"], [["a dog", "the cat sat down"]], kind="rouge1").values.round(3).tolist()
    [0.857]
    """
    stories = _stories(kind, hypotheses, references, None)
    return _run(kind, stories, {"component": component, "stemmer": stemmer})


def bertscore(
    candidates: Sequence[str],
    references: References,
    *,
    encoder: ModelArg = None,
    layer: int | None = None,
    idf: bool = False,
    baseline: str | None = None,
    rescale: bool = False,
) -> BertScore:
    """BERTScore (Zhang et al. 2020) precision, recall and F1.

    Parameters
    ----------
    candidates, references
        With several references per candidate, each of P, R and F1 is the best over them.
    encoder : str, loaded model or None
        A hub name, a local directory, a model from :func:`storyeval.models.load_encoder` or
        :func:`storyeval.models.wrap_model`; ``None`` is the offline all-MiniLM-L6-v2.
    layer : int, optional
        Hidden layer (default: bert-score's recommended layer for known encoders).
    idf : bool
        Weight tokens by idf over the references.
    baseline, rescale
        Rescale with a baseline file (or the packaged one for the default encoder).

    Returns
    -------
    BertScore

    Examples
    --------
    >>> result = bertscore(["The cat sat on the mat."], ["A cat was sitting on the mat."])
    >>> 0.5 < float(result.f1[0]) <= 1.0, result.signature.fields["layer"]
    (True, 4)
    """
    stories = _stories("bertscore", candidates, references, None)
    options = {"layer": layer, "idf": idf, "rescale": rescale, "baseline": baseline}
    models = {"model": encoder}
    parts = [_run(f"bertscore_{part}", stories, options, models) for part in ("p", "r", "f")]
    signature = Signature("bertscore", parts[2].signature.fields, parts[2].signature.version)
    return BertScore(parts[0].values, parts[1].values, parts[2].values, signature, parts[2].notes)


def _mover(
    kind: str,
    candidates: Sequence[str],
    references: References,
    embeddings: str,
    vectors: ModelArg,
    encoder: ModelArg,
    layer: int | None,
    split: str,
) -> MetricResult:
    stories = _stories(kind, candidates, references, None)
    options = {"embeddings": embeddings, "layer": layer, "split": split}
    return _run(kind, stories, options, {"glove": vectors, "model": encoder})


def sms(
    candidates: Sequence[str],
    references: References,
    *,
    embeddings: Literal["glove", "contextual"] = "glove",
    vectors: ModelArg = None,
    encoder: ModelArg = None,
    layer: int | None = None,
    split: Literal["pysbd", "spacy"] = "pysbd",
) -> MetricResult:
    """Sentence mover's similarity (Clark et al. 2019): ``exp(-EMD)`` between the bags of
    sentence embeddings of candidate and reference (the best reference counts).

    Parameters
    ----------
    embeddings : {"glove", "contextual"}
        Averaged GloVe vectors (the paper's) or an encoder's hidden states.
    vectors : str, WordVectors or None
        GloVe text file or loaded vectors (default: the offline GloVe 6B 50d).
    encoder, layer
        The encoder for ``embeddings="contextual"``.
    split : {"pysbd", "spacy"}
        Sentence splitter.

    Examples
    --------
    >>> value = sms(["The cat sat. It slept."], ["The cat sat. It slept."]).values[0]
    >>> round(float(value), 6)
    1.0
    """
    return _mover("sms", candidates, references, embeddings, vectors, encoder, layer, split)


def wms(
    candidates: Sequence[str],
    references: References,
    *,
    embeddings: Literal["glove", "contextual"] = "glove",
    vectors: ModelArg = None,
    encoder: ModelArg = None,
    layer: int | None = None,
    split: Literal["pysbd", "spacy"] = "pysbd",
) -> MetricResult:
    """Word mover's similarity: ``exp(-EMD)`` between the bags of word embeddings (see
    :func:`sms` for the parameters)."""
    return _mover("wms", candidates, references, embeddings, vectors, encoder, layer, split)


def swms(
    candidates: Sequence[str],
    references: References,
    *,
    embeddings: Literal["glove", "contextual"] = "glove",
    vectors: ModelArg = None,
    encoder: ModelArg = None,
    layer: int | None = None,
    split: Literal["pysbd", "spacy"] = "pysbd",
) -> MetricResult:
    """Sentence and word mover's similarity (see :func:`sms` for the parameters)."""
    return _mover("swms", candidates, references, embeddings, vectors, encoder, layer, split)


def moverscore(
    candidates: Sequence[str],
    references: References,
    *,
    encoder: ModelArg = None,
    **options: Any,
) -> MetricResult:
    """MoverScore (Zhao et al. 2019); ``options`` as ``storyeval metrics moverscore`` lists."""
    stories = _stories("moverscore", candidates, references, None)
    return _run("moverscore", stories, options, {"model": encoder})


def perplexity(
    texts: Sequence[str],
    *,
    prompts: Sequence[str] | None = None,
    model: ModelArg = None,
    window: int | None = None,
    stride: int | None = None,
    precision: Literal["float32", "bfloat16"] = "float32",
    batch_tokens: int = 2048,
) -> Perplexity:
    """Perplexity of each text under a causal LM, after its prompt when prompts are given.

    Parameters
    ----------
    texts : sequence of str
    prompts : sequence of str, optional
        Condition each text on its prompt (the prompt's tokens are not scored).
    model : str, loaded model or None
        A hub name, a local directory, :func:`storyeval.models.load_causal_lm`'s result, or
        ``None`` for the offline SmolLM2-135M.
    window, stride : int, optional
        Texts longer than the window are scored with a sliding window (default: the model's
        context, half of it).
    precision : {"float32", "bfloat16"}
    batch_tokens : int
        Tokens per forward batch (speed only).

    Returns
    -------
    Perplexity
        ``.values`` per text and ``.corpus`` over all tokens.

    Examples
    --------
    >>> result = perplexity(["The cat sat on the mat.", "Mat the on sat cat the."])
    >>> bool(result.values[0] < result.values[1]), result.corpus > 1
    (True, True)
    """
    stories = _stories("perplexity", texts, None, prompts)
    options = {
        "context": "prompt" if prompts is not None else "none",
        "window": window,
        "stride": stride,
        "precision": precision,
        "batch_tokens": batch_tokens,
    }
    return _as(Perplexity, _run("perplexity", stories, options, {"model": model}))  # type: ignore[no-any-return]


def distinct(
    texts: Sequence[str], *, n: Literal[1, 2, 3] = 1, punctuation: bool = False
) -> MetricResult:
    """distinct-n of each text: unique n-grams over all n-grams (lower-cased words).

    Examples
    --------
    >>> distinct(["the cat and the dog"], n=1).values.tolist()
    [0.8]
    """
    if n not in (1, 2, 3):
        raise ValueError(f"distinct: n must be 1, 2 or 3; got {n!r}")
    return _run(
        f"distinct{n}", _stories("distinct", texts, None, None), {"punctuation": punctuation}
    )


def repetition(texts: Sequence[str], *, n: int = 4, punctuation: bool = False) -> MetricResult:
    """Share of each text's n-grams that repeat an earlier one (seq-rep-n).

    Examples
    --------
    >>> repetition(["a b a b a b"], n=2).values.round(2).tolist()
    [0.6]
    """
    stories = _stories("repeated_ngram_rate", texts, None, None)
    return _run("repeated_ngram_rate", stories, {"n": n, "punctuation": punctuation})


def self_bleu(
    texts: Sequence[str], *, max_order: int = 4, tokenize: str = "13a", lowercase: bool = False
) -> MetricResult:
    """Self-BLEU of each text against the others (lower means more diverse).

    Examples
    --------
    >>> self_bleu(["the cat sat on the mat", "the cat sat on the mat", "a dog ran away fast"]).values.round(1).tolist()
    [100.0, 100.0, 0.0]
    """
    stories = _stories("self_bleu", texts, None, None)
    options = {"max_order": max_order, "tokenize": tokenize, "lowercase": lowercase}
    return _run("self_bleu", stories, options)


def nubia(
    candidates: Sequence[str],
    references: References,
    *,
    model: ModelArg,
) -> MetricResult:
    """NUBIA (Kane et al. 2020): calibrated interchangeability of each story with its
    reference, in [0, 1].

    Parameters
    ----------
    candidates : sequence of str
    references : sequence of str (or of lists of str: the first is used)
    model : str or NubiaModel
        A directory written by ``storyeval train nubia`` or
        :meth:`storyeval.learn.nubia.NubiaModel.load`'s result.
    """
    records = _stories("nubia", candidates, references, None)
    return _run("nubia", records, {}, {"model": model})


def union(
    stories: Sequence[str],
    *,
    model: ModelArg,
    prompts: Sequence[str] | None = None,
    batch_size: int = 32,
) -> MetricResult:
    """UNION (Guan and Huang 2020): probability that each story is human-written.

    Parameters
    ----------
    stories : sequence of str
    model : str or UnionScorer
        A directory written by ``storyeval train union`` or a model loaded with
        :func:`storyeval.learn.union.load_union`.
    prompts : sequence of str, optional
        The stories' prompts (UNION reads prompt and story, as it was trained).
    batch_size : int
    """
    records = _stories("union", stories, None, prompts)
    return _run("union", records, {"batch_size": batch_size}, {"model": model})


def mauve(
    texts: Sequence[str],
    reference_texts: Sequence[str],
    *,
    model: ModelArg = None,
    features: Literal["encoder", "causal-lm"] = "encoder",
    seeds: int = 5,
    seed: int = 25,
    num_buckets: int | None = None,
    **options: Any,
) -> Any:
    """MAUVE and MAUVE* (Pillutla et al.) of ``texts`` against ``reference_texts`` (people's),
    over several k-means seeds, from the features ``storyeval score --metrics mauve`` uses.

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
    **options
        Further options of the ``mauve`` metric (``explained_variance``, ``kmeans``, ...).

    Returns
    -------
    MauveResult
        See :class:`storyeval.distribution.MauveResult`; plus ``.signature``-compatible
        settings in :func:`storyeval.metrics.get_metric` ``("mauve")``.

    Examples
    --------
    >>> people = [f"The {w} walked home after the storm and made tea." for w in ("girl", "man", "dog", "cat", "boy", "woman")]
    >>> system = [f"Buy {w} now at the best price in town!" for w in ("shoes", "hats", "cars", "bikes", "tea", "maps")]
    >>> result = mauve(system, people, seeds=2, num_buckets=2, kmeans="sklearn")
    >>> bool(result.mauve < 0.5), len(result.per_seed)
    (True, 2)
    """
    import warnings

    from storyeval.metrics.distributional import _mauve

    system = _texts("mauve", texts, "texts")
    people = _texts("mauve", reference_texts, "reference_texts")
    if not system or not people:
        raise ValueError("mauve: both texts and reference_texts must be non-empty")
    records = [Story(f"p{i}", "", t, system="system") for i, t in enumerate(system)] + [
        Story(f"q{i}", "", t, system="human") for i, t in enumerate(people)
    ]
    settings = {"features": features, "seeds": seeds, "seed": seed, "num_buckets": num_buckets}
    _, resolved, output = _prepare("mauve", records, {**settings, **options}, {"model": model})
    stats = np.asarray(output.stats, dtype=np.float64)[:, :-1]  # the last column: lengths
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return _mauve(stats[: len(system)], stats[len(system) :], resolved)
