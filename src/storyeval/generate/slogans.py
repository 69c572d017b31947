"""Skeleton-constrained slogan suggestions (Clark 2021, section 2.5.2, after BRAINSUP, Özbal
et al. 2013).

1. **Skeletons** come from a corpus of short lines (quotations, proverbs, slogans; storyeval
   ships a small one of public-domain sayings and lines written for it): every content word
   (noun, proper noun, verb, adjective, adverb) becomes a slot tagged with its Penn
   part-of-speech tag, e.g. "Fresh bread makes happy mornings." gives "* * * * *." with the
   tags JJ NN VBZ JJ NNS (the thesis' Figure 2.4 shows the same for a longer line).
2. **Target words** are sampled (seeded) from the content words of the writer's keywords and
   draft.
3. **Skeletons are chosen** whose slots can hold the targets (same part of speech; a target is
   inflected to the slot's tag with lemminflect, e.g. "test" into a VBG slot as "testing");
   three of them, the ones that hold most targets first.
4. **Slots are filled by beam search** over candidates (the targets and the corpus's own
   content words of the slot's tag), maximising ``coverage * targets used + lm * mean token
   log-probability of the text so far (the causal LM: grammaticality) + diversity * share of
   distinct content words``.

Examples
--------
>>> from storyeval.models import load_spacy
>>> bank = SkeletonBank.from_lines(["Actions speak louder than words."], nlp=load_spacy())
>>> bank.skeletons[0].pattern
'* * * than *.'
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from storyeval.base.errors import StoryevalError

#: spaCy's coarse tags of content words (the slots of a skeleton).
CONTENT_POS = frozenset({"NOUN", "PROPN", "VERB", "ADJ", "ADV"})
#: Penn tags merged for slots (proper nouns fill like common nouns).
_TAG_MERGE = {"NNP": "NN", "NNPS": "NNS"}
#: Penn tags by part of speech (a target may be inflected into any tag of its part of speech).
_POS_OF_TAG = {
    **dict.fromkeys(("NN", "NNS"), "noun"),
    **dict.fromkeys(("VB", "VBD", "VBG", "VBN", "VBP", "VBZ"), "verb"),
    **dict.fromkeys(("JJ", "JJR", "JJS"), "adj"),
    **dict.fromkeys(("RB", "RBR", "RBS"), "adv"),
}
SHIPPED_LINES = "slogan_lines.txt"


@dataclass(frozen=True)
class Skeleton:
    """A line with its content words replaced by part-of-speech slots.

    Attributes
    ----------
    words : tuple of str
        The line's tokens; slots keep the original word (for reference only).
    tags : tuple of str or None
        The Penn tag of each slot, None for a fixed word.
    spaces : tuple of str
        The whitespace after each token.
    source : str
        The original line.
    """

    words: tuple[str, ...]
    tags: tuple[str | None, ...]
    spaces: tuple[str, ...]
    source: str

    @property
    def slots(self) -> list[int]:
        """The token positions of the slots."""
        return [i for i, tag in enumerate(self.tags) if tag is not None]

    @property
    def pattern(self) -> str:
        """The skeleton as text, slots as ``*``."""
        return self.render({})

    @property
    def tagged(self) -> str:
        """The skeleton as text, each slot as its Penn tag (``[NNS] speak [JJR] than [NNS].``)."""
        return self.render({i: f"[{tag}]" for i, tag in enumerate(self.tags) if tag is not None})

    def render(self, fillers: dict[int, str], *, upto: int | None = None) -> str:
        """The text with ``fillers`` in their slots (``*`` where none), tokens before ``upto``
        only when given; the first word keeps the line's capitalisation."""
        end = len(self.words) if upto is None else upto
        parts = []
        for i in range(end):
            word = fillers.get(i, "*") if self.tags[i] is not None else self.words[i]
            if i == 0 and word != "*" and self.words[0][:1].isupper():
                word = word[:1].upper() + word[1:]
            parts.append(word + (self.spaces[i] if i < end - 1 else ""))
        return "".join(parts)


def _slot_tag(token: Any) -> str | None:
    if token.pos_ not in CONTENT_POS or not token.text.isalpha():
        return None
    tag = _TAG_MERGE.get(token.tag_, token.tag_)
    return tag if tag in _POS_OF_TAG else None


def extract_skeleton(line: str, nlp: Any) -> Skeleton:
    """The skeleton of one line (see the module docstring).

    >>> from storyeval.models import load_spacy
    >>> extract_skeleton("Good things come to those who wait.", load_spacy()).pattern
    '* * * to those who *.'
    """
    doc = nlp(line.strip())
    return Skeleton(
        tuple(t.text for t in doc),
        tuple(_slot_tag(t) for t in doc),
        tuple(t.whitespace_ for t in doc),
        line.strip(),
    )


def read_lines(path: str | Path | None = None) -> list[str]:
    """The lines of a skeleton corpus (storyeval's when ``path`` is None): one a line, ``#``
    comments and blank lines skipped."""
    if path is None:
        text = resources.files("storyeval.generate").joinpath("data", SHIPPED_LINES)
        content = text.read_text(encoding="utf-8")
    else:
        file = Path(path)
        if not file.is_file():
            raise FileNotFoundError(f"{file}: no such skeleton file")
        content = file.read_text(encoding="utf-8")
    lines = [line.strip() for line in content.splitlines()]
    found = [line for line in lines if line and not line.startswith("#")]
    if not found:
        raise StoryevalError(f"{path or SHIPPED_LINES}: no line to build skeletons from")
    return found


@dataclass
class SkeletonBank:
    """Skeletons and, per slot tag, the corpus's content words with their counts."""

    skeletons: list[Skeleton]
    vocabulary: dict[str, Counter[str]] = field(default_factory=dict)
    identity: str = ""

    @classmethod
    def from_lines(cls, lines: Iterable[str], *, nlp: Any, identity: str = "") -> SkeletonBank:
        """Skeletons of ``lines`` (lines without a slot are left out)."""
        skeletons: list[Skeleton] = []
        vocabulary: dict[str, Counter[str]] = {}
        for line in lines:
            skeleton = extract_skeleton(line, nlp)
            if not skeleton.slots:
                continue
            skeletons.append(skeleton)
            for i in skeleton.slots:
                tag = skeleton.tags[i]
                assert tag is not None
                vocabulary.setdefault(tag, Counter())[skeleton.words[i].lower()] += 1
        if not skeletons:
            raise StoryevalError("no line has a content word to make a slot of")
        return cls(skeletons, vocabulary, identity)

    @classmethod
    def load(cls, path: str | Path | None = None, *, nlp: Any = None) -> SkeletonBank:
        """The bank of a skeleton file (storyeval's lines when None)."""
        import hashlib

        from storyeval.models import load_spacy

        lines = read_lines(path)
        digest = hashlib.sha256("\n".join(lines).encode()).hexdigest()[:12]
        name = Path(path).name if path is not None else SHIPPED_LINES
        return cls.from_lines(lines, nlp=nlp or load_spacy(), identity=f"{name}@{digest}")


# --------------------------------------------------------------------------- targets


@dataclass(frozen=True)
class Target:
    """A word the writer gave, with its lemma and part of speech."""

    word: str
    lemma: str
    tag: str


def content_words(texts: Sequence[str], nlp: Any) -> list[Target]:
    """The content words of the writer's keywords and draft, in order, without repeats."""
    seen: set[str] = set()
    found = []
    for text in texts:
        for token in nlp(text):
            tag = _slot_tag(token)
            key = token.lemma_.lower()
            if tag is None or key in seen:
                continue
            seen.add(key)
            found.append(Target(token.text.lower(), key, tag))
    return found


def inflect(target: Target, tag: str) -> str | None:
    """``target`` in the form of ``tag`` (None when the parts of speech differ).

    >>> inflect(Target("test", "test", "VB"), "VBG"), inflect(Target("test", "test", "VB"), "JJ")
    ('testing', None)
    """
    if _POS_OF_TAG.get(target.tag) != _POS_OF_TAG.get(tag):
        return None
    if target.tag == tag or _POS_OF_TAG[tag] in ("adj", "adv"):
        # degrees are not inflected: spaCy lemmatises "better" to "well"
        return target.word
    from lemminflect import getInflection

    forms = getInflection(target.lemma, tag=tag)
    return forms[0].lower() if forms else None


# --------------------------------------------------------------------------- filling


@dataclass(frozen=True)
class Suggestion:
    """One suggestion: its text, the skeleton it filled (slots as their Penn tags) and the
    target words it used (as the writer gave them, in whatever form the slot needed)."""

    text: str
    skeleton: str
    targets: tuple[str, ...]
    score: float
    #: the slot words that are not the writer's targets (from the corpus or the neighbours)
    fillers: tuple[str, ...] = ()


@dataclass
class _Beam:
    fillers: dict[int, str]
    used: frozenset[str]
    lm: float = 0.0
    score: float = 0.0
    others: frozenset[str] = frozenset()  # fillers that are not targets


def _prefix_scores(lm: Any, texts: Sequence[str]) -> list[float]:
    """Mean log-probability per token of each text under the LM (the first token scored
    after the start token)."""
    from storyeval.models.nll import start_token, token_nll

    first = start_token(lm)
    items = []
    for text in texts:
        ids = [int(i) for i in lm.tokenizer(text, add_special_tokens=False)["input_ids"]]
        items.append(
            ([first] if first is not None else ids[:1], ids if first is not None else ids[1:])
        )
    nll, count = token_nll(lm, items)
    return [-float(n) / max(int(c), 1) for n, c in zip(nll, count, strict=True)]


@dataclass(frozen=True)
class SloganSettings:
    """The knobs of the slot filling (all in the signature)."""

    beam: int = 4
    vocabulary: int = 8
    coverage: float = 6.0
    lm: float = 1.0
    diversity: float = 0.5
    targets: int = 3
    suggestions: int = 3
    neighbours: int = 0
    #: a word the corpus or the neighbours gave one suggestion is not offered to the next of
    #: the same request (the writer's targets may recur): without it, most suggestions of a
    #: request began with the corpus' most frequent adjective
    distinct_fillers: bool = True


_NORMALISED: dict[str, Any] = {}


def related_words(targets: Sequence[Target], k: int, *, search: int = 50_000) -> list[Target]:
    """The ``k`` nearest neighbours of each target in the GloVe vectors (cosine, among the
    ``search`` most frequent alphabetic words), as targets of the same part of speech: slot
    candidates beyond the skeleton corpus' frequent words (Clark 2021, section 2.5.2).

    >>> [t.word for t in related_words([Target("coffee", "coffee", "NN")], 2)]
    ['drink', 'drinks']
    """
    import numpy as np

    from storyeval.models import load_glove

    vectors = load_glove()
    if vectors.identity not in _NORMALISED:
        top = np.asarray(vectors.vectors[:search], dtype=np.float64)
        _NORMALISED.clear()
        _NORMALISED[vectors.identity] = top / np.maximum(
            np.linalg.norm(top, axis=1, keepdims=True), 1e-12
        )
    matrix = _NORMALISED[vectors.identity]
    words = {i: w for w, i in vectors.index.items() if i < len(matrix)}
    found: list[Target] = []
    taken = {t.lemma for t in targets}
    for target in targets:
        row = vectors.index.get(target.lemma)
        if row is None or row >= len(matrix):
            continue
        picked = 0
        for i in np.argsort(-(matrix @ matrix[row])):
            word = words.get(int(i), "")
            if picked == k:
                break
            if word.isalpha() and word not in taken and not word.startswith(target.lemma[:4]):
                found.append(Target(word, word, target.tag))
                taken.add(word)
                picked += 1
    return found


def fill(
    skeleton: Skeleton,
    targets: Sequence[Target],
    bank: SkeletonBank,
    lm: Any,
    settings: SloganSettings,
    related: Sequence[Target] = (),
    avoid: frozenset[str] = frozenset(),
) -> Suggestion:
    """Fill the slots of one skeleton by beam search (see the module docstring); ``related``
    words (:func:`related_words`) are candidates beside the corpus' frequent words, and the
    words in ``avoid`` (fillers of earlier suggestions) are not offered unless a target."""
    beams = [_Beam({}, frozenset())]
    for slot in skeleton.slots:
        tag = skeleton.tags[slot]
        assert tag is not None
        corpus = [
            w for w, _ in bank.vocabulary.get(tag, Counter()).most_common(settings.vocabulary)
        ]
        expanded: list[_Beam] = []
        for beam in beams:
            options = []
            for target in targets:
                form = inflect(target, tag)
                if form is not None and target.word not in beam.used:
                    options.append((form, target.word))  # the writer's word, as in targets
            extra = [inflect(r, tag) for r in related]
            taken = set(beam.fillers.values()) | avoid
            options += [(w, "") for w in extra if w and w.lower() not in taken]
            options += [(word, "") for word in corpus if word.lower() not in taken]
            for word, source in options:
                used = beam.used | {source} if source else beam.used
                others = beam.others if source else beam.others | {word.lower()}
                expanded.append(_Beam({**beam.fillers, slot: word}, used, others=others))
        if not expanded:
            continue
        texts = [skeleton.render(b.fillers, upto=slot + 1) for b in expanded]
        for beam, lm_score in zip(expanded, _prefix_scores(lm, texts), strict=True):
            beam.lm = lm_score
            beam.score = _score(beam, skeleton, targets, settings)
        expanded.sort(key=lambda b: (-b.score, skeleton.render(b.fillers)))
        beams = expanded[: settings.beam]
    best = beams[0]
    return Suggestion(
        skeleton.render(best.fillers),
        skeleton.tagged,
        tuple(sorted(best.used)),
        best.score,
        tuple(sorted(best.others)),
    )


def _score(
    beam: _Beam, skeleton: Skeleton, targets: Sequence[Target], settings: SloganSettings
) -> float:
    coverage = len(beam.used) / max(1, len(targets))
    words = list(beam.fillers.values())
    diversity = len(set(words)) / len(words) if words else 1.0
    return settings.coverage * coverage + settings.lm * beam.lm + settings.diversity * diversity


def suggest(
    keywords: Sequence[str],
    draft: str = "",
    *,
    bank: SkeletonBank,
    lm: Any,
    nlp: Any,
    seed: int = 0,
    settings: SloganSettings | None = None,
) -> tuple[list[Suggestion], list[str]]:
    """At most ``settings.suggestions`` slogan suggestions for a writer's keywords and draft,
    and the target words sampled.

    Raises
    ------
    StoryevalError
        When the keywords and draft hold no content word.
    """
    settings = settings or SloganSettings()
    found = content_words([*keywords, draft], nlp)
    if not found:
        raise StoryevalError("the keywords and draft hold no content word to build on")
    rng = random.Random(f"{seed}|{'|'.join(keywords)}|{draft}")
    targets = rng.sample(found, min(settings.targets, len(found)))
    fits = []
    for skeleton in bank.skeletons:
        holdable = sum(
            1 for t in targets if any(inflect(t, skeleton.tags[i] or "") for i in skeleton.slots)
        )
        if holdable:
            fits.append((holdable, rng.random(), skeleton))
    fits.sort(key=lambda item: (-item[0], item[1]))
    chosen = [skeleton for _, _, skeleton in fits[: settings.suggestions]]
    related = related_words(targets, settings.neighbours) if settings.neighbours else []
    suggestions: list[Suggestion] = []
    avoid: set[str] = set()
    for skeleton in chosen:
        made = fill(skeleton, targets, bank, lm, settings, related, frozenset(avoid))
        suggestions.append(made)
        if settings.distinct_fillers:
            avoid |= set(made.fillers)
    return suggestions, [t.word for t in targets]


def first_word_diversity(records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """How varied the suggestions' openings are: suggestions, distinct first words and the
    most frequent first word with its count.

    >>> first_word_diversity([{"suggestions": ["Bright days.", "Bright nights.", "Dark."]}])
    {'suggestions': 3, 'distinct_first_words': 2, 'top_first_word': 'bright', 'top_count': 2}
    """
    firsts = [
        text.split()[0].lower().strip(".,!?;:\"'")
        for record in records
        for text in record.get("suggestions") or []
        if text.split()
    ]
    counts = Counter(firsts)
    top, top_count = counts.most_common(1)[0] if counts else ("", 0)
    return {
        "suggestions": len(firsts),
        "distinct_first_words": len(counts),
        "top_first_word": top,
        "top_count": top_count,
    }


def slogan_signature(
    bank: SkeletonBank, lm: Any, nlp: Any, seed: int, settings: SloganSettings
) -> Any:
    """The signature of a suggestion run."""
    from dataclasses import asdict

    from storyeval.base.signature import Signature
    from storyeval.models import spacy_identity

    return Signature(
        "slogans",
        {
            "skeletons": bank.identity,
            "model": lm.identity,
            "spacy": spacy_identity(nlp),
            "seed": seed,
            **{k: v for k, v in asdict(settings).items() if k != "neighbours" or v},
            **({"vectors": _glove_identity()} if settings.neighbours else {}),
        },
    )


def _glove_identity() -> str:
    from storyeval.models import load_glove

    return load_glove().identity


# --------------------------------------------------------------------------- files


@dataclass(frozen=True)
class SloganRequest:
    """One line of a ``storyeval slogans`` input: an id, the keywords and an optional draft."""

    id: str
    keywords: tuple[str, ...]
    draft: str = ""


def _request(record: dict[str, Any]) -> SloganRequest | str:
    """The request of one record, or what is wrong with it."""
    rid = record.get("id")
    if not isinstance(rid, str | int) or isinstance(rid, bool) or str(rid) == "":
        return "`id` must be a non-empty string or integer"
    keywords = record.get("keywords")
    if isinstance(keywords, str):
        keywords = [w for w in keywords.replace(",", " ").split() if w]
    if not isinstance(keywords, list) or not all(isinstance(w, str) for w in keywords):
        return "`keywords` must be a list of words"
    draft = record.get("draft", "") or ""
    if not isinstance(draft, str):
        return "`draft` must be a string"
    if not any(w.strip() for w in keywords) and not draft.strip():
        return "give at least one keyword or a draft"
    return SloganRequest(str(rid), tuple(w.strip() for w in keywords if w.strip()), draft.strip())


def read_requests(path: str | Path) -> list[SloganRequest]:
    """The requests of a JSONL (or CSV) file; every bad record is reported with its line.

    Raises
    ------
    DataFileError
        On malformed records, missing fields or repeated ids.
    """
    from storyeval.base.errors import DataFileError, DataProblem
    from storyeval.corpus import iter_raw_records

    problems: list[DataProblem] = []
    requests: list[SloganRequest] = []
    seen: dict[str, int] = {}
    for line, item in iter_raw_records(path):
        if isinstance(item, DataProblem):
            problems.append(item)
            continue
        request = _request(item)
        if isinstance(request, str):
            problems.append(DataProblem(str(path), line, request))
        elif request.id in seen:
            problems.append(
                DataProblem(
                    str(path), line, f"duplicate id {request.id!r} (line {seen[request.id]})"
                )
            )
        else:
            seen[request.id] = line
            requests.append(request)
    if problems:
        raise DataFileError(problems)
    if not requests:
        raise DataFileError([DataProblem(str(path), 1, "the file holds no request")])
    return requests


def suggestion_records(
    requests: Sequence[SloganRequest],
    *,
    bank: SkeletonBank,
    lm: Any,
    nlp: Any,
    seed: int = 0,
    settings: SloganSettings | None = None,
) -> Iterable[dict[str, Any]]:
    """One output record per request: ``id``, ``suggestions`` (at most three strings), the
    ``skeletons`` filled, the ``targets`` sampled, and the signature. A request without a content
    word gets no suggestion and an ``error``."""
    settings = settings or SloganSettings()
    signature = str(slogan_signature(bank, lm, nlp, seed, settings))
    for request in requests:
        try:
            found, targets = suggest(
                request.keywords,
                request.draft,
                bank=bank,
                lm=lm,
                nlp=nlp,
                seed=seed,
                settings=settings,
            )
        except StoryevalError as exc:
            yield {
                "id": request.id,
                "suggestions": [],
                "skeletons": [],
                "targets": [],
                "error": str(exc),
                "signature": signature,
            }
            continue
        yield {
            "id": request.id,
            "suggestions": [s.text for s in found],
            "skeletons": [s.skeleton for s in found],
            "targets": targets,
            "used_targets": [list(s.targets) for s in found],
            "signature": signature,
        }
