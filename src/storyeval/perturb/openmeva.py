"""Robustness tests beyond UNION's four techniques (OpenMEVA, Guan et al. 2021).

Three suites, asked for by name or by suite (``--techniques discrimination``), never part of
UNION's default mixture:

* ``discrimination``: errors generated stories make that UNION's techniques do not mimic:
  causal and temporal reordering of events, commonsense swaps (antonyms only; two entities
  swapped) and repeated plots (an earlier event told again later);
* ``invariance``: changes that keep a story's quality (synonyms, contractions, punctuation,
  typos at a controlled rate): a robust metric should barely move;
* ``invariance-lm``: ``paraphrase``, sentences rewritten by a language model and kept only
  when they pass a similarity check (:mod:`storyeval.perturb.paraphrase`); slow, so asked for
  by name, never in a default run.

Each technique guarantees a real change or raises
:class:`~storyeval.perturb.base.NotApplicableError`.
"""

from __future__ import annotations

import random
import re
from typing import Any

from storyeval.perturb.base import Edit, NotApplicableError, PerturbOptions, register_technique
from storyeval.perturb.corpus import PerturbationCorpus, is_keyword
from storyeval.perturb.lexicon import inflect, match_case
from storyeval.perturb.techniques import _antonym_candidates, _rebuild

# --------------------------------------------------------------------------- discrimination

#: Openings that tie a sentence's event to the one before it in time or cause.
CONNECTIVES = (
    "then",
    "after that",
    "afterwards",
    "later",
    "finally",
    "eventually",
    "soon",
    "so",
    "as a result",
    "because of this",
    "therefore",
    "the next day",
    "the next morning",
    "next",
    "at last",
)
_CONNECTIVE_RE = re.compile(
    r"^\W*(" + "|".join(sorted(map(re.escape, CONNECTIVES), key=len, reverse=True)) + r")\b",
    re.IGNORECASE,
)


@register_technique(
    "causal_reordering",
    min_sentences=2,
    mix_weight=0.0,
    error_type="conflicting logic",
    description="swap a sentence opening with a temporal or causal connective ('Then', 'So', "
    "'Finally') with the sentence before it, so an effect comes before its cause",
    suite="discrimination",
)
def causal_reordering(
    sentences: list[str],
    rng: random.Random,
    corpus: PerturbationCorpus,
    *,
    story_id: str,
    options: PerturbOptions,
) -> tuple[list[str], list[Edit]]:
    """Move a connected event before the event it follows (OpenMEVA's causal/temporal test)."""
    sites = [
        (i, match.group(1))
        for i, sentence in enumerate(sentences)
        if i > 0 and (match := _CONNECTIVE_RE.match(sentence)) and sentence != sentences[i - 1]
    ]
    if not sites:
        raise NotApplicableError(
            "causal_reordering", "no sentence after the first opens with a temporal or causal link"
        )
    index, connective = rng.choice(sites)
    new = list(sentences)
    new[index - 1], new[index] = sentences[index], sentences[index - 1]
    edit = Edit(
        "causal_reordering",
        "swap_connected",
        index,
        before=sentences[index - 1],
        after=sentences[index],
        detail={"connective": connective.lower(), "order": [index, index - 1]},
    )
    return new, [edit]


@register_technique(
    "antonym_swap",
    min_sentences=1,
    mix_weight=0.0,
    error_type="conflicting logic",
    description="replace one or two keywords with an antonym (WordNet, or the antonym file); "
    "never a random word",
    suite="discrimination",
)
def antonym_swap(
    sentences: list[str],
    rng: random.Random,
    corpus: PerturbationCorpus,
    *,
    story_id: str,
    options: PerturbOptions,
) -> tuple[list[str], list[Edit]]:
    """A commonsense contradiction: a keyword turned into its opposite ("loved" -> "hated")."""
    docs = [corpus.parse(sentence) for sentence in sentences]
    sites: list[tuple[int, Any, str, str]] = []
    for index, doc in enumerate(docs):
        for token in doc:
            if not is_keyword(token):
                continue
            for antonym in _antonym_candidates(token, options):
                form = inflect(antonym, token.tag_)
                if form and form.lower() != token.text.lower():
                    sites.append((index, token, match_case(token.text, form), antonym))
                    break
    if not sites:
        raise NotApplicableError("antonym_swap", "no keyword has an antonym")
    chosen = sorted(rng.sample(range(len(sites)), min(len(sites), rng.choice((1, 2)))))
    replacements: dict[int, dict[int, str]] = {}
    edits = []
    for position in chosen:
        index, token, word, antonym = sites[position]
        replacements.setdefault(index, {})[token.i] = word
        detail = {"lemma": token.lemma_.lower(), "pos": token.pos_, "antonym": antonym}
        edits.append(
            Edit("antonym_swap", "antonym", index, before=token.text, after=word, detail=detail)
        )
    new = list(sentences)
    for index, changes in replacements.items():
        new[index] = _rebuild(docs[index], changes)
    return new, edits


def _names(docs: list[Any]) -> list[str]:
    """Distinct person names of the story, in order of first mention."""
    names: dict[str, None] = {}
    for doc in docs:
        for entity in doc.ents:
            if entity.label_ == "PERSON" and entity.text[:1].isupper():
                names.setdefault(entity.text, None)
    if len(names) < 2:  # the small NER model misses short first names: proper nouns too
        for doc in docs:
            for token in doc:
                if token.pos_ == "PROPN" and token.text.isalpha() and token.text[:1].isupper():
                    names.setdefault(token.text, None)
    return list(names)


def _nouns(docs: list[Any]) -> list[str]:
    nouns: dict[str, None] = {}
    for doc in docs:
        for token in doc:
            if token.tag_ == "NN" and is_keyword(token):
                nouns.setdefault(token.text.lower(), None)
    return list(nouns)


@register_technique(
    "entity_swap",
    min_sentences=1,
    mix_weight=0.0,
    error_type="poor coherence",
    description="swap two characters' names throughout the story (two nouns when there are "
    "not two names), so the wrong one acts",
    suite="discrimination",
)
def entity_swap(
    sentences: list[str],
    rng: random.Random,
    corpus: PerturbationCorpus,
    *,
    story_id: str,
    options: PerturbOptions,
) -> tuple[list[str], list[Edit]]:
    """Swap every mention of two entities (OpenMEVA's entity-swap commonsense test)."""
    docs = [corpus.parse(sentence) for sentence in sentences]
    names = _names(docs)
    kind = "names"
    if len(names) < 2:
        names, kind = _nouns(docs), "nouns"
    if len(names) < 2:
        raise NotApplicableError("entity_swap", "fewer than two names or nouns to swap")
    first, second = rng.sample(names, 2)
    flags = 0 if kind == "names" else re.IGNORECASE
    pattern = re.compile(rf"\b({re.escape(first)}|{re.escape(second)})\b", flags)

    def swap(match: re.Match[str]) -> str:
        other = second if match.group(1).lower() == first.lower() else first
        return match_case(match.group(1), other) if kind == "nouns" else other

    new = [pattern.sub(swap, sentence) for sentence in sentences]
    changed = [i for i, (a, b) in enumerate(zip(sentences, new, strict=True)) if a != b]
    if not changed:
        raise NotApplicableError("entity_swap", "the swap changed nothing")
    edit = Edit(
        "entity_swap",
        f"swap_{kind}",
        None,
        before=first,
        after=second,
        detail={"sentences": changed},
    )
    return new, [edit]


@register_technique(
    "repeated_plot",
    min_sentences=3,
    mix_weight=0.0,
    error_type="repeated plots",
    description="tell an earlier event again later: a sentence replaced by a copy of one at "
    "least two sentences before it (UNION repeats only the adjacent one)",
    suite="discrimination",
)
def repeated_plot(
    sentences: list[str],
    rng: random.Random,
    corpus: PerturbationCorpus,
    *,
    story_id: str,
    options: PerturbOptions,
) -> tuple[list[str], list[Edit]]:
    """A repeated plot: the story returns to an event it already told."""
    pairs = [
        (source, target)
        for target in range(2, len(sentences))
        for source in range(target - 1)
        if sentences[source] != sentences[target]
    ]
    if not pairs:
        raise NotApplicableError("repeated_plot", "no two distinct sentences far enough apart")
    source, target = rng.choice(pairs)
    new = list(sentences)
    new[target] = sentences[source]
    edit = Edit(
        "repeated_plot",
        "repeat_earlier_sentence",
        target,
        before=sentences[target],
        after=sentences[source],
        detail={"source_sentence": source},
    )
    return new, [edit]


# --------------------------------------------------------------------------- invariance


def _synonym(token: Any) -> tuple[str, str] | None:
    """A single-word WordNet synonym of the keyword from its most frequent sense, inflected."""
    from storyeval.perturb.lexicon import _wordnet

    pos = {"NOUN": "n", "VERB": "v", "ADJ": "a", "ADV": "r"}.get(token.pos_)
    if pos is None:
        return None
    wordnet: Any = _wordnet()
    lemma = token.lemma_.lower()
    for synset in wordnet.synsets(lemma, pos=pos)[:1]:
        for word in synset.lemmas():
            name = word.name()
            if "_" in name or name.lower() == lemma or not name.isalpha():
                continue
            form = inflect(name.lower(), token.tag_)
            if form and form.lower() != token.text.lower():
                return match_case(token.text, form), name.lower()
    return None


@register_technique(
    "synonym",
    min_sentences=1,
    mix_weight=0.0,
    error_type="none (quality kept)",
    description="replace ~15% of the keywords (at least one) with a synonym from their most "
    "frequent WordNet sense, inflected like the original",
    suite="invariance",
)
def synonym(
    sentences: list[str],
    rng: random.Random,
    corpus: PerturbationCorpus,
    *,
    story_id: str,
    options: PerturbOptions,
) -> tuple[list[str], list[Edit]]:
    """Synonym substitution, the invariance counterpart of keyword substitution."""
    docs = [corpus.parse(sentence) for sentence in sentences]
    sites = [
        (index, token, found)
        for index, doc in enumerate(docs)
        for token in doc
        if is_keyword(token) and (found := _synonym(token))
    ]
    if not sites:
        raise NotApplicableError("synonym", "no keyword has a single-word synonym")
    count = max(1, int(options.keyword_rate * len(sites) + 0.5))
    chosen = sorted(rng.sample(range(len(sites)), count))
    replacements: dict[int, dict[int, str]] = {}
    edits = []
    for position in chosen:
        index, token, (word, base) = sites[position]
        replacements.setdefault(index, {})[token.i] = word
        detail = {"lemma": token.lemma_.lower(), "pos": token.pos_, "synonym": base}
        edits.append(
            Edit("synonym", "synonym", index, before=token.text, after=word, detail=detail)
        )
    new = list(sentences)
    for index, changes in replacements.items():
        new[index] = _rebuild(docs[index], changes)
    return new, edits


#: Contractions and their expansions (unambiguous ones only: "'s" and "'d" are not).
CONTRACTIONS = {
    "don't": "do not",
    "doesn't": "does not",
    "didn't": "did not",
    "isn't": "is not",
    "aren't": "are not",
    "wasn't": "was not",
    "weren't": "were not",
    "can't": "cannot",
    "couldn't": "could not",
    "won't": "will not",
    "wouldn't": "would not",
    "shouldn't": "should not",
    "haven't": "have not",
    "hasn't": "has not",
    "hadn't": "had not",
    "i'm": "i am",
    "you're": "you are",
    "we're": "we are",
    "they're": "they are",
    "i've": "i have",
    "we've": "we have",
    "they've": "they have",
    "i'll": "i will",
    "you'll": "you will",
    "we'll": "we will",
    "they'll": "they will",
}
_EXPANSIONS = {value: key for key, value in CONTRACTIONS.items()}


def _toggle(sentences: list[str], table: dict[str, str]) -> tuple[list[str], list[Edit]]:
    pattern = re.compile(
        r"\b(" + "|".join(map(re.escape, sorted(table, key=len, reverse=True))) + r")\b",
        re.IGNORECASE,
    )
    new, edits = [], []
    for index, sentence in enumerate(sentences):
        normalized = sentence.replace("’", "'")
        changed = pattern.sub(
            lambda m: match_case(m.group(1), table[m.group(1).lower()]), normalized
        )
        for match in pattern.finditer(normalized):
            after = match_case(match.group(1), table[match.group(1).lower()])
            edits.append(Edit("contraction", "toggle", index, before=match.group(1), after=after))
        new.append(changed if changed != normalized else sentence)
    return new, edits


@register_technique(
    "contraction",
    min_sentences=1,
    mix_weight=0.0,
    error_type="none (quality kept)",
    description="expand every contraction ('didn't' -> 'did not'), or contract every "
    "expansion when the story has no contraction",
    suite="invariance",
)
def contraction(
    sentences: list[str],
    rng: random.Random,
    corpus: PerturbationCorpus,
    *,
    story_id: str,
    options: PerturbOptions,
) -> tuple[list[str], list[Edit]]:
    """Contraction and expansion: the same words in another register."""
    new, edits = _toggle(sentences, CONTRACTIONS)
    if not edits:
        new, edits = _toggle(sentences, _EXPANSIONS)
    if not edits:
        raise NotApplicableError("contraction", "no contraction or expansion to change")
    return new, edits


_QUOTES = str.maketrans({"“": '"', "”": '"', "‘": "'", "’": "'"})
_COMMA_CONJUNCTION = re.compile(r",(\s+(?:and|but|so)\b)")


def _curly(sentence: str) -> str:
    """Straight quotes and apostrophes made typographic."""
    text = re.sub(r'(^|[\s(\[])"', "\\1“", sentence)
    text = text.replace('"', "”")
    text = re.sub(r"(\w)'(\w)", "\\1’\\2", text)
    text = re.sub(r"(^|[\s(\[])'", "\\1‘", text)
    return text.replace("'", "’")


@register_technique(
    "punctuation",
    min_sentences=1,
    mix_weight=0.0,
    error_type="none (quality kept)",
    description="drop the commas before 'and'/'but'/'so' and switch straight and curly quotes "
    "and apostrophes",
    suite="invariance",
)
def punctuation(
    sentences: list[str],
    rng: random.Random,
    corpus: PerturbationCorpus,
    *,
    story_id: str,
    options: PerturbOptions,
) -> tuple[list[str], list[Edit]]:
    """Punctuation changes that a reader does not count against a story."""
    typographic = any(mark in "".join(sentences) for mark in "“”‘’")
    new, edits = [], []
    for index, sentence in enumerate(sentences):
        changed = _COMMA_CONJUNCTION.sub("\\1", sentence)
        changed = changed.translate(_QUOTES) if typographic else _curly(changed)
        if changed != sentence:
            edits.append(Edit("punctuation", "punctuation", index, before=sentence, after=changed))
        new.append(changed)
    if not edits:
        raise NotApplicableError("punctuation", "no comma before a conjunction and no quote")
    return new, edits


_KEYBOARD = {
    letter: row[i + 1] if i + 1 < len(row) else row[i - 1]
    for row in ("qwertyuiop", "asdfghjkl", "zxcvbnm")
    for i, letter in enumerate(row)
}
_TYPO_WORD = re.compile(r"\b[A-Za-z]{4,}\b")


def _typo(word: str, rng: random.Random) -> str:
    """One keyboard slip: two letters swapped, one dropped, one doubled or one neighbour hit
    (never the first letter)."""
    position = rng.randrange(1, len(word) - 1)
    kind = rng.choice(("swap", "drop", "double", "neighbour"))
    if kind == "swap" and word[position] != word[position + 1]:
        return word[:position] + word[position + 1] + word[position] + word[position + 2 :]
    if kind == "drop":
        return word[:position] + word[position + 1 :]
    if kind == "double":
        return word[: position + 1] + word[position] + word[position + 1 :]
    letter = word[position].lower()
    near = _KEYBOARD.get(letter, letter)
    near = near.upper() if word[position].isupper() else near
    return word[:position] + near + word[position + 1 :]


@register_technique(
    "typos",
    min_sentences=1,
    mix_weight=0.0,
    error_type="none (quality kept)",
    description="a keyboard slip in each word of 4+ letters with probability typo_rate (5%; "
    "at least one): letters swapped, dropped, doubled or mistyped",
    suite="invariance",
)
def typos(
    sentences: list[str],
    rng: random.Random,
    corpus: PerturbationCorpus,
    *,
    story_id: str,
    options: PerturbOptions,
) -> tuple[list[str], list[Edit]]:
    """Typos at a controlled rate (``options.typo_rate`` per eligible word)."""
    words = [(i, m) for i, s in enumerate(sentences) for m in _TYPO_WORD.finditer(s)]
    if not words:
        raise NotApplicableError("typos", "no word of four or more letters")
    chosen = [k for k in range(len(words)) if rng.random() < options.typo_rate]
    chosen = chosen or [rng.randrange(len(words))]
    new = list(sentences)
    edits = []
    for k in sorted(chosen, key=lambda k: (words[k][0], -words[k][1].start())):
        index, match = words[k]
        wrong = _typo(match.group(0), rng)
        if wrong == match.group(0):
            continue
        new[index] = new[index][: match.start()] + wrong + new[index][match.end() :]
        edits.append(Edit("typos", "typo", index, before=match.group(0), after=wrong))
    if not edits:
        raise NotApplicableError("typos", "no typo changed a word")
    return new, edits


@register_technique(
    "paraphrase",
    min_sentences=1,
    mix_weight=0.0,
    error_type="none (quality kept)",
    description="each sentence rewritten by an instruction-tuned LM (--paraphrase-model; the "
    "offline SmolLM2-135M-Instruct by default), kept only when the encoder's cosine to the "
    "original is >= 0.85, the words differ and the length is 0.6-1.6x (slow: opt-in)",
    suite="invariance-lm",
)
def paraphrase(
    sentences: list[str],
    rng: random.Random,
    corpus: PerturbationCorpus,
    *,
    story_id: str,
    options: PerturbOptions,
) -> tuple[list[str], list[Edit]]:
    """Paraphrase by LM rewriting (:mod:`storyeval.perturb.paraphrase`)."""
    from storyeval.perturb.paraphrase import paraphraser

    model = paraphraser(options.paraphrase_model)
    new, edits = list(sentences), []
    for index, sentence in enumerate(sentences):
        found = model.paraphrase(
            sentence, seed=rng.randrange(2**31), min_similarity=options.paraphrase_similarity
        )
        if found is not None:
            new[index] = found.text
            edits.append(
                Edit(
                    "paraphrase",
                    "paraphrase",
                    index,
                    before=sentence,
                    after=found.text,
                    detail={"similarity": round(found.similarity, 4)},
                )
            )
    if not edits:
        raise NotApplicableError("paraphrase", "no sentence got a rewrite that passes the checks")
    return new, edits
