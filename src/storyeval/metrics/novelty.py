"""Novelty against a corpus: how much of a story could be copied from a reference corpus (a
training set, the human stories, any text).

:class:`CorpusIndex` is a word-level suffix array over the corpus (lower-cased words,
punctuation dropped, documents kept apart), sorted on the first ``depth`` words of each
suffix by prefix doubling in numpy and stored as memory-mapped arrays, so a query reads only
the pages it needs. For every position of a story it finds the longest span starting there
that occurs in the corpus (up to ``depth`` words), by a binary search run for all positions at
once. From those match lengths:

* **n-gram novelty** (Merrill et al. 2024; McCoy et al. 2023): the share of the story's
  n-grams that do not occur in the corpus;
* **L-uniqueness** and the **creativity index** (Lu et al. 2025): the share of the story's
  words not covered by any span of at least L words found in the corpus (exact match), and
  its sum over a range of L.
"""

from __future__ import annotations

import functools
import hashlib
import json
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, cast

import numpy as np

from storyeval.base.errors import StoryevalError
from storyeval.metrics.cards import MetricCard
from storyeval.metrics.context import ScoringContext
from storyeval.metrics.function import INJECTED, Opt, Scores, Texts, metric

INDEX_FORMAT = 1
_BOUNDARY = 0  # between documents; sorts first, never matches a query word
_UNKNOWN = -2  # a query word the corpus never has
_PAST_END = -3  # beyond the end of the story


class CorpusIndexError(StoryevalError, ValueError):
    """An index directory that is missing, incomplete or of another format."""


def index_words(text: str) -> list[str]:
    """The words an index holds and a query looks up: lower-cased, punctuation dropped.

    >>> index_words("Don't go, Ana!")
    ["don't", 'go', 'ana']
    """
    from storyeval.text import tokenize_words

    return tokenize_words(text, lowercase=True, punctuation=False)


# --------------------------------------------------------------------------- building


def _suffix_array(tokens: np.ndarray, depth: int) -> np.ndarray:
    """Start positions of the corpus' words, sorted on their first ``depth`` words (the
    token array ends with ``depth`` boundaries). Prefix doubling: after the pass with step
    h, positions are ordered by their first 2h words; each pass is one argsort."""
    n = tokens.size - depth
    positions = np.flatnonzero(tokens[:n] != _BOUNDARY).astype(np.int64)
    rank = tokens.astype(np.int64)
    step = 1
    while step < depth:
        second = rank[positions + step]
        key = rank[positions] * (int(second.max()) + 1) + second
        order = np.argsort(key, kind="stable")
        positions, key = positions[order], key[order]
        dense = np.empty(key.size, dtype=np.int64)
        if key.size:
            dense[0] = 1
            np.cumsum(np.diff(key) != 0, out=dense[1:])
            dense[1:] += 1
        rank = np.zeros(tokens.size, dtype=np.int64)
        rank[positions] = dense
        step *= 2
    return positions


class _Tokens:
    """The corpus as word ids (a growing int32 array) and its vocabulary."""

    def __init__(self) -> None:
        self.ids = array("i")
        self.vocabulary: dict[str, int] = {}
        self.documents = 0
        self.digest = hashlib.sha256()

    def add(self, text: str, *, end_document: bool) -> None:
        vocabulary = self.vocabulary
        for word in index_words(text):
            found = vocabulary.get(word)
            if found is None:
                found = vocabulary[word] = len(vocabulary) + 1  # 0 is the boundary
            self.ids.append(found)
        self.digest.update(text.encode("utf-8"))
        if end_document:
            self.ids.append(_BOUNDARY)
            self.documents += 1
            self.digest.update(b"\x00")


def corpus_documents(paths: Iterable[str | Path]) -> Iterator[tuple[str, bool]]:
    """``(text, ends a document)`` from story files (each story a document) and plain text
    files (each file a document, read line by line)."""
    from storyeval.corpus import read_stories

    for path in map(Path, paths):
        if not path.is_file():
            raise CorpusIndexError(f"{path}: no such file")
        if path.suffix.lower() in (".jsonl", ".csv"):
            for story in read_stories(path):
                yield story.story, True
            continue
        with open(path, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                yield line, False
        yield "", True


def build_index(
    documents: Iterable[tuple[str, bool]] | Iterable[str],
    output: str | Path,
    *,
    depth: int = 16,
    progress: Any = None,
) -> CorpusIndex:
    """Index a corpus into the directory ``output`` (written atomically).

    Parameters
    ----------
    documents : iterable of str, or of (text, ends a document)
        Texts (each a document), or pieces with document ends marked
        (:func:`corpus_documents`).
    depth : int
        Longest span (in words) a query can match: n-gram novelty and L-uniqueness are
        defined up to it. Powers of two cost least (a sorting pass doubles it).
    progress : callable, optional
        Called with a line of text as the work advances.
    """
    from storyeval.base.io import atomic_directory

    if not isinstance(depth, int) or not 2 <= depth <= 64:
        raise CorpusIndexError(f"depth must be an integer in [2, 64]; got {depth!r}")
    say = progress or (lambda line: None)
    tokens = _Tokens()
    for count, item in enumerate(documents, start=1):
        if isinstance(item, str):
            tokens.add(item, end_document=True)
        else:
            text, ends = cast("tuple[str, bool]", item)
            tokens.add(text, end_document=bool(ends))
        if count % 1_000_000 == 0:
            say(f"read {count:,} pieces, {len(tokens.ids):,} words")
    if tokens.ids and tokens.ids[-1] != _BOUNDARY:
        tokens.ids.append(_BOUNDARY)
        tokens.documents += 1
    words = np.frombuffer(tokens.ids, dtype=np.int32)
    if not (words != _BOUNDARY).any():
        raise CorpusIndexError("the corpus has no words to index")
    padded = np.concatenate([words, np.zeros(depth, dtype=np.int32)])
    say(f"sorting {int((words != _BOUNDARY).sum()):,} suffixes on {depth} words")
    suffixes = _suffix_array(padded, depth)
    dtype = np.int32 if padded.size < 2**31 else np.int64
    meta = {
        "format": INDEX_FORMAT,
        "depth": depth,
        "words": int((words != _BOUNDARY).sum()),
        "documents": tokens.documents,
        "vocabulary": len(tokens.vocabulary),
        "content": tokens.digest.hexdigest()[:16],
    }
    with atomic_directory(output, "corpus index") as tmp:
        np.save(tmp / "tokens.npy", padded)
        np.save(tmp / "suffixes.npy", suffixes.astype(dtype))
        words_by_id = sorted(tokens.vocabulary, key=tokens.vocabulary.__getitem__)
        (tmp / "vocabulary.txt").write_text("\n".join(words_by_id) + "\n", encoding="utf-8")
        (tmp / "index.json").write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    return open_index(output)


# --------------------------------------------------------------------------- querying


@dataclass(frozen=True)
class CorpusIndex:
    """An index written by :func:`build_index` (arrays memory-mapped).

    Attributes
    ----------
    path : Path
    depth : int
        Longest span a query can match.
    words, documents : int
    identity : str
        ``NAME@HASH`` of the indexed content and depth (for signatures).
    """

    path: Path
    depth: int
    words: int
    documents: int
    identity: str
    tokens: np.ndarray
    suffixes: np.ndarray
    vocabulary: dict[str, int]

    def ids(self, words: list[str]) -> np.ndarray:
        """The words' ids (unknown words never match)."""
        get = self.vocabulary.get
        return np.array([get(w, _UNKNOWN) for w in words], dtype=np.int64)

    def match_lengths(self, words: list[str]) -> np.ndarray:
        """For each position of ``words``, the length of the longest span starting there that
        occurs in the corpus (0 to ``depth``)."""
        ids = self.ids(words)
        size, depth = ids.size, self.depth
        if size == 0:
            return np.zeros(0, dtype=np.int64)
        query = np.full((size, depth), _PAST_END, dtype=np.int64)
        for k in range(min(depth, size)):
            query[: size - k, k] = ids[k:]
        offsets = np.arange(depth)
        total = self.suffixes.size
        low, high = np.zeros(size, dtype=np.int64), np.full(size, total, dtype=np.int64)
        while (active := low < high).any():
            middle = (low + high) // 2
            windows = self.tokens[self.suffixes[np.minimum(middle, total - 1)][:, None] + offsets]
            less = _lexicographically_less(windows, query)
            low = np.where(active & less, middle + 1, low)
            high = np.where(active & ~less, middle, high)
        best = np.zeros(size, dtype=np.int64)
        for neighbour in (low - 1, low):
            valid = (neighbour >= 0) & (neighbour < total)
            rows = self.tokens[self.suffixes[np.clip(neighbour, 0, total - 1)][:, None] + offsets]
            best = np.maximum(best, np.where(valid, _common_prefix(rows, query), 0))
        return best


def _lexicographically_less(rows: np.ndarray, query: np.ndarray) -> np.ndarray:
    differ = rows != query
    first = differ.argmax(axis=1)
    picked = np.arange(rows.shape[0])
    return np.asarray(differ.any(axis=1) & (rows[picked, first] < query[picked, first]))


def _common_prefix(rows: np.ndarray, query: np.ndarray) -> np.ndarray:
    equal = rows == query
    return np.asarray(np.where(equal.all(axis=1), rows.shape[1], equal.argmin(axis=1)))


@functools.lru_cache(maxsize=4)
def _opened(path: str, stamp: float) -> CorpusIndex:
    directory = Path(path)
    try:
        meta = json.loads((directory / "index.json").read_text(encoding="utf-8"))
        tokens = np.load(directory / "tokens.npy", mmap_mode="r")
        suffixes = np.load(directory / "suffixes.npy", mmap_mode="r")
        lines = (directory / "vocabulary.txt").read_text(encoding="utf-8").split("\n")
    except (OSError, ValueError) as exc:
        raise CorpusIndexError(
            f"{directory}: not a storyeval index ({exc}); build one with `storyeval index`"
        ) from None
    if meta.get("format") != INDEX_FORMAT:
        raise CorpusIndexError(f"{directory}: index format {meta.get('format')}, expected 1")
    vocabulary = {word: k for k, word in enumerate(lines[: meta["vocabulary"]], start=1)}
    identity = f"{directory.name}@{meta['content'][:10]}-d{meta['depth']}"
    return CorpusIndex(
        directory,
        int(meta["depth"]),
        int(meta["words"]),
        int(meta["documents"]),
        identity,
        tokens,
        suffixes,
        vocabulary,
    )


def open_index(path: str | Path) -> CorpusIndex:
    """Open an index directory (cached while its files are unchanged)."""
    directory = Path(path).resolve()
    marker = directory / "index.json"
    if not marker.is_file():
        raise CorpusIndexError(
            f"{path}: not a storyeval index (no index.json); build one with `storyeval index`"
        )
    return _opened(str(directory), marker.stat().st_mtime)


# --------------------------------------------------------------------------- measures


def novel_share(matches: np.ndarray, n: int) -> float:
    """The share of the story's n-grams absent from the corpus (nan for fewer than n words).

    >>> novel_share(np.array([3, 2, 0, 1, 0]), 2)
    0.5
    """
    grams = matches.size - n + 1
    if grams <= 0:
        return float("nan")
    return float((matches[:grams] < n).mean())


def uniqueness(matches: np.ndarray, span: int) -> float:
    """L-uniqueness: the share of words not covered by a corpus span of at least ``span``
    words (nan for an empty story).

    >>> uniqueness(np.array([5, 4, 3, 2, 1, 0, 0]), 5)  # one 5-word span covers 5 of 7
    0.2857142857142857
    """
    if matches.size == 0:
        return float("nan")
    starts = np.flatnonzero(matches >= span)
    change = np.zeros(matches.size + 1, dtype=np.int64)
    np.add.at(change, starts, 1)
    np.add.at(change, starts + matches[starts], -1)
    covered = np.cumsum(change[:-1]) > 0
    return float(1.0 - covered.mean())


def _check_span(index: CorpusIndex, span: int, what: str) -> None:
    if span > index.depth:
        raise CorpusIndexError(
            f"{what} {span} is longer than the index's depth ({index.depth} words); rebuild "
            f"it with `storyeval index --depth {span}` or more"
        )


IndexPath = Annotated[
    str | None,
    Opt("an index directory written by `storyeval index`", model=True, required=True),
]

_LIMITS = (
    "Exact matches of lower-cased words only: a paraphrase of the corpus counts as new "
    "(Lu et al. also match semantically). Depends entirely on the corpus: name it (the "
    "signature holds its hash) and do not index the stories being scored. Short stories "
    "give coarse values."
)


@metric(
    "ngram_novelty",
    description="Share of the story's word n-grams (n = 5 by default) that occur nowhere in "
    "a reference corpus (higher = more new text)",
    families=("novelty",),
    value_range=(0.0, 1.0),
    default=False,
    card=MetricCard(
        measures="The share of a story's word n-grams (lower-cased, punctuation dropped) "
        "that do not occur in a reference corpus indexed with `storyeval index` (a "
        "training set, human stories, any text): `novelty.index=DIR`, `ngram_novelty.n`.",
        read="0-1; higher = less of the story could have been copied from the corpus. "
        "Short n-grams are mostly found (common phrases), long ones mostly not: compare "
        "systems at one n, beside the human stories' value against the same corpus.",
        papers="McCoy et al. (2023) and Merrill et al. (2024) measure how much of a language "
        "model's text is new against its training data by n-gram novelty; generated text "
        "is less novel than human text at small n.",
        limits=_LIMITS,
        refs="McCoy et al. (2023), How much do language models copy from their training "
        "data?; Merrill et al. (2024), Evaluating n-gram novelty of language models.",
    ),
)
def ngram_novelty(
    texts: Texts,
    *,
    index: IndexPath = None,
    n: Annotated[int, Opt("n-gram length in words", minimum=1, maximum=64)] = 5,
    scoring: ScoringContext = INJECTED,
) -> Scores:
    """Per text, the share of its word n-grams absent from the indexed corpus."""
    corpus = scoring.given(index) or open_index(str(index))
    _check_span(corpus, n, "n")
    values = np.array(
        [novel_share(corpus.match_lengths(index_words(t)), n) for t in texts], dtype=np.float64
    )
    return Scores(values, fields={"index": corpus.identity})


@metric(
    "creativity_index",
    description="Creativity index: the L-uniqueness (share of words not covered by a span of "
    "at least L words found in a reference corpus) summed over L = 5..12 (higher = more new)",
    families=("novelty",),
    value_range=(0.0, None),
    default=False,
    card=MetricCard(
        measures="For each L from `min_span` to `max_span` (5-12 words by default), the "
        "share of the story's words that no span of at least L words occurring in the "
        "indexed corpus covers (L-uniqueness, exact match); the creativity index is their "
        "sum. `novelty.index=DIR` names the corpus (`storyeval index`).",
        read="0 to the number of L values (8 by default); higher = less of the story can be "
        "rebuilt from the corpus' spans. Compare systems with each other and with human "
        "stories against the same corpus.",
        papers="Lu et al. (2025) rebuild texts from web-scale corpora and find human "
        "writing scores about 66% higher than LLM writing on the creativity index, and "
        "instruction tuning lowers it.",
        limits=_LIMITS,
        refs="Lu et al. (2025), AI as humanity's Salieri: quantifying linguistic creativity "
        "of language models via systematic attribution of machine text against web text.",
    ),
)
def creativity_index(
    texts: Texts,
    *,
    index: IndexPath = None,
    min_span: Annotated[int, Opt("shortest span L in words", minimum=1, maximum=64)] = 5,
    max_span: Annotated[int, Opt("longest span L in words", minimum=1, maximum=64)] = 12,
    scoring: ScoringContext = INJECTED,
) -> Scores:
    """Per text, the sum of its L-uniqueness over L = min_span..max_span."""
    if min_span > max_span:
        raise CorpusIndexError(f"min_span ({min_span}) must not exceed max_span ({max_span})")
    corpus = scoring.given(index) or open_index(str(index))
    _check_span(corpus, max_span, "max_span")
    values = []
    for text in texts:
        matches = corpus.match_lengths(index_words(text))
        values.append(sum(uniqueness(matches, L) for L in range(min_span, max_span + 1)))
    return Scores(np.asarray(values, dtype=np.float64), fields={"index": corpus.identity})
