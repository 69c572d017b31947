"""The four negative-sampling techniques of Guan & Huang (2020), section 3.2.

Each technique takes the sentences of a story and returns changed sentences plus the edits
it made; each guarantees a real change or raises
:class:`~storyeval.perturb.base.NotApplicableError`.
"""

from __future__ import annotations

import random
import re
from typing import Any

from storyeval.perturb.base import Edit, NotApplicableError, PerturbOptions, register_technique
from storyeval.perturb.corpus import PerturbationCorpus, is_keyword
from storyeval.perturb.lexicon import antonyms, file_antonyms, inflect, match_case
from storyeval.perturb.negation import alter_negation, negation_sites

_WORD_RE = re.compile(r"[A-Za-z0-9]+(?:['’][A-Za-z]+)*")


# --------------------------------------------------------------------------- repetition


def _ngram_spans(sentence: str, max_n: int) -> list[tuple[int, int, int]]:
    """``(start, end, n)`` character spans of every n-gram (n <= max_n) of adjacent words
    (separated by spaces only, so no punctuation falls inside a repeated n-gram)."""
    words = list(_WORD_RE.finditer(sentence))
    runs: list[list[re.Match[str]]] = []
    for word in words:
        gap = sentence[runs[-1][-1].end() : word.start()] if runs else ""
        if runs and gap and not gap.strip():
            runs[-1].append(word)
        else:
            runs.append([word])
    spans = []
    for run in runs:
        for n in range(1, max_n + 1):
            for first in range(len(run) - n + 1):
                spans.append((run[first].start(), run[first + n - 1].end(), n))
    return spans


@register_technique(
    "repetition",
    min_sentences=1,
    mix_weight=0.1,
    error_type="repeated plots",
    description="repeat an N-gram (N=1..4) in a random sentence, or repeat a random sentence "
    "and drop the one after it",
)
def repetition(
    sentences: list[str],
    rng: random.Random,
    corpus: PerturbationCorpus,
    *,
    story_id: str,
    options: PerturbOptions,
) -> tuple[list[str], list[Edit]]:
    """Lexical or sentence-level repetition.

    With probability ``options.sentence_repetition_probability`` (and at least two
    sentences that differ), a random sentence ``i`` is repeated in place of sentence
    ``i + 1``, so the sentence count is unchanged. Otherwise a random sentence gets one of
    its n-grams (N drawn uniformly from the sizes the sentence allows, at most
    ``options.max_ngram``) repeated right after itself ("crisp and cool and cool").
    """
    repeatable = [i for i in range(len(sentences) - 1) if sentences[i] != sentences[i + 1]]
    with_words = [i for i, s in enumerate(sentences) if _ngram_spans(s, 1)]
    use_sentence = bool(repeatable) and (
        not with_words or rng.random() < options.sentence_repetition_probability
    )
    new = list(sentences)
    if use_sentence:
        index = rng.choice(repeatable)
        removed = new[index + 1]
        new[index + 1] = new[index]
        edit = Edit(
            "repetition",
            "sentence_repetition",
            index + 1,
            before=removed,
            after=new[index],
            detail={"repeated_sentence": index},
        )
        return new, [edit]
    if not with_words:
        raise NotApplicableError("repetition", "the story has no words to repeat")
    index = rng.choice(with_words)
    spans = _ngram_spans(new[index], options.max_ngram)
    n = rng.choice(sorted({span[2] for span in spans}))
    start, end, _ = rng.choice([span for span in spans if span[2] == n])
    sentence = new[index]
    ngram = sentence[start:end]
    new[index] = sentence[:end] + " " + ngram + sentence[end:]
    edit = Edit(
        "repetition",
        "ngram_repetition",
        index,
        before=sentence,
        after=new[index],
        detail={"n": n, "ngram": ngram, "char_start": start, "char_end": end},
    )
    return new, [edit]


# --------------------------------------------------------------------------- substitution


def _rebuild(doc: Any, replacements: dict[int, str]) -> str:
    return "".join(
        (replacements.get(token.i, token.text)) + token.whitespace_ for token in doc
    ).strip()


def _antonym_candidates(token: Any, options: PerturbOptions) -> list[str]:
    """WordNet's antonyms of the keyword, then those of the antonym file."""
    lemma = token.lemma_.lower()
    candidates = list(antonyms(lemma, token.pos_))
    if options.antonyms_file is not None:
        found = file_antonyms(options.antonyms_file, lemma) or file_antonyms(
            options.antonyms_file, token.text.lower()
        )
        candidates += [word for word in found if word not in candidates]
    return candidates


def _replacement_for(
    token: Any, rng: random.Random, corpus: PerturbationCorpus, options: PerturbOptions
) -> tuple[str, str] | None:
    """An antonym of the keyword in the right form, else a random keyword of the same tag."""
    candidates = _antonym_candidates(token, options)
    rng.shuffle(candidates)
    for antonym in candidates:
        form = inflect(antonym, token.tag_)
        if form and form.lower() != token.text.lower():
            return match_case(token.text, form), "antonym"
    words, counts = corpus.keyword_candidates(
        token.tag_, exclude={token.text.lower(), token.lemma_.lower()}
    )
    if not words:
        return None
    word = rng.choices(words, weights=counts, k=1)[0]
    return match_case(token.text, word), "keyword"


def _substitute_keywords(
    sentences: list[str],
    rng: random.Random,
    corpus: PerturbationCorpus,
    options: PerturbOptions,
) -> tuple[list[str], list[Edit]]:
    docs = [corpus.parse(sentence) for sentence in sentences]
    keywords = [(i, token) for i, doc in enumerate(docs) for token in doc if is_keyword(token)]
    if not keywords:
        raise NotApplicableError("substitution", "the story has no keywords")
    count = max(1, int(options.keyword_rate * len(keywords) + 0.5))
    chosen = sorted(rng.sample(range(len(keywords)), count))
    replacements: dict[int, dict[int, str]] = {}
    edits: list[Edit] = []
    for position in chosen:
        index, token = keywords[position]
        found = _replacement_for(token, rng, corpus, options)
        if found is None:
            continue
        word, kind = found
        replacements.setdefault(index, {})[token.i] = word
        edits.append(
            Edit(
                "substitution",
                kind,
                index,
                before=token.text,
                after=word,
                detail={"tag": token.tag_, "char_start": token.idx},
            )
        )
    if not edits:
        raise NotApplicableError(
            "substitution", "no keyword has an antonym or another keyword of its part of speech"
        )
    new = list(sentences)
    for index, changes in replacements.items():
        new[index] = _rebuild(docs[index], changes)
    return new, edits


def _substitute_sentence(
    sentences: list[str], rng: random.Random, corpus: PerturbationCorpus, story_id: str
) -> tuple[list[str], list[Edit]]:
    index = rng.randrange(len(sentences))
    pool = [(sid, s) for sid, s in corpus.other_sentences(story_id) if s != sentences[index]]
    if not pool:
        raise NotApplicableError("substitution", "the corpus has no other story to take from")
    source_id, replacement = rng.choice(pool)
    new = list(sentences)
    new[index] = replacement
    edit = Edit(
        "substitution",
        "sentence_substitution",
        index,
        before=sentences[index],
        after=replacement,
        detail={"source_id": source_id},
    )
    return new, [edit]


@register_technique(
    "substitution",
    min_sentences=1,
    mix_weight=0.3,
    error_type="poor coherence",
    description="replace ~15% of the keywords with an antonym (WordNet's, and an antonym "
    "file's if given; else a random keyword of the same POS, by corpus frequency), or a "
    "sentence with one from another story",
)
def substitution(
    sentences: list[str],
    rng: random.Random,
    corpus: PerturbationCorpus,
    *,
    story_id: str,
    options: PerturbOptions,
) -> tuple[list[str], list[Edit]]:
    """Word-level or sentence-level substitution.

    Word level: ``options.keyword_rate`` of the keywords (at least one) are replaced, each
    with a WordNet antonym inflected like the original ("loved" -> "hated") when WordNet
    has one, otherwise with another keyword of the same Penn tag sampled by its mention
    frequency in the corpus. Sentence level (probability
    ``options.sentence_substitution_probability``, or when the story has no keyword): a
    random sentence is replaced by a random sentence of another story of the corpus.
    """
    sentence_level = corpus.has_other_stories(story_id) and (
        rng.random() < options.sentence_substitution_probability
    )
    if not sentence_level:
        try:
            return _substitute_keywords(sentences, rng, corpus, options)
        except NotApplicableError:
            if not corpus.has_other_stories(story_id):
                raise
    return _substitute_sentence(sentences, rng, corpus, story_id)


# --------------------------------------------------------------------------- reordering


@register_technique(
    "reordering",
    min_sentences=2,
    mix_weight=0.4,
    error_type="conflicting logic",
    description="shuffle the sentences (never giving back the original order)",
)
def reordering(
    sentences: list[str],
    rng: random.Random,
    corpus: PerturbationCorpus,
    *,
    story_id: str,
    options: PerturbOptions,
) -> tuple[list[str], list[Edit]]:
    """A uniformly random order of the sentences other than the original one."""
    if len(set(sentences)) < 2:
        raise NotApplicableError(
            "reordering",
            f"its {len(sentences)} sentences are all the same text, so every order gives it back",
        )
    order = list(range(len(sentences)))
    while True:
        rng.shuffle(order)
        new = [sentences[i] for i in order]
        if new != sentences:
            break
    return new, [Edit("reordering", "reorder", None, detail={"order": list(order)})]


# --------------------------------------------------------------------------- negation


@register_technique(
    "negation",
    min_sentences=1,
    mix_weight=0.2,
    error_type="conflicting logic",
    description="add or remove a negation by the verb-type rules of Guan & Huang (2020) Table 8",
)
def negation(
    sentences: list[str],
    rng: random.Random,
    corpus: PerturbationCorpus,
    *,
    story_id: str,
    options: PerturbOptions,
) -> tuple[list[str], list[Edit]]:
    """Add or remove one negation, at a place drawn uniformly among all the places in the
    story where Table 8's rules (or their reversal) apply."""
    places = []
    for index, sentence in enumerate(sentences):
        doc = corpus.parse(sentence)
        places += [(index, doc, site) for site in negation_sites(doc)]
    if not places:
        raise NotApplicableError("negation", "the story has no verb whose negation can change")
    index, doc, site = rng.choice(places)
    from storyeval.perturb.negation import apply_site

    chance = corpus.style.probability(options.contraction_probability)
    contract = site.direction == "add" and (
        site.must_contract or (site.can_contract and rng.random() < chance)
    )
    altered = corpus.style.render(apply_site(doc, site, contract=contract))
    new = list(sentences)
    new[index] = altered
    edit = Edit(
        "negation",
        f"{site.direction}_negation",
        index,
        before=sentences[index],
        after=altered,
        detail={"rule": site.rule, "verb": doc[site.verb].text, "contracted": contract},
    )
    return new, [edit]


@register_technique(
    "contradiction",
    min_sentences=2,
    mix_weight=0.0,
    error_type="inconsistency",
    description="state a sentence again later with its negation flipped (a planted "
    "contradiction for the consistency checks)",
    suite="consistency",
)
def contradiction(
    sentences: list[str],
    rng: random.Random,
    corpus: PerturbationCorpus,
    *,
    story_id: str,
    options: PerturbOptions,
) -> tuple[list[str], list[Edit]]:
    """Copy a sentence ``i`` (not the last) with one negation added or removed (Table 8's rules)
    and insert it at a random later place, so the story says X and later not X; the edit
    names both sentences."""
    from storyeval.perturb.negation import apply_site

    places = []
    for index, sentence in enumerate(sentences[:-1]):
        doc = corpus.parse(sentence)
        places += [(index, doc, site) for site in negation_sites(doc)]
    if not places:
        raise NotApplicableError(
            "contradiction", "no sentence has a verb whose negation can change"
        )
    index, doc, site = rng.choice(places)
    flipped = corpus.style.render(apply_site(doc, site, contract=False))
    at = rng.randint(index + 2, len(sentences))  # after the next sentence at the earliest
    new = [*sentences[:at], flipped, *sentences[at:]]
    edit = Edit(
        "contradiction",
        f"{site.direction}_negation",
        at,
        before="",
        after=flipped,
        detail={"contradicts": index, "rule": site.rule},
    )
    return new, [edit]


__all__ = [
    "alter_negation",
    "contradiction",
    "negation",
    "reordering",
    "repetition",
    "substitution",
]
