"""Generation core: reproducible under a seed, clean sentence-final output."""

from __future__ import annotations

import pytest

from storyeval.corpus import Story
from storyeval.generate import DecodingConfig, clean_continuation, generate_stories
from storyeval.signature import Signature


def test_clean_continuation_drops_unfinished_sentence_and_caps_words():
    assert (
        clean_continuation("It rained.  The roof\nleaked. And then")
        == "It rained. The roof leaked."
    )
    assert clean_continuation("One two three. Four five six.", max_words=4) == "One two three."
    assert clean_continuation("no ending at all") == "no ending at all"


def test_decoding_validation_and_labels():
    assert DecodingConfig(do_sample=False).describe() == "greedy"
    assert DecodingConfig(top_k=40, temperature=0.7).describe() == "k40-t0.7"
    with pytest.raises(ValueError, match="top_p"):
        DecodingConfig(top_p=1.5)


def test_same_seed_same_stories(causal_lm):
    prompts = [
        Story("p1", "The old lighthouse keeper heard a knock at midnight.", "x", reference="ref")
    ]
    config = DecodingConfig(top_p=0.9, max_new_tokens=24)
    first = generate_stories(prompts, decoding=config, seed=7, num_stories=2, progress=False)
    again = generate_stories(prompts, decoding=config, seed=7, num_stories=2, progress=False)
    other = generate_stories(prompts, decoding=config, seed=8, num_stories=2, progress=False)
    assert [s.story for s in first] == [s.story for s in again]
    assert [s.story for s in first] != [s.story for s in other]
    assert [s.id for s in first] == [
        "p1-SmolLM2-135M-Instruct-Q4_1-p0.9-1",
        "p1-SmolLM2-135M-Instruct-Q4_1-p0.9-2",
    ]
    assert first[0].reference == "ref" and first[0].extra["prompt_id"] == "p1"
    sig = Signature.parse(first[0].extra["signature"])
    assert (
        sig.fields["model"] == causal_lm.identity
        and sig.fields["top_p"] == "0.9"
        and sig.fields["seed"] == "7"
    )
