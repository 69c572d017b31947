"""Diversity, form and edit metrics: hand-worked cases and independent references.

Provenance: distinct-n, repetition and sentence length are counted by hand below; the
concreteness expectation is computed from spaCy's tags and the Brysbaert table directly;
Levenshtein is checked against ``nltk.edit_distance``; USER's recursive longest-common-
substring matching against ``difflib.SequenceMatcher(autojunk=False)`` (Ratcliff/Obershelp,
the same recursion) and hand-worked cases; Jaccard by hand.
"""

from __future__ import annotations

import difflib
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nltk.metrics.distance import edit_distance

from storyeval.corpus import Story
from storyeval.metrics import score_stories
from storyeval.metrics.diversity import concreteness_ratings
from storyeval.metrics.edits import jaccard, levenshtein, matched_tokens, user


def _score(text, metrics, **options):
    run = score_stories([Story("a", "", text, system="x")], metrics, options=options, bootstrap=0)
    return {s.metric: s.value for s in run.scores}


def test_distinct_and_repetition_hand_worked():
    # words: the cat saw the cat . the cat saw the dog  -> 10 words
    text = "The cat saw the cat. The cat saw the dog."
    values = _score(
        text, "distinct1,distinct2,distinct3,repeated_ngram_rate,repeated_sentence_rate"
    )
    assert values["distinct1"] == pytest.approx(4 / 10)  # the, cat, saw, dog
    # bigrams: the-cat saw-the cat-the (the-cat, cat-saw x2, saw-the x2, the-cat x3, cat-the, the-dog)
    assert values["distinct2"] == pytest.approx(5 / 9)
    assert values["distinct3"] == pytest.approx(6 / 8)
    # 4-grams: 7, of which "the cat saw the" repeats once
    assert values["repeated_ngram_rate"] == pytest.approx(1 / 7)
    assert values["repeated_sentence_rate"] == 0.0
    assert _score("He ran. She sat. He ran!", "repeated_sentence_rate")[
        "repeated_sentence_rate"
    ] == pytest.approx(1 / 3)


def test_distinct_counts_punctuation_only_when_asked():
    plain = _score("Go, go, go!", "distinct1")["distinct1"]
    with_punct = _score("Go, go, go!", "distinct1", **{"distinct1.punctuation": "true"})
    assert plain == pytest.approx(1 / 3) and with_punct["distinct1"] == pytest.approx(3 / 6)


def test_undefined_values_are_nan_not_zero():
    values = _score("Hi.", "distinct2,distinct3,repeated_ngram_rate")
    assert all(math.isnan(v) for v in values.values())


def test_sentence_length_is_mean_words_per_sentence():
    assert _score("One two three. Four five!", "sentence_length")["sentence_length"] == 2.5


def test_concreteness_uses_spacy_pos_and_brysbaert_lemmas(nlp):
    text = "The dogs chased a red ball across the garden. Ideas fade when people forget them."
    values = _score(text, "concreteness_noun,concreteness_verb")
    ratings = concreteness_ratings()
    doc = nlp(text)
    for pos, metric in (("NOUN", "concreteness_noun"), ("VERB", "concreteness_verb")):
        found = [
            ratings.get(t.lemma_.lower(), ratings.get(t.text.lower())) for t in doc if t.pos_ == pos
        ]
        found = [x for x in found if x is not None]
        assert len(found) >= 2
        assert values[metric] == pytest.approx(np.mean(found))
    assert ratings["dog"] > values["concreteness_verb"] > ratings["idea"]


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet="abcde ", max_size=25), st.text(alphabet="abcde ", max_size=25))
def test_levenshtein_matches_nltk(a, b):
    assert levenshtein(a, b) == edit_distance(a, b)


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet="ab ", max_size=200), st.text(alphabet="abc", max_size=200))
def test_levenshtein_bit_vectors_wider_than_a_machine_word_match_nltk(a, b):
    """Myers' bit vectors are as wide as the shorter input: past 64 and 128 positions too."""
    assert levenshtein(a, b) == levenshtein(b, a) == edit_distance(a, b)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.sampled_from("abcdef"), max_size=30),
    st.lists(st.sampled_from("abcdef"), max_size=30),
)
def test_user_matching_is_ratcliff_obershelp(a, b):
    blocks = difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks()
    assert matched_tokens(a, b) == sum(block.size for block in blocks)


def test_user_hand_worked():
    # original: The dog ran away .  (5 tokens) ; edited: The dog ran home quickly . (6)
    # longest common run "The dog ran" (3), then "." on the right (1): 4 matched
    score = user("The dog ran home quickly.", "The dog ran away.")
    assert (score.precision, score.recall) == (4 / 5, 4 / 6)
    assert score.f1 == pytest.approx(2 * 0.8 * (4 / 6) / (0.8 + 4 / 6))
    # a moved block counts once: the longest run wins, the crossing one cannot match
    assert matched_tokens(["a", "b", "c", "d"], ["c", "d", "a", "b"]) == 2
    assert math.isnan(user("", "").f1) and user("x", "y").f1 == 0.0


def test_jaccard_hand_worked():
    assert jaccard("The cat sat.", "the cat ran") == pytest.approx(2 / 4)
    assert math.isnan(jaccard("", "!"))


def test_edit_metrics_read_the_original_field():
    stories = [
        Story(
            "a",
            "",
            "The dog ran home quickly.",
            system="x",
            extra={"suggestion": "The dog ran away."},
        ),
        Story(
            "b", "", "Nothing kept here.", system="x", extra={"suggestion": "Entirely new words."}
        ),
    ]
    run = score_stories(
        stories, "levenshtein,jaccard,user", options={"edits.original": "suggestion"}, bootstrap=0
    )
    values = {(s.item_id, s.metric): s.value for s in run.scores}
    assert values[("a", "levenshtein")] == levenshtein(
        "The dog ran away.", "The dog ran home quickly."
    )
    assert values[("a", "user")] == pytest.approx(user(stories[0].story, "The dog ran away.").f1)
    assert values[("b", "jaccard")] == 0.0
    assert "original:" not in run.scores[0].signature  # which field: an input, like the file
