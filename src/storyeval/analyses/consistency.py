"""Consistency checks: passages of a story that contradict each other, each finding quoted
with the two sentences.

Two detectors:

* with an NLI model (``nli``: any hub sequence classifier with entailment / neutral /
  contradiction labels, e.g. ``roberta-large-mnli``), every pair of sentences that share
  content words is scored, earlier sentence as the premise, and a pair whose contradiction
  probability reaches ``threshold`` is a finding (``method`` ``nli:MODEL``);
* offline (no NLI model installs offline), a **weaker rule-based fallback**: a later sentence
  that says what an earlier one said with its negation flipped (the same content lemmas, one
  of the two negated: "She locked the door" / "She did not lock the door"), or with one
  word replaced by its WordNet antonym ("The room was warm" / "The room was cold"). It finds
  contradictions of that surface form only: character attributes stated in other words,
  timelines and world rules need the NLI model or an LLM judge;
* with an LLM judge (``judge``: any :mod:`storyeval.judge.backends` backend, local or behind an
  OpenAI-compatible server), the same pairs of sentences are each asked whether the later one
  contradicts the earlier (yes/no, the story shown for context); the probability of *yes* is
  the score (``method`` ``judge:MODEL``).

The perturbation technique ``contradiction`` plants contradictions of the first kind, so the
fallback's recall on planted errors and its false alarms on the original stories can be
measured (``tests/test_consistency.py`` does).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import pandas as pd

from storyeval.corpus import Story

#: Share of content lemmas two sentences must share to be compared.
MIN_OVERLAP = 0.8
_NEGATIONS = frozenset({"not", "n't", "never", "no", "nobody", "nothing", "nowhere", "neither"})
_CONTENT = frozenset({"NOUN", "PROPN", "VERB", "ADJ", "ADV", "NUM"})


@dataclass(frozen=True)
class Finding:
    """Two sentences of a story that contradict each other."""

    item_id: str
    first_index: int
    first: str
    second_index: int
    second: str
    kind: str
    score: float
    method: str


@dataclass(frozen=True)
class _Sentence:
    text: str
    lemmas: frozenset[str]
    negated: bool
    words: tuple[tuple[str, str], ...]  # (lemma, universal POS) of content words


def _analyse(sentences: Sequence[str], nlp: Any) -> list[_Sentence]:
    out = []
    for doc in nlp.pipe(list(sentences)):
        words = tuple(
            (t.lemma_.lower(), t.pos_)
            for t in doc
            if t.pos_ in _CONTENT and t.lower_ not in _NEGATIONS and t.lemma_.lower() != "do"
        )
        negated = any(t.dep_ == "neg" or t.lower_ in _NEGATIONS for t in doc)
        out.append(_Sentence(doc.text, frozenset(w for w, _ in words), negated, words))
    return out


def _overlap(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / max(1, len(a | b))


def _antonym_pair(a: _Sentence, b: _Sentence) -> bool:
    """The two differ in one content word each, and those words are WordNet antonyms."""
    from storyeval.perturb.lexicon import antonyms

    only_a = [(w, p) for w, p in a.words if w not in b.lemmas]
    only_b = [w for w, _ in b.words if w not in a.lemmas]
    if len(only_a) != 1 or len(only_b) != 1 or len(a.lemmas & b.lemmas) < 2:
        return False
    word, pos = only_a[0]
    return only_b[0] in {x.lower() for x in antonyms(word, pos)}


def _rule_findings(story: Story, sentences: list[_Sentence]) -> list[Finding]:
    found = []
    for (i, a), (j, b) in itertools.combinations(enumerate(sentences), 2):
        if not a.lemmas or not b.lemmas:
            continue
        if a.negated != b.negated and _overlap(a.lemmas, b.lemmas) >= MIN_OVERLAP:
            kind, score = "negation", _overlap(a.lemmas, b.lemmas)
        elif a.negated == b.negated and _antonym_pair(a, b):
            kind, score = "antonym", _overlap(a.lemmas, b.lemmas)
        else:
            continue
        found.append(Finding(story.id, i, a.text, j, b.text, kind, score, "rules"))
    return found


def _nli_findings(
    story: Story, sentences: list[_Sentence], nli: Any, threshold: float
) -> list[Finding]:
    pairs = [
        (i, j)
        for (i, a), (j, b) in itertools.combinations(enumerate(sentences), 2)
        if _overlap(a.lemmas, b.lemmas) >= 0.2
    ]
    if not pairs:
        return []
    probabilities = nli.probabilities(
        [sentences[i].text for i, _ in pairs], [sentences[j].text for _, j in pairs]
    )
    return [
        Finding(
            story.id,
            i,
            sentences[i].text,
            j,
            sentences[j].text,
            "contradiction",
            float(p[2]),
            f"nli:{nli.identity}",
        )
        for (i, j), p in zip(pairs, probabilities, strict=True)
        if p[2] >= threshold
    ]


def _judge_findings(
    story: Story, sentences: list[_Sentence], judge: Any, threshold: float
) -> list[Finding]:
    """Pairs of sentences sharing words, each asked of an LLM judge: a finding where the
    probability of *yes* (renormalised over yes and no; 1 or 0 for a written answer) reaches
    ``threshold``. An answer that is neither is left out, never counted as either."""
    from storyeval.judge.backends import Decoding
    from storyeval.judge.parse import yes_probability
    from storyeval.judge.prompts import contradiction_request

    pairs = [
        (i, j)
        for (i, a), (j, b) in itertools.combinations(enumerate(sentences), 2)
        if _overlap(a.lemmas, b.lemmas) >= 0.2
    ]
    requests = [
        contradiction_request(story, sentences[i].text, sentences[j].text) for i, j in pairs
    ]
    answers = judge.answer(requests, Decoding(max_new_tokens=8)) if requests else []
    found = []
    for (i, j), answer in zip(pairs, answers, strict=True):
        p_yes = yes_probability(answer)
        if p_yes is not None and p_yes >= threshold:
            finding = Finding(
                story.id,
                i,
                sentences[i].text,
                j,
                sentences[j].text,
                "contradiction",
                p_yes,
                f"judge:{judge.identity}",
            )
            found.append(finding)
    return found


def find_contradictions(
    stories: Sequence[Story],
    *,
    nli: str | None = None,
    judge: Any = None,
    threshold: float = 0.5,
    nlp: Any = None,
) -> pd.DataFrame:
    """Every contradiction found in each story (see the module docstring): a table with the
    columns of :class:`Finding`, one row per pair of sentences.

    Parameters
    ----------
    nli : str, optional
        An NLI classifier (hub name or directory); default: the rule-based fallback.
    judge : JudgeBackend, optional
        An LLM judge (:mod:`storyeval.judge.backends`) asked about every pair of sentences that
        share words; its probability of *yes* is the score (not with ``nli``).
    threshold : float
        The NLI contradiction probability (or the judge's probability of *yes*) that makes a
        finding.
    """
    if nli is not None and judge is not None:
        raise ValueError("give an NLI model or a judge, not both")
    from storyeval.text import split_sentences

    if nlp is None:
        from storyeval.models import load_spacy

        nlp = load_spacy()
    model = None
    if nli is not None:
        from storyeval.learn.nubia import HubNli

        model = HubNli(nli)
    rows: list[Finding] = []
    for story in stories:
        sentences = _analyse(split_sentences(story.story), nlp)
        if judge is not None:
            rows += _judge_findings(story, sentences, judge, threshold)
        elif model is not None:
            rows += _nli_findings(story, sentences, model, threshold)
        else:
            rows += _rule_findings(story, sentences)
    columns = [f for f in Finding.__dataclass_fields__]
    return pd.DataFrame([asdict(r) for r in rows], columns=columns)
