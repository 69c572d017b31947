"""Earth mover's metrics: WMS, SMS, S+WMS (Clark et al. 2019; Clark 2021 ch. 5) and
MoverScore (Zhao et al. 2019).

Sentence mover's similarity (seed 000, Eqs. 5.1-5.5 and appendix B):

* a document is a bag of word embeddings (WMS), of sentence embeddings (SMS), or of both
  (S+WMS); stopwords and punctuation are removed first (Kusner et al. 2015), as are words
  without an embedding;
* a word type weighs ``count(i) / |A|`` (Eq. 5.1), a sentence ``|i| / |A|`` (its number of
  kept words, Eq. 5.4); S+WMS divides both by ``2|A|`` (Eq. 5.5);
* a sentence embedding is the mean of its word embeddings;
* the cost of moving ``i`` to ``j`` is the Euclidean distance of their embeddings; the
  distance is the optimal transport cost (earth mover's distance, solved exactly with POT's
  ``ot.emd2``) and the similarity is ``exp(-distance)`` (Eq. 5.3).

Word embeddings are GloVe (the offline default is GloVe 6B 50d; the thesis used spaCy's
300-d Common Crawl GloVe) or, with ``embeddings=contextual``, the encoder's token embeddings
of each sentence (each token its own type; word pieces averaged into words; stopwords and
punctuation removed after embedding, as in appendix B.1).

MoverScore follows the authors' maintained implementation (``moverscore_v2``): the encoder's
last-layer token embeddings, L2-normalised; word pieces (``##``) and punctuation removed;
tokens weighted by idf computed on the run's references (reference side) and stories (story
side); Euclidean cost; score ``1 / (1 + EMD)``.
"""

from __future__ import annotations

import functools
import math
import string
import warnings
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from storyeval.metrics.context import UndefinedScoreWarning, resolve_layer
from storyeval.metrics.embedding import default_layer, idf_weights
from storyeval.metrics.registry import MetricBatch, MetricOption, MetricOutput, register_metric

# --------------------------------------------------------------------------- text handling


@functools.lru_cache(maxsize=1)
def _spacy_tokenizer() -> Any:
    import spacy

    return spacy.blank("en").tokenizer


@functools.lru_cache(maxsize=1)
def stop_words() -> frozenset[str]:
    """spaCy's English stop-word list (what the thesis' code used through spaCy)."""
    from spacy.lang.en.stop_words import STOP_WORDS

    return frozenset(STOP_WORDS)


def content_words(text: str) -> list[str]:
    """Lower-cased tokens of ``text`` (spaCy's English tokenizer, which splits like GloVe's
    training data, e.g. ``don't`` -> ``do n't``) without stopwords and punctuation.

    >>> content_words("The old man didn't see the boat, sadly.")
    ['old', 'man', 'boat', 'sadly']
    """
    words = []
    stops = stop_words()
    for token in _spacy_tokenizer()(text):
        if token.is_punct or token.is_space or not token.text.strip():
            continue
        word = token.text.lower()
        if word in stops or all(ch in string.punctuation for ch in word):
            continue
        words.append(word)
    return words


@dataclass
class Document:
    """A document as sentences of (word, vector) pairs, after filtering."""

    sentences: list[tuple[list[str], np.ndarray]]  # words and their vectors (n_words x dim)
    contextual: bool = False  # every token its own type (its vector depends on its context)

    @property
    def n_words(self) -> int:
        """The number of words with an embedding."""
        return sum(len(words) for words, _ in self.sentences)


def glove_document(sentences: Sequence[str], glove: Any) -> Document:
    """Keep the content words that have a GloVe vector, sentence by sentence."""
    kept = []
    for sentence in sentences:
        words = [w for w in content_words(sentence) if w in glove.index]
        if words:
            vectors, _ = glove.lookup(words)
            kept.append((words, vectors))
    return Document(kept)


def bags(document: Document, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """The weighted bag of ``kind`` (``wms``, ``sms`` or ``swms``): embeddings (n x dim) and
    weights summing to 1 (Eqs. 5.1, 5.4, 5.5). Contextual documents (whose word list
    contains a token once per occurrence with its own vector) give each token its own type.
    """
    total = document.n_words
    vectors: list[np.ndarray] = []
    weights: list[float] = []
    if kind in ("wms", "swms"):
        counts: Counter[str] = Counter()
        first: dict[str, np.ndarray] = {}
        for words, matrix in document.sentences:
            for word, vector in zip(words, matrix, strict=True):
                first.setdefault(word, vector)
                counts[word] += 1
        if document.contextual:  # every token is its own type (count 1)
            for _, matrix in document.sentences:
                for vector in matrix:
                    vectors.append(vector)
                    weights.append(1.0)
        else:
            for word, count in counts.items():
                vectors.append(first[word])
                weights.append(float(count))
    if kind in ("sms", "swms"):
        for words, matrix in document.sentences:
            vectors.append(matrix.mean(axis=0))
            weights.append(float(len(words)))
    scale = (2 * total) if kind == "swms" else total
    return np.asarray(vectors, dtype=np.float64), np.asarray(weights) / scale


def euclidean(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pairwise Euclidean distances between the rows of ``a`` and ``b`` (float64)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    squared = (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2.0 * (a @ b.T)
    return cast("np.ndarray", np.sqrt(np.maximum(squared, 0.0)))


def mover_similarity(a: Document, b: Document, kind: str) -> float:
    """``exp(-EMD)`` between the bags of two documents (NaN if either is empty)."""
    import ot

    if a.n_words == 0 or b.n_words == 0:
        return math.nan
    xa, wa = bags(a, kind)
    xb, wb = bags(b, kind)
    cost = euclidean(xa, xb)
    wa, wb = wa / wa.sum(), wb / wb.sum()  # guard rounding: both sum to 1 exactly
    distance = float(ot.emd2(wa, wb, cost))
    return math.exp(-distance)


# --------------------------------------------------------------------------- contextual words


def contextual_document(sentences: Sequence[str], cache: Any, layer: int) -> Document:
    """Each sentence encoded alone; word pieces averaged into words; stopwords and
    punctuation removed after embedding (appendix B.1)."""
    tokenizer = cache.encoder.tokenizer
    stops = stop_words()
    kept = []
    for sentence in sentences:
        states = cache.embeddings(sentence, layer)
        encoding = tokenizer(sentence.strip(), add_special_tokens=True)
        word_ids = encoding.word_ids()
        groups: dict[int, list[int]] = {}
        for position, word_id in enumerate(word_ids):
            if word_id is not None:
                groups.setdefault(word_id, []).append(position)
        words, vectors = [], []
        for word_id, positions in groups.items():
            span = encoding.word_to_chars(word_id)
            word = sentence.strip()[span.start : span.end].lower()
            if not word or word in stops or all(ch in string.punctuation for ch in word):
                continue
            words.append(word)
            vectors.append(states[positions].mean(axis=0))
        if words:
            kept.append((words, np.asarray(vectors, dtype=np.float64)))
    return Document(kept, contextual=True)


# --------------------------------------------------------------------------- WMS / SMS / S+WMS


def _mover_options() -> list[MetricOption]:
    return [
        MetricOption(
            "embeddings", str, "glove", "word embeddings", choices=("glove", "contextual")
        ),
        MetricOption("glove", str, None, "GloVe text file (default: the offline GloVe 6B 50d)"),
        MetricOption("model", str, None, "encoder for embeddings=contextual"),
        MetricOption(
            "layer", int, None, "encoder layer for embeddings=contextual (auto: as BERTScore)"
        ),
        MetricOption("split", str, "pysbd", "sentence splitter", choices=("pysbd", "spacy")),
    ]


def _mover_plan(
    batch: MetricBatch, options: Mapping[str, Any]
) -> Iterable[tuple[str | None, list[str], list[int]]]:
    if options["embeddings"] != "contextual":
        return
    cache = batch.context.cache(options["model"])
    layer = default_layer(cache.encoder, options["layer"])
    texts = []
    for story in batch.stories:
        for text in [story.story, *story.references]:
            texts += batch.context.sentences(text, options["split"])
    yield options["model"], texts, [layer]


def _documents(batch: MetricBatch, options: Mapping[str, Any], text: str) -> Document:
    context = batch.context
    key = (
        "mover-doc",
        options["embeddings"],
        options["glove"],
        options["model"],
        options["layer"],
        options["split"],
        text,
    )
    if key not in context.memo:
        sentences = context.sentences(text, options["split"])
        if options["embeddings"] == "contextual":
            cache = context.cache(options["model"])
            layer = default_layer(cache.encoder, options["layer"])
            context.memo[key] = contextual_document(sentences, cache, layer)
        else:
            context.memo[key] = glove_document(sentences, context.glove(options["glove"]))
    document: Document = context.memo[key]
    return document


def _mover(kind: str) -> Any:
    def compute(batch: MetricBatch, options: Mapping[str, Any]) -> MetricOutput:
        values = []
        for story in batch.stories:
            doc = _documents(batch, options, story.story)
            best = math.nan
            for reference in story.references:
                value = mover_similarity(doc, _documents(batch, options, reference), kind)
                if not math.isnan(value) and (math.isnan(best) or value > best):
                    best = value
            values.append(best)
        models: dict[str, str] = {}
        fields: dict[str, Any] = {}
        if options["embeddings"] == "contextual":
            cache = batch.context.cache(options["model"])
            models["model"] = cache.identity
            fields["layer"] = default_layer(cache.encoder, options["layer"])
        else:
            models["glove"] = batch.context.glove(options["glove"]).identity
        array = np.asarray(values, dtype=np.float64)
        notes = []
        if np.isnan(array).any():
            notes.append(
                f"{int(np.isnan(array).sum())} stories or references have no content word with an embedding: undefined"
            )
        omit = ("glove",) if options["embeddings"] == "contextual" else ("model", "layer")
        return MetricOutput(
            array, models=models, fields={**fields, "stopwords": "spacy"}, notes=notes, omit=omit
        )

    return compute


for _kind, _what in (
    ("wms", "word mover's similarity: exp(-EMD) between the bags of word embeddings"),
    ("sms", "sentence mover's similarity: exp(-EMD) between the bags of sentence embeddings"),
    ("swms", "sentence and word mover's similarity: exp(-EMD) between bags of both"),
):
    register_metric(
        _kind,
        description=f"{_what[0].upper()}{_what[1:]} of the story and its reference(s) (Clark et al. 2019)",
        families=("mover",),
        needs_reference=True,
        model="glove",
        backends=("pot", "transformers", "torch"),
        higher_is_better=True,
        value_range=(0.0, 1.0),
        options=_mover_options(),
        plan=_mover_plan,
    )(_mover(_kind))


# --------------------------------------------------------------------------- MoverScore


def moverscore_pair(
    ref_states: np.ndarray,
    ref_weights: np.ndarray,
    hyp_states: np.ndarray,
    hyp_weights: np.ndarray,
) -> float:
    """``1 / (1 + EMD)`` between two weighted sets of L2-normalised token embeddings."""
    import ot

    if ref_weights.sum() <= 0 or hyp_weights.sum() <= 0:
        return math.nan
    a = ref_states / np.maximum(np.linalg.norm(ref_states, axis=1, keepdims=True), 1e-30)
    b = hyp_states / np.maximum(np.linalg.norm(hyp_states, axis=1, keepdims=True), 1e-30)
    cost = euclidean(a, b)
    distance = float(
        ot.emd2(ref_weights / ref_weights.sum(), hyp_weights / hyp_weights.sum(), cost)
    )
    return 1.0 / (1.0 + distance)


def _moverscore_plan(
    batch: MetricBatch, options: Mapping[str, Any]
) -> Iterable[tuple[str | None, list[str], list[int]]]:
    cache = batch.context.cache(options["model"])
    layer = resolve_layer(cache.encoder.model, options["layer"])
    texts = [s.story for s in batch.stories] + [r for s in batch.stories for r in s.references]
    yield options["model"], texts, [layer]


@register_metric(
    "moverscore",
    corpus_wide=lambda options: bool(options.get("idf")),
    description="MoverScore (Zhao et al. 2019): 1 / (1 + earth mover's distance) between the "
    "idf-weighted contextual token embeddings of the story and its reference(s)",
    families=("moverscore", "encoder"),
    needs_reference=True,
    model="encoder",
    backends=("pot", "transformers", "torch"),
    higher_is_better=True,
    value_range=(0.0, 1.0),
    options=[
        MetricOption(
            "model", str, None, "encoder: hub name or local directory (default: offline MiniLM)"
        ),
        MetricOption("layer", int, -1, "hidden layer (-1 = last, as moverscore_v2)"),
        MetricOption("idf", bool, True, "weight tokens by idf (stories and references separately)"),
        MetricOption("subwords", bool, False, "keep word-piece continuations (##...)"),
    ],
    plan=_moverscore_plan,
)
def moverscore(batch: MetricBatch, options: Mapping[str, Any]) -> MetricOutput:
    """MoverScore of each story against its best reference."""
    cache = batch.context.cache(options["model"])
    layer = resolve_layer(cache.encoder.model, options["layer"])
    tokenizer = cache.encoder.tokenizer
    hyps = [s.story for s in batch.stories]
    refs = [r for s in batch.stories for r in s.references]
    if options["idf"]:
        hyp_idf = idf_weights(cache.token_ids(t) for t in hyps)
        ref_idf = idf_weights(cache.token_ids(t) for t in refs)
    else:
        special = {tokenizer.cls_token_id, tokenizer.sep_token_id} - {None}
        hyp_idf = ref_idf = ({int(i): 0.0 for i in special}, 1.0)

    def side(text: str, idf: tuple[dict[int, float], float]) -> tuple[np.ndarray, np.ndarray]:
        ids = cache.token_ids(text)
        tokens = tokenizer.convert_ids_to_tokens([int(i) for i in ids])
        table, unseen = idf
        weights = np.array([table.get(int(i), unseen) for i in ids], dtype=np.float64)
        for position, token in enumerate(tokens):
            if (not options["subwords"] and token.startswith("##")) or token in string.punctuation:
                weights[position] = 0.0
        return cache.embeddings(text, layer).astype(np.float64), weights

    values = []
    for story in batch.stories:
        hyp_states, hyp_weights = side(story.story, hyp_idf)
        scores = [
            moverscore_pair(*side(ref, ref_idf), hyp_states, hyp_weights)
            for ref in story.references
        ]
        finite = [s for s in scores if not math.isnan(s)]
        values.append(max(finite) if finite else math.nan)
    array = np.asarray(values, dtype=np.float64)
    notes = []
    if np.isnan(array).any():
        notes.append(
            f"{int(np.isnan(array).sum())} stories are undefined: no token with a non-zero weight "
            "(with idf, a token found in every story or reference weighs 0, so idf needs at "
            "least two distinct stories and references; set moverscore.idf=false otherwise)"
        )
        warnings.warn(f"moverscore: {notes[-1]}", UndefinedScoreWarning, stacklevel=2)
    return MetricOutput(
        array, models={"model": cache.identity}, fields={"layer": layer}, notes=notes
    )
