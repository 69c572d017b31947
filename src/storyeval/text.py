"""Sentence splitting, word tokenization and truncation at sentence ends.

Sentence splitting uses pysbd (rule-based, no model) by default, or a spaCy pipeline when
``method="spacy"``. Both are loaded once per process.
"""

from __future__ import annotations

import functools
import re
import warnings
from typing import Any, Literal

from storyeval.base.errors import StoryevalWarning
from storyeval.base.validation import check_choice

SplitMethod = Literal["pysbd", "spacy", "tokens"]
SPLIT_METHODS: tuple[str, ...] = ("pysbd", "spacy", "tokens")

_WORD_RE = re.compile(r"[A-Za-z0-9]+(?:['’][A-Za-z]+)*|[^\sA-Za-z0-9]", re.UNICODE)
_ALNUM_RE = re.compile(r"\w", re.UNICODE)


class TruncationWarning(StoryevalWarning):
    """A text could not be cut at a sentence end within the cap and was cut inside a sentence."""


@functools.lru_cache(maxsize=1)
def _pysbd_segmenter() -> Any:
    import pysbd

    return pysbd.Segmenter(language="en", clean=False)


@functools.lru_cache(maxsize=4096)
def _pysbd_sentences(text: str) -> tuple[str, ...]:
    """pysbd's sentences of ``text``, remembered: metrics, feature columns and reports split
    the same stories again and again, and pysbd takes about 50 ms for a story of 1,600 words
    (its rules build a regular expression per abbreviation found in the text)."""
    return tuple(_pysbd_segmenter().segment(text))


#: Tokenized text (as in ROCStories-derived corpora): "did n't", "friends ' house", "it ."
_TOKENIZED = re.compile(r"\w n't\b|\w '(?:s|re|ve|ll|d|m)?(?=\s)|\w [.!?,;:](?=\s|$)")
#: The spaces a detokenized copy drops: before clitics, a lone apostrophe and punctuation
_SPACE_BEFORE = re.compile(r" (?=n't\b|'(?:s|re|ve|ll|d|m)?(?=\s|$)|[.!?,;:](?=\s|$))")


def looks_tokenized(text: str) -> bool:
    """Whether ``text`` is tokenized (spaces before clitics and punctuation).

    >>> looks_tokenized("She did n't like it ."), looks_tokenized("She didn't like it.")
    (True, False)
    """
    return _TOKENIZED.search(text) is not None


def detokenized(text: str) -> str:
    """A tokenized text (``did n't``, ``home .``) without the spaces before clitics and
    punctuation; other text unchanged.

    >>> detokenized("she did n't go home . then she slept !")
    "she didn't go home. then she slept!"
    """
    return _detokenized(text)[0] if looks_tokenized(text) else text


def _detokenized(text: str) -> tuple[str, list[int]]:
    """``text`` without the spaces :data:`_SPACE_BEFORE` matches, and for every character
    left its index in ``text``."""
    dropped = {match.start() for match in _SPACE_BEFORE.finditer(text)}
    keep = [i for i in range(len(text)) if i not in dropped]
    return "".join(text[i] for i in keep), keep


def _split_tokenized(text: str) -> list[str]:
    """pysbd on a detokenized copy (spaced apostrophes read as quotes stop it splitting),
    the sentences cut from the original text."""
    import pysbd

    plain, keep = _detokenized(text)
    spans = pysbd.Segmenter(language="en", clean=False, char_span=True).segment(plain)
    pieces = []
    for span in spans:
        if span.end > span.start:
            pieces.append(text[keep[span.start] : keep[span.end - 1] + 1])
    return pieces


#: Placeholders of delexicalized corpora ("[MALE]"), left out when deciding whether a text
#: is lowercased
_PLACEHOLDER = re.compile(r"\[[A-Z_]+\]")
#: A sentence-final token of tokenized text: ".", "!", "?" or a run of them ("?!"), not "..."
_END_TOKEN = re.compile(r"[.!?]*[!?][.!?]*|\.")
_QUOTE_TOKENS = frozenset({'"', "''", "'", "”", "’", "``", "`"})
_CLOSING_QUOTES = frozenset({"''", "”", "’"})


def looks_lowercased_tokenized(text: str) -> bool:
    """Whether ``text`` is tokenized and lowercased, as UNION's release and other
    ROCStories-derived corpora are ("he had fun ! then he went home ."): a sentence then
    starts in lowercase, so only its end token marks it.

    >>> looks_lowercased_tokenized("he had fun ! then he left ."), looks_lowercased_tokenized("He had fun!")
    (True, False)
    >>> looks_lowercased_tokenized("[MALE] had fun ! then [FEMALE] left .")
    True
    """
    bare = _PLACEHOLDER.sub("", text)
    return looks_tokenized(text) and not any(ch.isupper() for ch in bare)


def _split_at_end_tokens(text: str) -> list[str]:
    """Sentences of tokenized text, cut after every ``.``/``!``/``?`` token (with the closing
    quotes that follow it), the original text kept as it is."""
    pieces: list[str] = []
    start = 0
    open_quotes = 0
    tokens = list(re.finditer(r"\S+", text))
    index = 0
    while index < len(tokens):
        token = tokens[index].group()
        if token in _QUOTE_TOKENS:
            open_quotes += 1
        if _END_TOKEN.fullmatch(token):
            end = tokens[index].end()
            while index + 1 < len(tokens) and tokens[index + 1].group() in _QUOTE_TOKENS:
                quote = tokens[index + 1].group()
                if quote not in _CLOSING_QUOTES and open_quotes % 2 == 0:
                    break  # an opening quote: it starts the next sentence
                open_quotes += 1
                index += 1
                end = tokens[index].end()
            pieces.append(text[start:end])
            start, open_quotes = end, 0
        index += 1
    if text[start:].strip():
        pieces.append(text[start:])
    return pieces


def split_sentences(
    text: str, *, method: SplitMethod = "pysbd", spacy_model: str | None = None
) -> list[str]:
    """Split a text into sentences, stripped of surrounding whitespace; empty text gives ``[]``.

    Parameters
    ----------
    text : str
        The text to split.
    method : {"pysbd", "spacy", "tokens"}
        ``pysbd`` is rule-based and fast; ``spacy`` uses the parser of a spaCy pipeline
        (``spacy_model``, or the offline default from :func:`storyeval.models.load_spacy`);
        ``tokens`` cuts after every whitespace-separated ``.``, ``!`` or ``?`` (tokenized
        text).

    Examples
    --------
    >>> split_sentences("Mara opened the door. It was dark! Was anyone there?")
    ['Mara opened the door.', 'It was dark!', 'Was anyone there?']
    >>> split_sentences("   ")
    []
    >>> split_sentences("Kim went to her friends ' house . She did n't stay .")
    ["Kim went to her friends ' house .", "She did n't stay ."]

    Tokenized text (spaces before clitics and punctuation) is split on a detokenized copy and
    the sentences are cut from the original, which is kept as it is. Tokenized *lowercased*
    text (:func:`looks_lowercased_tokenized`) has no capital to mark a sentence start, so it is
    cut after every ``.``, ``!`` or ``?`` token instead (``method="tokens"`` asks for that on
    any text):

    >>> split_sentences("he had fun ! then he went home . it was late .")
    ['he had fun !', 'then he went home .', 'it was late .']
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str; got {type(text).__name__}")
    check_choice(method, SPLIT_METHODS, "method")
    if not text.strip():
        return []
    if method == "spacy":
        from storyeval.models import load_spacy

        doc = load_spacy(spacy_model)(text)
        pieces = [sent.text for sent in doc.sents]
    elif method == "tokens" or looks_lowercased_tokenized(text):
        pieces = _split_at_end_tokens(text)
    elif looks_tokenized(text):
        pieces = _split_tokenized(text)
    else:
        pieces = list(_pysbd_sentences(text))
    return [piece.strip() for piece in pieces if piece.strip()]


def tokenize_words(text: str, *, lowercase: bool = False, punctuation: bool = True) -> list[str]:
    """Split a text into word tokens (contractions kept whole) and punctuation marks.

    Examples
    --------
    >>> tokenize_words("Don't go, Ana!")
    ["Don't", 'go', ',', 'Ana', '!']
    >>> tokenize_words("Don't go, Ana!", lowercase=True, punctuation=False)
    ["don't", 'go', 'ana']
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str; got {type(text).__name__}")
    tokens = _WORD_RE.findall(text)
    if not punctuation:
        tokens = [tok for tok in tokens if _ALNUM_RE.search(tok)]
    if lowercase:
        tokens = [tok.lower() for tok in tokens]
    return tokens


def count_words(text: str) -> int:
    """Number of whitespace-separated words, the unit the source papers truncate by.

    >>> count_words("One two  three.")
    3
    """
    return len(text.split())


def truncate(
    text: str,
    *,
    max_words: int | None = None,
    max_chars: int | None = None,
    method: SplitMethod = "pysbd",
) -> str:
    """Keep the longest run of whole leading sentences within ``max_words`` words or
    ``max_chars`` characters (Karpinska et al. cut at 150 words, Callan & Foster at 400
    characters, both at a full sentence).

    If even the first sentence exceeds the cap, it is cut at the last word that fits and a
    :class:`TruncationWarning` says so: nothing is truncated silently.

    Examples
    --------
    >>> truncate("One two three. Four five six. Seven.", max_words=6)
    'One two three. Four five six.'
    >>> truncate("One two three. Four five six.", max_chars=20)
    'One two three.'
    """
    if (max_words is None) == (max_chars is None):
        raise ValueError("give exactly one of max_words or max_chars")
    cap = max_words if max_words is not None else max_chars
    assert cap is not None  # for mypy: exactly one is set
    if not isinstance(cap, int) or isinstance(cap, bool) or cap < 1:
        raise ValueError(f"the cap must be a positive integer; got {cap!r}")

    def size(piece: str) -> int:
        return count_words(piece) if max_words is not None else len(piece)

    if size(text.strip()) <= cap:
        return text.strip()
    kept: list[str] = []
    for sentence in split_sentences(text, method=method):
        candidate = " ".join([*kept, sentence])
        if size(candidate) > cap:
            break
        kept.append(sentence)
    if kept:
        return " ".join(kept)
    first = split_sentences(text, method=method)[0]
    warnings.warn(
        f"the first sentence is longer than the cap ({cap} {'words' if max_words else 'characters'}); "
        "it was cut inside the sentence",
        TruncationWarning,
        stacklevel=2,
    )
    if max_words is not None:
        return " ".join(first.split()[:cap])
    cut = first[:cap]
    return cut.rsplit(" ", 1)[0] if " " in cut else cut
