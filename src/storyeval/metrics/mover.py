"""Earth mover's metrics: WMS, SMS, S+WMS (Clark et al. 2019; Clark 2021 ch. 5) and
MoverScore (Zhao et al. 2019).

Sentence mover's similarity (Clark 2021, Eqs. 5.1-5.5 and appendix B):

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
from typing import Annotated, Any, Literal, cast

import numpy as np

from storyeval.metrics.cards import CLARK, MOVER_LIMITS, MetricCard
from storyeval.metrics.context import ScoringContext, UndefinedScoreWarning, resolve_layer
from storyeval.metrics.embedding import Device, Precision, default_layer, idf_weights
from storyeval.metrics.function import (
    INJECTED,
    Opt,
    References,
    Scores,
    Texts,
    metric,
    undefined_note,
)
from storyeval.metrics.registry import MetricBatch

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


Embeddings = Annotated[Literal["glove", "contextual"], Opt("word embeddings")]
Glove = Annotated[
    str | None, Opt("GloVe text file (default: the offline GloVe 6B 50d)", model=True)
]
ContextualModel = Annotated[str | None, Opt("encoder for embeddings=contextual", model=True)]
ContextualLayer = Annotated[
    int | None, Opt("encoder layer for embeddings=contextual (auto: as BERTScore)")
]
Split = Annotated[Literal["pysbd", "spacy"], Opt("sentence splitter")]


@dataclass(frozen=True)
class MoverScores(Scores):
    """An earth mover's similarity of each text with its best reference."""


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


def _document(scoring: ScoringContext, options: Mapping[str, Any], text: str) -> Document:
    """The bag of embeddings of ``text`` (each text built once per run)."""
    key = (
        "mover-doc",
        options["embeddings"],
        options["glove"],
        options["model"],
        options["layer"],
        options["split"],
        text,
    )
    if key not in scoring.memo:
        sentences = scoring.sentences(text, options["split"])
        if options["embeddings"] == "contextual":
            cache = scoring.cache(options["model"])
            layer = default_layer(cache.encoder, options["layer"])
            scoring.memo[key] = contextual_document(sentences, cache, layer)
        else:
            scoring.memo[key] = glove_document(sentences, scoring.glove(options["glove"]))
    document: Document = scoring.memo[key]
    return document


def _prefetch(
    scoring: ScoringContext,
    texts: Sequence[str],
    references: Sequence[Sequence[str]],
    options: Mapping[str, Any],
) -> None:
    """Encode every sentence at once (contextual embeddings), not one text at a time."""
    if options["embeddings"] != "contextual":
        return
    cache = scoring.cache(options["model"])
    layer = default_layer(cache.encoder, options["layer"])
    sentences = [
        s
        for text in [*texts, *(r for refs in references for r in refs)]
        for s in scoring.sentences(text, options["split"])
    ]
    cache.request(sentences, [layer])
    cache.run()


def _mover(
    kind: str,
    texts: Sequence[str],
    references: Sequence[Sequence[str]],
    options: Mapping[str, Any],
    scoring: ScoringContext,
) -> MoverScores:
    _prefetch(scoring, texts, references, options)
    values = []
    for text, refs in zip(texts, references, strict=True):
        doc = _document(scoring, options, text)
        best = math.nan
        for reference in refs:
            value = mover_similarity(doc, _document(scoring, options, reference), kind)
            if not math.isnan(value) and (math.isnan(best) or value > best):
                best = value
        values.append(best)
    models: dict[str, str] = {}
    fields: dict[str, Any] = {}
    if options["embeddings"] == "contextual":
        cache = scoring.cache(options["model"])
        models["model"] = cache.identity
        fields["layer"] = default_layer(cache.encoder, options["layer"])
    else:
        models["glove"] = scoring.glove(options["glove"]).identity
    array = np.asarray(values, dtype=np.float64)
    notes = undefined_note(array, "stories or references have no content word with an embedding")
    omit = ("glove",) if options["embeddings"] == "contextual" else ("model", "layer")
    return MoverScores(
        array, models=models, fields={**fields, "stopwords": "spacy"}, notes=tuple(notes), omit=omit
    )


def _mover_metric(what: str) -> dict[str, Any]:
    return {
        "description": f"{what[0].upper()}{what[1:]} of the story and its reference(s) (Clark "
        "et al. 2019)",
        "families": ("mover",),
        "model": "glove",
        "backends": ("pot", "transformers", "torch"),
        "value_range": (0.0, 1.0),
        "plan": _mover_plan,
    }


def _mover_similarity(
    texts: Texts,
    references: References,
    *,
    kind: Literal["wms", "sms", "swms"] = "sms",
    embeddings: Embeddings = "glove",
    glove: Glove = None,
    model: ContextualModel = None,
    layer: ContextualLayer = None,
    split: Split = "pysbd",
    scoring: ScoringContext = INJECTED,
    device: Device = None,
    precision: Precision = None,
    progress: bool = False,
) -> MoverScores:
    """The mover's similarity of ``kind`` between each text and its best reference: the family
    registered as ``wms``, ``sms`` and ``swms``."""
    options = dict(embeddings=embeddings, glove=glove, model=model, layer=layer, split=split)
    return _mover(kind, texts, references, options, scoring)


wms = metric(
    "wms",
    **_mover_metric("word mover's similarity: exp(-EMD) between the bags of word embeddings"),
    card=MetricCard(
        measures="Word mover's similarity (Clark 2021, Eqs. 5.1-5.3): each document is a "
        "bag of word embeddings weighted by relative frequency `count(i)/|A|`; the distance is "
        "the earth mover's distance with Euclidean cost (solved exactly with POT), the "
        "similarity `exp(-distance)`. Stopwords (spaCy's list) and punctuation are removed "
        "first, as in Kusner et al. (2015) and appendix B.1.",
        read="0-1, 1 for identical bags of words. Word order does not matter.",
        papers=f"{CLARK}: Table 5.1 (x1000) human summary 57.85, repeated clauses 57.31; "
        "Table 5.3, Spearman with human judgments 0.180 (summaries) and 0.429 (essays) with "
        "GloVe; Table 5.4 (on the same x1000 scale, judging by the values) 13.02 for the MLE baseline, 14.52 with a WMS reward.",
        limits=MOVER_LIMITS,
        refs="Kusner et al. (2015); Clark, Celikyilmaz & Smith (2019).",
    ),
    fixed={"kind": "wms"},
    doc="""Word mover's similarity (Kusner et al. 2015; Clark et al. 2019): ``exp(-EMD)`` between
    the bags of word embeddings of each text and its best reference (see :func:`sms`).""",
)(_mover_similarity)


sms = metric(
    "sms",
    **_mover_metric(
        "sentence mover's similarity: exp(-EMD) between the bags of sentence embeddings"
    ),
    card=MetricCard(
        measures="Sentence mover's similarity (Clark 2021, Eq. 5.4): each document is a bag "
        "of sentence embeddings (the mean of each sentence's word embeddings) weighted by "
        "sentence length `|i|/|A|`; EMD with Euclidean cost; `exp(-distance)`.",
        read="0-1; rewards stories whose sentences, as units, resemble the reference's. "
        "Repeated clauses lower it (Table 5.1) while reordering words within sentences does "
        "not.",
        papers=f"{CLARK}: Table 5.1 (x1000) human summary 99.98, repetition 89.40 (-11%); "
        "Table 5.3, Spearman 0.258 (summaries, best of all metrics) and 0.457 (essays) with "
        "GloVe; Table 5.4 (same scale) 90.05 for the MLE baseline, 96.65 with an SMS reward.",
        limits=MOVER_LIMITS,
        refs="Clark, Celikyilmaz & Smith (2019).",
    ),
    fixed={"kind": "sms"},
    doc="""Sentence mover's similarity (Clark et al. 2019): ``exp(-EMD)`` between the bags of
    sentence embeddings of each text and its best reference.

    Parameters
    ----------
    embeddings : {"glove", "contextual"}
        Averaged GloVe vectors (the paper's) or an encoder's hidden states.
    glove : str, WordVectors or None
        GloVe text file or loaded vectors (default: the offline GloVe 6B 50d).
    model, layer
        The encoder for ``embeddings="contextual"``.
    split : {"pysbd", "spacy"}
        Sentence splitter.

    Examples
    --------
    >>> value = sms(["The cat sat. It slept."], ["The cat sat. It slept."]).values[0]
    >>> round(float(value), 6)
    1.0
    """,
)(_mover_similarity)


swms = metric(
    "swms",
    **_mover_metric("sentence and word mover's similarity: exp(-EMD) between bags of both"),
    card=MetricCard(
        measures="Sentence and word mover's similarity (Clark 2021, Eq. 5.5): one bag of "
        "both word and sentence embeddings, words weighted `count(i)/2|A|` and sentences "
        "`|i|/2|A|`, so that words may move to sentences and back; EMD with Euclidean cost; "
        "`exp(-distance)`.",
        read="0-1; combines lexical (WMS) and sentence-level (SMS) similarity.",
        papers=f"{CLARK}: Table 5.1 (x1000) human summary 24.06, repetition 22.81; "
        "Table 5.3, Spearman 0.214 (summaries) and 0.488 (essays, best; significantly above "
        "ROUGE-L) with GloVe; Table 5.4 (same scale) 32.15 for the MLE baseline.",
        limits=MOVER_LIMITS,
        refs="Clark, Celikyilmaz & Smith (2019).",
    ),
    fixed={"kind": "swms"},
    doc="""Sentence and word mover's similarity (Clark et al. 2019, S+WMS; see :func:`sms`).""",
)(_mover_similarity)


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


@metric(
    "moverscore",
    corpus_wide=lambda options: bool(options.get("idf")),
    description="MoverScore (Zhao et al. 2019): 1 / (1 + earth mover's distance) between the "
    "idf-weighted contextual token embeddings of the story and its reference(s)",
    families=("moverscore", "encoder"),
    model="encoder",
    backends=("pot", "transformers", "torch"),
    value_range=(0.0, 1.0),
    plan=_moverscore_plan,
    card=MetricCard(
        measures="MoverScore (Zhao et al. 2019) as in the authors' maintained "
        "`moverscore_v2`: last-layer contextual token embeddings (L2-normalised), word-piece "
        "continuations and punctuation removed, tokens weighted by idf (computed over the "
        "run's references for the reference side and over its stories for the story side), "
        "Euclidean transport cost, score `1 / (1 + EMD)`; best reference.",
        read="0-1, higher = the story's meaning can be moved onto the reference's more "
        "cheaply. Values cluster (about 0.45 on the example corpus); only differences under "
        "one signature matter. With idf, a corpus of one story is undefined (every token "
        "weighs 0): a warning says so; set `idf=false`.",
        papers="The source documents cite MoverScore (Callan & Foster 2023; Clark 2021) but "
        "report no values. The original paper used BERT fine-tuned on MNLI with power means of "
        "layers; storyeval follows the v2 recipe with any encoder (default: the offline "
        "MiniLM), so values are not comparable to the paper's.",
        limits="Depends on the corpus (idf) as well as the pair: the same story scores "
        "differently in a different run; keep the corpus fixed when comparing systems. Needs "
        "a reference.",
        refs="Zhao et al. (2019), MoverScore (EMNLP); POT (Flamary et al. 2021).",
    ),
)
def moverscore(
    texts: Texts,
    references: References,
    *,
    model: Annotated[
        str | None,
        Opt("encoder: hub name or local directory (default: offline MiniLM)", model=True),
    ] = None,
    layer: Annotated[int, Opt("hidden layer (-1 = last, as moverscore_v2)")] = -1,
    idf: Annotated[bool, Opt("weight tokens by idf (stories and references separately)")] = True,
    subwords: Annotated[bool, Opt("keep word-piece continuations (##...)")] = False,
    scoring: ScoringContext = INJECTED,
    device: Device = None,
    precision: Precision = None,
    progress: bool = False,
) -> MoverScores:
    """MoverScore (Zhao et al. 2019) of each text against its best reference, after the
    authors' maintained implementation (``moverscore_v2``)."""
    cache = scoring.cache(model)
    index = resolve_layer(cache.encoder.model, layer)
    refs = [r for rs in references for r in rs]
    cache.request([*texts, *refs], [index])
    cache.run()
    if idf:
        hyp_idf = idf_weights(cache.token_ids(t) for t in texts)
        ref_idf = idf_weights(cache.token_ids(t) for t in refs)
    else:
        tokenizer = cache.encoder.tokenizer
        special = {tokenizer.cls_token_id, tokenizer.sep_token_id} - {None}
        hyp_idf = ref_idf = ({int(i): 0.0 for i in special}, 1.0)
    values = []
    for text, rs in zip(texts, references, strict=True):
        hyp_states, hyp_weights = _mover_side(cache, index, text, hyp_idf, subwords)
        scores = [
            moverscore_pair(
                *_mover_side(cache, index, ref, ref_idf, subwords), hyp_states, hyp_weights
            )
            for ref in rs
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
    if notes:
        warnings.warn(f"moverscore: {notes[-1]}", UndefinedScoreWarning, stacklevel=2)
    return MoverScores(
        array, models={"model": cache.identity}, fields={"layer": index}, notes=tuple(notes)
    )


def _mover_side(
    cache: Any, layer: int, text: str, idf: tuple[dict[int, float], float], subwords: bool
) -> tuple[np.ndarray, np.ndarray]:
    """A text's token embeddings and MoverScore weights (idf; 0 for punctuation and, unless
    ``subwords``, word-piece continuations)."""
    tokenizer = cache.encoder.tokenizer
    ids = cache.token_ids(text)
    tokens = tokenizer.convert_ids_to_tokens([int(i) for i in ids])
    table, unseen = idf
    weights = np.array([table.get(int(i), unseen) for i in ids], dtype=np.float64)
    for position, token in enumerate(tokens):
        if (not subwords and token.startswith("##")) or token in string.punctuation:
            weights[position] = 0.0
    return cache.embeddings(text, layer).astype(np.float64), weights
