"""Word-level helpers: WordNet antonyms, verb and adjective inflection, case matching."""

from __future__ import annotations

import functools

_WN_POS = {"NOUN": "n", "VERB": "v", "ADJ": "a", "ADV": "r"}


def _wordnet() -> object:
    from nltk.corpus import wordnet

    try:
        wordnet.ensure_loaded()
    except LookupError as exc:
        from storyeval.errors import ModelLoadError

        raise ModelLoadError(
            "WordNet is not installed for NLTK: run `make setup` (it copies Debian's "
            "wordnet-base into the venv) or `python -m nltk.downloader wordnet`"
        ) from exc
    return wordnet


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
