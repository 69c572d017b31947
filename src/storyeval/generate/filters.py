"""Filters applied to generated stories: copying a priming text, and offensive words.

A filtered story is dropped and generated again; :func:`~storyeval.generate.generate_stories`
counts the drops per story (``dropped_copy``, ``dropped_offensive``), as Clark et al. (2021)
report how many GPT-2 and GPT-3 stories they regenerated because they copied a priming text.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from storyeval.base.errors import DataFileError, DataProblem

#: Overlap above which a generated text counts as a copy of a priming text (Clark 2021, §6.2.2:
#: "We removed generated stories that directly copied a priming text (with > 80% overlap)").
COPY_THRESHOLD = 0.8
COPY_NGRAM = 3

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)*")


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower().replace("’", "'"))


def copy_overlap(text: str, source: str, *, n: int = COPY_NGRAM) -> float:
    """Share of ``text``'s words that lie inside a word ``n``-gram also found in ``source``.

    Words are lower-cased alphanumeric tokens (punctuation ignored). A verbatim copy scores
    1.0, a copy with one changed word loses at most ``n`` words' worth of coverage around the
    change, and an unrelated text scores near 0 (shared function words alone do not form
    shared trigrams). A text shorter than ``n`` words is compared with ``n`` equal to its
    length.

    Parameters
    ----------
    text : str
        The generated text.
    source : str
        The text it may have copied (a priming text).
    n : int
        The n-gram length; 3 by default.

    Returns
    -------
    float
        In [0, 1].

    Raises
    ------
    ValueError
        If ``text`` has no words or ``n`` < 1.

    Notes
    -----
    Clark et al. (2021) drop stories with "> 80% overlap" with a priming text without
    defining overlap; storyeval uses n-gram coverage of the generated text so that a copy
    that appends or alters a few words is still caught, while a story that only shares a
    stock opening ("Once upon a time") is not.

    Examples
    --------
    >>> copy_overlap("the cat sat on the mat", "yesterday the cat sat on the mat again")
    1.0
    >>> copy_overlap("the cat sat on the mat", "a dog slept under a tree")
    0.0
    >>> round(copy_overlap("one two three four five six", "one two three four X Y"), 3)
    0.667
    """
    if n < 1:
        raise ValueError(f"n must be >= 1; got {n}")
    words = _words(text)
    if not words:
        raise ValueError("text has no words to compare")
    size = min(n, len(words))
    source_words = _words(source)
    grams = {tuple(source_words[i : i + size]) for i in range(len(source_words) - size + 1)}
    covered = [False] * len(words)
    for i in range(len(words) - size + 1):
        if tuple(words[i : i + size]) in grams:
            for j in range(i, i + size):
                covered[j] = True
    return sum(covered) / len(words)


def max_copy_overlap(text: str, sources: Sequence[str], *, n: int = COPY_NGRAM) -> float:
    """The largest :func:`copy_overlap` of ``text`` with any of ``sources`` (0.0 if none)."""
    return max((copy_overlap(text, source, n=n) for source in sources), default=0.0)


_TERM = re.compile(r"^[\w'’-]+(?: [\w'’-]+)*\*?$", re.UNICODE)
_DEFAULT_LIST = "offensive_words.txt"


@dataclass(frozen=True)
class WordListFilter:
    """A case-insensitive whole-word filter built from a list of terms.

    Terms are single words or phrases (words separated by one space, matching any run of
    whitespace); a trailing ``*`` matches any word that begins with the term (``curse*``
    matches ``cursed``). Use :meth:`from_file` for a list file and :meth:`default` for the
    small list shipped with storyeval.

    Examples
    --------
    >>> f = WordListFilter.from_terms(["darn*", "heck", "good grief"], name="mild")
    >>> f.find("Darned if I know. Good  grief, what the HECK!")
    ['Darned', 'Good  grief', 'HECK']
    >>> f.find("Heckle the checkers.")
    []
    """

    name: str
    terms: tuple[str, ...]
    identity: str

    @classmethod
    def from_terms(cls, terms: Iterable[str], *, name: str = "custom") -> WordListFilter:
        """A filter of the given terms (``name`` labels it in signatures)."""
        cleaned: list[str] = []
        for term in terms:
            term = " ".join(term.strip().lower().split())
            if not term:
                continue
            if not _TERM.match(term):
                raise ValueError(
                    f"word-list term {term!r} must be words separated by spaces, with an optional "
                    "trailing '*'"
                )
            cleaned.append(term)
        if not cleaned:
            raise ValueError("the word list holds no terms")
        unique = tuple(sorted(set(cleaned)))
        digest = hashlib.sha256("\n".join(unique).encode()).hexdigest()[:12]
        return cls(name=name, terms=unique, identity=f"{name}@{digest}")

    @classmethod
    def from_file(cls, path: str | Path) -> WordListFilter:
        """Read one term per line; blank lines and lines starting with ``#`` are ignored.

        Raises
        ------
        DataFileError
            Listing every line whose term is not valid, as ``FILE:LINE: reason``.
        """
        file_path = Path(path)
        if not file_path.exists():
            raise FileNotFoundError(f"{file_path}: no such file")
        try:
            lines = file_path.read_text(encoding="utf-8").splitlines()
        except UnicodeDecodeError as exc:
            raise DataFileError.single(file_path, 1, f"not UTF-8 text: {exc.reason}") from None
        terms: list[str] = []
        problems: list[DataProblem] = []
        for number, line in enumerate(lines, start=1):
            term = line.strip()
            if not term or term.startswith("#"):
                continue
            normal = " ".join(term.lower().split())
            if not _TERM.match(normal):
                problems.append(
                    DataProblem(
                        str(file_path),
                        number,
                        f"{term!r} is not a term: use words separated by spaces, with an "
                        "optional trailing '*'",
                    )
                )
                continue
            terms.append(normal)
        if problems:
            raise DataFileError(problems)
        if not terms:
            raise DataFileError.single(file_path, 1, "the word list holds no terms")
        return cls.from_terms(terms, name=file_path.name)

    @classmethod
    def default(cls) -> WordListFilter:
        """The small list shipped with storyeval (profanity, sexual terms and slurs)."""
        text = (
            resources.files("storyeval.generate")
            .joinpath("data", _DEFAULT_LIST)
            .read_text(encoding="utf-8")
        )
        terms = [
            line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")
        ]
        return cls.from_terms(terms, name="storyeval-default")

    @property
    def pattern(self) -> re.Pattern[str]:
        """The compiled pattern matching any term as a whole word, case-insensitively."""
        return _compile(self.terms)

    def find(self, text: str) -> list[str]:
        """Every match of a listed term in ``text``, in order (empty when the text is clean)."""
        return [match.group(0) for match in self.pattern.finditer(text.replace("’", "'"))]


_PATTERNS: dict[tuple[str, ...], re.Pattern[str]] = {}


def _compile(terms: tuple[str, ...]) -> re.Pattern[str]:
    if terms not in _PATTERNS:
        alternatives = []
        for term in sorted(terms, key=len, reverse=True):
            prefix = term.endswith("*")
            words = term.rstrip("*").replace("’", "'").split(" ")
            body = r"\s+".join(re.escape(word) for word in words)
            alternatives.append(body + (r"[\w']*" if prefix else ""))
        _PATTERNS[terms] = re.compile(
            r"(?<![\w'])(?:" + "|".join(alternatives) + r")(?!\w)", re.IGNORECASE
        )
    return _PATTERNS[terms]
