"""Word-level helpers: WordNet antonyms, an antonym file, verb and adjective inflection, case
matching."""

from __future__ import annotations

import functools
import hashlib
import warnings
from pathlib import Path

_WN_POS = {"NOUN": "n", "VERB": "v", "ADJ": "a", "ADV": "r"}


@functools.lru_cache(maxsize=1)
def _wordnet() -> object:
    """NLTK's WordNet reader for English look-ups, one a process.

    NLTK's own ``nltk.corpus.wordnet`` spends half its start-up mapping WordNet 3.0's synsets
    onto the loaded version for the Open Multilingual Wordnet (it maps 3.0 onto itself: its
    version check compares "3.0" with the corpus name). storyeval reads English synsets only,
    which never consult that map, so this reader skips it: the same synsets and lemmas, and a
    process's first look-up in 3.6 s rather than 7.9 (``benchmarks/bench_fast_paths.py``)."""
    import nltk
    from nltk.corpus.reader.wordnet import WordNetCorpusReader

    class _EnglishWordNet(WordNetCorpusReader):
        def map_wn(self, version: str = "wordnet") -> None:
            return None

    try:
        root = nltk.data.find("corpora/wordnet")
    except LookupError as exc:
        from storyeval.base.errors import ModelLoadError

        raise ModelLoadError(
            "WordNet is not installed for NLTK: run `make setup` (it copies Debian's "
            "wordnet-base into the venv) or `python -m nltk.downloader wordnet`"
        ) from exc
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "multilingual functions are not available": unused
        return _EnglishWordNet(root, None)


@functools.lru_cache(maxsize=100_000)
def antonyms(lemma: str, upos: str) -> tuple[str, ...]:
    """WordNet antonyms of ``lemma`` as a word of universal POS ``upos``, most frequent
    sense first, without duplicates; multi-word antonyms use spaces.

    Direct antonyms (WordNet's antonymy relation between lemmas) are used when there are
    any; for an adjective without one, the indirect antonyms through its head adjective
    ("glad" is similar to "happy", whose antonym is "unhappy").

    Examples
    --------
    >>> antonyms("love", "VERB")
    ('hate',)
    >>> antonyms("cold", "ADJ")
    ('hot',)
    >>> antonyms("table", "NOUN")
    ()
    """
    pos = _WN_POS.get(upos)
    if pos is None:
        return ()
    wordnet = _wordnet()
    lemma = lemma.lower()
    direct: list[str] = []
    indirect: list[str] = []
    synsets = wordnet.synsets(lemma, pos=pos)  # type: ignore[attr-defined]
    if pos == "a":
        synsets += [
            s
            for s in wordnet.synsets(lemma, pos="s")  # type: ignore[attr-defined]
            if s not in synsets
        ]
    for synset in synsets:
        for word in synset.lemmas():
            if word.name().lower() != lemma:
                continue
            direct += [a.name().replace("_", " ") for a in word.antonyms()]
        if pos == "a" and synset.pos() == "s":
            for head in synset.similar_tos():
                for word in head.lemmas():
                    indirect += [a.name().replace("_", " ") for a in word.antonyms()]
    chosen = direct or indirect
    return tuple(dict.fromkeys(word for word in chosen if word.lower() != lemma))


NEGATED_RELATIONS = ("/r/antonym", "/r/notdesires", "/r/notcapableof", "/r/nothasproperty")
"""The ConceptNet relations UNION (Guan & Huang 2020, section 3.2) reads as antonymy: Antonym
and the negated relations NotDesires, NotCapableOf and NotHasProperty (both directions)."""


@functools.lru_cache(maxsize=8)
def _antonym_file(path: str, mtime_ns: int) -> tuple[dict[str, tuple[str, ...]], str]:
    from storyeval.base.errors import DataFileError, DataProblem

    table: dict[str, list[str]] = {}
    problems: list[DataProblem] = []
    raw = Path(path).read_bytes()
    digest = hashlib.sha256(raw).hexdigest()[:12]
    for number, line in enumerate(raw.decode("utf-8-sig").splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = [part.strip() for part in line.split("|||")]
        if len(parts) != 3 or not parts[0] or not parts[2]:
            problems.append(DataProblem(path, number, "expected 'word|||/r/RELATION|||word'"))
            continue
        word, relation, other = parts
        if relation.rstrip("/").lower() not in NEGATED_RELATIONS:
            continue  # other ConceptNet relations may share the file
        word, other = (w.replace("_", " ").lower() for w in (word, other))
        if word != other:
            table.setdefault(word, []).append(other)
            table.setdefault(other, []).append(word)  # antonymy is symmetric
    if problems:
        raise DataFileError(problems)
    return {w: tuple(dict.fromkeys(a)) for w, a in table.items()}, digest


def file_antonyms(path: str | Path, lemma: str) -> tuple[str, ...]:
    """Antonyms of ``lemma`` in a ConceptNet-style file (the UNION repository's format: one
    ``word|||/r/RELATION|||word`` per line): the words it is linked to by ``/r/Antonym`` or a
    negated relation (``/r/NotDesires``, ``/r/NotCapableOf``, ``/r/NotHasProperty``, as UNION
    reads them); other relations and ``#`` lines are skipped, ``_`` means a space, both
    directions count.

    Raises
    ------
    FileNotFoundError
        If the file does not exist.
    DataFileError
        ``FILE:LINE: reason`` for a line without three ``|||`` fields.
    """
    file_path = Path(path)
    if not file_path.is_file():
        raise FileNotFoundError(f"{file_path}: no such antonym file")
    table, _ = _antonym_file(str(file_path), file_path.stat().st_mtime_ns)
    return table.get(lemma.lower(), ())


def antonym_file_identity(path: str | Path) -> str:
    """``name@sha256[:12]`` of an antonym file, for signatures."""
    file_path = Path(path)
    if not file_path.is_file():
        raise FileNotFoundError(f"{file_path}: no such antonym file")
    _, digest = _antonym_file(str(file_path), file_path.stat().st_mtime_ns)
    return f"{file_path.name}@{digest}"


def inflect(lemma: str, tag: str) -> str | None:
    """``lemma`` inflected for Penn tag ``tag`` (``VBD``, ``VBZ``, ``NNS``, ``JJR``...), or
    ``None`` when the form is unknown. Multi-word lemmas inflect their first word
    ("fall asleep" -> "fell asleep").

    >>> inflect("go", "VBD"), inflect("go", "VBZ"), inflect("hate", "VBG"), inflect("day", "NNS")
    ('went', 'goes', 'hating', 'days')
    """
    head, _, rest = lemma.partition(" ")
    if tag in ("VB", "VBP", "NN", "JJ", "RB") and not (head == "be" and tag == "VBP"):
        return lemma
    from lemminflect import getInflection

    forms = getInflection(head, tag=tag)
    if not forms:
        return None
    return f"{forms[0]} {rest}".strip() if rest else forms[0]


def verb_lemma(word: str, fallback: str | None = None) -> str:
    """The base form of a verb form ("went" -> "go"); spaCy's lemma is the fallback."""
    from lemminflect import getLemma

    lemmas = getLemma(word.lower(), upos="VERB")
    if lemmas:
        return str(lemmas[0])
    return (fallback or word).lower()


def match_case(template: str, word: str) -> str:
    """Give ``word`` the capitalization pattern of ``template``.

    >>> match_case("Happy", "sad"), match_case("HAPPY", "sad"), match_case("happy", "Sad")
    ('Sad', 'SAD', 'sad')
    """
    if template.isupper() and len(template) > 1:
        return word.upper()
    if template[:1].isupper():
        return word[:1].upper() + word[1:]
    return word[:1].lower() + word[1:]
