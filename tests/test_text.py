"""Sentence splitting, tokenization and truncation at sentence ends."""

from __future__ import annotations

import warnings

import pytest

from storyeval.text import TruncationWarning, count_words, split_sentences, tokenize_words, truncate

STORY = 'Mara found a key. "Whose is this?" she asked! Nobody answered. The house was silent.'


@pytest.mark.parametrize("method", ["pysbd", "spacy"])
def test_both_splitters_agree_on_a_plain_story(method):
    assert split_sentences(STORY, method=method) == [
        "Mara found a key.",
        '"Whose is this?" she asked!',
        "Nobody answered.",
        "The house was silent.",
    ]


def test_unknown_split_method_is_rejected():
    with pytest.raises(ValueError, match="must be one of pysbd, spacy"):
        split_sentences("x", method="nltk")  # type: ignore[arg-type]


def test_tokenize_keeps_contractions_and_separates_punctuation():
    assert tokenize_words("She didn't know, did she?") == [
        "She",
        "didn't",
        "know",
        ",",
        "did",
        "she",
        "?",
    ]
    assert tokenize_words("", punctuation=False) == []


# The source papers cut at a full sentence: 150 words (Karpinska et al.), 100 words, 400 characters
# (Callan & Foster).
@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"max_words": 4}, "Mara found a key."),
        ({"max_words": 9}, 'Mara found a key. "Whose is this?" she asked!'),
        ({"max_words": 100}, STORY),
        ({"max_chars": 20}, "Mara found a key."),
        ({"max_chars": len(STORY)}, STORY),
        (
            {"max_chars": len(STORY) - 1},
            'Mara found a key. "Whose is this?" she asked! Nobody answered.',
        ),
    ],
)
def test_truncate_at_sentence_end(kwargs, expected):
    result = truncate(STORY, **kwargs)
    assert result == expected
    cap = kwargs.get("max_words") or kwargs["max_chars"]
    assert (count_words(result) if "max_words" in kwargs else len(result)) <= cap


def test_truncate_warns_when_first_sentence_is_too_long():
    with pytest.warns(TruncationWarning):
        assert truncate("one two three four five.", max_words=3) == "one two three"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        truncate("one two.", max_words=3)


@pytest.mark.parametrize(
    "kwargs", [{}, {"max_words": 3, "max_chars": 3}, {"max_words": 0}, {"max_chars": -1}]
)
def test_truncate_validates_caps(kwargs):
    with pytest.raises(ValueError):
        truncate("text.", **kwargs)
