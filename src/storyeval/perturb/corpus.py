"""Corpus-level resources the techniques share: parses, keyword frequencies, sentence pool.

Substitution samples replacement keywords "from all the keywords of the same part-of-speech,
according to the mention frequency" and replacement sentences "from the rest of stories in the
dataset" (Guan & Huang 2020, 3.2): both need the whole corpus, which
:class:`PerturbationCorpus` holds.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from storyeval.text import split_sentences

#: Penn Treebank tags of keywords (content words: nouns, verbs, adjectives, adverbs).
KEYWORD_TAGS = frozenset(
    {"NN", "NNS", "VB", "VBD", "VBG", "VBN", "VBP", "VBZ", "JJ", "JJR", "JJS", "RB", "RBR", "RBS"}
)
_KEYWORD_POS = {"NOUN": "n", "VERB": "v", "ADJ": "a", "ADV": "r"}
#: Negation words are left to the negation technique, never substituted.
NEGATION_WORDS = frozenset({"not", "n't", "never", "no", "nor", "neither", "nobody", "nothing"})

_SPACE_RE = re.compile(r"\s+")


@dataclass(frozen=True)
class SplitText:
    """A text cut into sentences, with the whitespace between them kept for re-joining."""

    sentences: list[str]
    separators: list[str]

    def join(self, sentences: Sequence[str]) -> str:
        """Join ``sentences`` (same count as the original) with the original separators."""
        if len(sentences) != len(self.sentences):
            return " ".join(sentences)
        pieces: list[str] = []
        for index, sentence in enumerate(sentences):
            if index:
                pieces.append(self.separators[index - 1])
            pieces.append(sentence)
        return "".join(pieces)


def split_text(text: str) -> SplitText:
    """Split with :func:`storyeval.text.split_sentences`, keeping inter-sentence whitespace.

    >>> parts = split_text("One.\\n\\nTwo!  Three?")
    >>> parts.sentences, parts.separators
    (['One.', 'Two!', 'Three?'], ['\\n\\n', '  '])
    >>> parts.join(["Three?", "One.", "Two!"])
    'Three?\\n\\nOne.  Two!'
    """
    sentences = split_sentences(text)
    separators: list[str] = []
    position = 0
    for index, sentence in enumerate(sentences):
        found = text.find(sentence, position)
        if found < 0:  # the splitter changed the text; fall back to single spaces
            return SplitText(sentences, [" "] * max(0, len(sentences) - 1))
        if index:
            gap = text[position:found]
            separators.append(gap if gap and not gap.strip() else " ")
        position = found + len(sentence)
    return SplitText(sentences, separators)


@functools.lru_cache(maxsize=200_000)
def _in_wordnet(lemma: str, pos: str) -> bool:
    from storyeval.perturb.lexicon import _wordnet

    wordnet: Any = _wordnet()
    return bool(wordnet.synsets(lemma, pos=pos))


def is_keyword(token: Any) -> bool:
    """Whether a spaCy token is a keyword: an alphabetic content word (noun, verb, adjective
    or adverb; not an auxiliary, proper noun, stop word or negation) whose lemma is a WordNet
    concept. WordNet stands in for the ConceptNet concept list of Guan & Huang (2020)."""
    pos = _KEYWORD_POS.get(token.pos_)
    if pos is None or token.tag_ not in KEYWORD_TAGS:
        return False
    text = token.text
    if not text.isalpha() or len(text) < 2 or token.is_stop:
        return False
    if text.lower() in NEGATION_WORDS or token.dep_ == "neg":
        return False
    return _in_wordnet(token.lemma_.lower(), pos)


@dataclass(frozen=True)
class ContractionStyle:
    """How a corpus writes negations: ``contracted`` ("n't"), ``spaced`` (of those, written
    " n't" as tokenized corpora do) and ``full`` ("not").

    >>> style = ContractionStyle.of(["She did n't go .", "He was not there ."])
    >>> style.tokenized, style.probability(0.5)
    (True, 0.5)
    >>> ContractionStyle.of(["He was not there.", "It is not."]).probability(0.5)
    0.0
    """

    contracted: int = 0
    spaced: int = 0
    full: int = 0

    @classmethod
    def of(cls, texts: Iterable[str]) -> ContractionStyle:
        """Count the negation forms of ``texts``."""
        contracted = spaced = full = 0
        for text in texts:
            contracted += len(_CONTRACTED_RE.findall(text))
            spaced += len(_SPACED_RE.findall(text))
            full += len(_FULL_RE.findall(text))
        return cls(contracted, spaced, full)

    @property
    def tokenized(self) -> bool:
        """Whether the corpus writes "n't" as a separate token ("did n't")."""
        return self.spaced > self.contracted - self.spaced

    def probability(self, requested: float | None) -> float:
        """The probability of writing an added negation "n't": ``requested`` (None: the
        corpus's own share), except that a form the corpus never uses is never written."""
        if self.contracted == 0 and self.full > 0:
            return 0.0
        if self.full == 0 and self.contracted > 0:
            return 1.0
        if requested is None:
            total = self.contracted + self.full
            return self.contracted / total if total else 0.5
        return requested

    def render(self, sentence: str) -> str:
        """``sentence`` with its "n't" spaced as the corpus writes it."""
        return _ATTACHED_RE.sub(r"\1 n't", sentence) if self.tokenized else sentence

    def describe(self) -> str:
        """For signatures: ``tokenized,n't=3,not=40``."""
        kind = "tokenized" if self.tokenized else "plain"
        return f"{kind},n't={self.contracted},not={self.full}"


_CONTRACTED_RE = re.compile(r"n't\b", re.IGNORECASE)
_SPACED_RE = re.compile(r"\s n't\b|\w n't\b", re.IGNORECASE)
_ATTACHED_RE = re.compile(r"(\w)n't\b", re.IGNORECASE)
_FULL_RE = re.compile(r"\bnot\b", re.IGNORECASE)


@dataclass
class CorpusCounts:
    """What :class:`PerturbationCorpus` needs of some stories, additive over parts of a
    corpus (so workers can count their partitions and a driver sum them): each story's
    sentences, the keyword mentions per Penn tag, and the negation forms."""

    splits: dict[str, SplitText]
    keyword_counts: dict[str, Counter[str]]
    style: ContractionStyle


def count_corpus(
    stories: Iterable[tuple[str, str]], nlp: Any, progress: bool = False
) -> CorpusCounts:
    """The :class:`CorpusCounts` of ``(id, text)`` stories (each distinct sentence parsed once)."""
    splits: dict[str, SplitText] = {}
    texts = []
    for story_id, text in stories:
        splits[str(story_id)] = split_text(text)
        texts.append(text)
    pool = [sentence for _, split in sorted(splits.items()) for sentence in split.sentences]
    unique = list(dict.fromkeys(pool))
    docs: Iterable[Any] = nlp.pipe(unique, batch_size=256, disable=["ner"])
    if progress and len(unique) > 2000:
        from tqdm import tqdm

        docs = tqdm(docs, total=len(unique), desc="parsing", unit="sent", leave=False)
    by_sentence: dict[str, list[tuple[str, str]]] = {}
    for sentence, doc in zip(unique, docs, strict=True):
        by_sentence[sentence] = [
            (token.tag_, token.text.lower()) for token in doc if is_keyword(token)
        ]
    keyword_counts: dict[str, Counter[str]] = {}
    for sentence in pool:
        for tag, word in by_sentence[sentence]:
            keyword_counts.setdefault(tag, Counter())[word] += 1
    return CorpusCounts(splits, keyword_counts, ContractionStyle.of(texts))


class PerturbationCorpus:
    """The stories being perturbed, parsed once, with keyword and sentence pools.

    Parameters
    ----------
    stories : sequence of (id, text) pairs
        The stories (their evaluated text, without the prompt).
    nlp : spaCy Language, optional
        The pipeline for POS tags and dependencies (default
        :func:`storyeval.models.load_spacy`).
    progress : bool
        Show a progress bar while parsing a large corpus.
    counts : sequence of CorpusCounts, optional
        The counts of the corpus's parts, made elsewhere (:func:`count_corpus` on each
        partition); ``stories`` is then not read.

    Attributes
    ----------
    keyword_counts : dict of str to Counter
        Per Penn tag, how often each keyword form (lower-cased) is mentioned in the corpus.
    sentences : dict of str to list of str
        The sentences of each story, by story id.
    """

    def __init__(
        self,
        stories: Iterable[tuple[str, str]],
        *,
        nlp: Any = None,
        progress: bool = False,
        counts: Sequence[CorpusCounts] | None = None,
    ) -> None:
        if nlp is None:
            from storyeval.models import load_spacy

            nlp = load_spacy()
        self.nlp = nlp
        parts = list(counts) if counts is not None else [count_corpus(stories, nlp, progress)]
        self.splits: dict[str, SplitText] = {}
        #: how the corpus writes negations (perturbations follow it: no surface cue)
        self.style = ContractionStyle()
        self.keyword_counts: dict[str, Counter[str]] = {}
        for part in parts:
            self.splits.update(part.splits)
            self.style = ContractionStyle(
                self.style.contracted + part.style.contracted,
                self.style.spaced + part.style.spaced,
                self.style.full + part.style.full,
            )
            for tag, found in part.keyword_counts.items():
                self.keyword_counts.setdefault(tag, Counter()).update(found)
        self._sentence_pool: list[tuple[str, str]] = [  # sorted: independent of input order
            (story_id, sentence)
            for story_id, split in sorted(self.splits.items())
            for sentence in split.sentences
        ]
        self._parse = functools.lru_cache(maxsize=8192)(self._parse_uncached)

    @property
    def sentences(self) -> dict[str, list[str]]:
        """The sentences of story ``story_id``."""
        return {story_id: split.sentences for story_id, split in self.splits.items()}

    def __len__(self) -> int:
        return len(self.splits)

    def split(self, story_id: str, text: str) -> SplitText:
        """The sentences of a story (from the corpus when known, else split now)."""
        known = self.splits.get(story_id)
        return known if known is not None else split_text(text)

    def parse(self, sentence: str) -> Any:
        """A spaCy parse of one sentence (cached)."""
        return self._parse(sentence)

    def _parse_uncached(self, sentence: str) -> Any:
        return self.nlp(sentence, disable=["ner"])

    def other_sentences(self, story_id: str) -> list[tuple[str, str]]:
        """``(story id, sentence)`` for every sentence of the other stories."""
        return [(sid, sentence) for sid, sentence in self._sentence_pool if sid != story_id]

    def has_other_stories(self, story_id: str) -> bool:
        """Whether the corpus has a story other than ``story_id`` (to borrow sentences from)."""
        return any(sid != story_id for sid in self.splits)

    def keyword_candidates(self, tag: str, exclude: set[str]) -> tuple[list[str], list[int]]:
        """Keyword forms with Penn tag ``tag`` and their mention counts, minus ``exclude``."""
        counts = self.keyword_counts.get(tag, Counter())
        words = [word for word in sorted(counts) if word not in exclude]
        return words, [counts[word] for word in words]
