"""Generation core: reproducible under a seed, clean sentence-final output."""

from __future__ import annotations

import pytest

from storyeval.base.signature import Signature
from storyeval.corpus import Story
from storyeval.generate import DecodingConfig, clean_continuation, generate_stories


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
    config = DecodingConfig(top_p=0.9, max_new_tokens=40)  # room for a complete sentence
    first = generate_stories(prompts, decoding=config, seed=7, num_stories=2, progress=False)
    again = generate_stories(prompts, decoding=config, seed=7, num_stories=2, progress=False)
    other = generate_stories(prompts, decoding=config, seed=8, num_stories=1, progress=False)
    assert [s.story for s in first] == [s.story for s in again]
    assert first[0].story != other[0].story
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


# --------------------------------------------------------------------------- issue 7

PIRATE = (
    "Once upon a time, there lived a pirate. He hated the sea. He loved his cat, Biscuit. "
    "He sang to her every night. She never liked his songs."
)


def test_truncation_at_full_sentences():
    text = "Mara ran. She found the key under the mat! Then the door opened and"
    assert clean_continuation(text) == "Mara ran. She found the key under the mat!"
    assert clean_continuation(text, max_words=7) == "Mara ran."
    assert clean_continuation(text, max_words=8) == "Mara ran."
    assert clean_continuation(text, max_words=9) == "Mara ran. She found the key under the mat!"
    assert clean_continuation(text, max_chars=9) == "Mara ran."
    assert clean_continuation(text, max_chars=41) == "Mara ran."
    assert clean_continuation(text, max_chars=42) == "Mara ran. She found the key under the mat!"
    assert len("Mara ran. She found the key under the mat!") == 42
    assert clean_continuation(text, max_sentences=1) == "Mara ran."
    assert clean_continuation(' "Stop!" he said. Then') == '"Stop!" he said.'


def test_decoding_from_options_rejects_contradictions():
    assert DecodingConfig.from_options(top_p=0.9).describe() == "p0.9"
    assert (
        DecodingConfig.from_options(greedy=True, repetition_penalty=1.2).generate_kwargs()[
            "do_sample"
        ]
        is False
    )
    with pytest.raises(ValueError, match="greedy"):
        DecodingConfig.from_options(greedy=True, top_k=40)


def test_priming_context_and_separator(causal_lm):
    from storyeval.generate import build_context, default_separator

    assert default_separator(causal_lm.tokenizer) == "<|endoftext|>"
    context = build_context("Once upon a time", ["First.", " Second. ", "Third."], "<|endoftext|>")
    assert context == "First.<|endoftext|>Second.<|endoftext|>Third.<|endoftext|>Once upon a time"
    # the marker is one token, so the model reads three separate documents before the prompt
    ids = causal_lm.tokenizer(context, add_special_tokens=False)["input_ids"]
    assert ids.count(causal_lm.tokenizer.convert_tokens_to_ids("<|endoftext|>")) == 3


def test_too_long_first_sentence_is_regenerated_then_fails(causal_lm):
    from storyeval.generate import GenerationError

    prompts = [Story("p1", "The old lighthouse keeper heard a knock at midnight.", "")]
    with pytest.raises(GenerationError, match=r"p1#1 \(long\)"):
        generate_stories(
            prompts,
            decoding=DecodingConfig(top_k=40, max_new_tokens=16),
            max_words=1,
            max_attempts=2,
            progress=False,
        )


@pytest.mark.slow
def test_copy_filter_drops_regenerates_and_counts(causal_lm):
    """A crafted case: the same distinctive text primes three times and the prompt is its
    first sentence, so the model often copies it; every copy is dropped and regenerated."""
    from storyeval.generate import GenerationError, copy_overlap, generation_summary

    prompts = [Story("p1", "Once upon a time, there lived a pirate.", "", reference="ref")]
    priming = [PIRATE, PIRATE, PIRATE]
    with pytest.raises(GenerationError, match=r"greedy decoding .* p1#1 \(copy\)"):
        generate_stories(
            prompts,
            decoding=DecodingConfig(do_sample=False, max_new_tokens=16),
            priming=priming,
            separator="\n\n",
            progress=False,
        )
    stories = generate_stories(
        prompts,
        decoding=DecodingConfig(temperature=0.7, max_new_tokens=12),
        priming=priming,
        separator="\n\n",
        num_stories=2,
        seed=3,
        max_attempts=40,
        progress=False,
    )
    summary = generation_summary(stories)
    assert summary["dropped_copy"] >= 1
    for story in stories:
        overlap = copy_overlap(story.story, PIRATE)
        assert overlap <= 0.8 and story.extra["copy_overlap"] == pytest.approx(overlap, abs=1e-4)
        dropped = sum(
            story.extra[k]
            for k in ("dropped_empty", "dropped_unfinished", "dropped_long", "dropped_copy")
        )
        assert story.extra["attempts"] == 1 + dropped
    sig = Signature.parse(stories[0].extra["signature"])
    assert sig.fields["priming_n"] == "3" and sig.fields["copy_threshold"] == "0.8"
    assert stories[0].system == "SmolLM2-135M-Instruct-Q4_1-t0.7-3shot"


def test_copy_overlap_crafted_cases():
    from storyeval.generate import copy_overlap, max_copy_overlap

    assert copy_overlap(PIRATE, PIRATE) == 1.0
    edited = PIRATE.replace("sea", "ocean").replace("cat", "dog")
    assert 0.8 < copy_overlap(edited, PIRATE) < 1.0  # two words changed: still a copy
    half = " ".join(PIRATE.split()[:14]) + " Then a storm came and the ship sank with everyone."
    assert 0.4 < copy_overlap(half, PIRATE) < 0.8  # half copied, half new: kept
    stock = "Once upon a time, there lived a baker who hated bread and loved the smell of rain."
    assert copy_overlap(stock, PIRATE) < 0.5  # a shared stock opening is not a copy
    assert max_copy_overlap(stock, []) == 0.0
    with pytest.raises(ValueError, match="no words"):
        copy_overlap("...", PIRATE)


def test_offensive_word_lists(write_file):
    from storyeval.base.errors import DataFileError
    from storyeval.generate import WordListFilter

    default = WordListFilter.default()
    assert default.find("What the fuck's that? Scunthorpe grapes, a cockpit and Moby Dick.") == [
        "fuck's"
    ]
    assert default.identity.startswith("storyeval-default@")
    mine = WordListFilter.from_file(write_file("words.txt", "# my list\nsea monster\nkraken*\n\n"))
    assert mine.find("The SEA   MONSTER ate two Krakens.") == ["SEA   MONSTER", "Krakens"]
    assert mine.identity.startswith("words.txt@")
    with pytest.raises(DataFileError) as info:
        WordListFilter.from_file(write_file("bad.txt", "ok\nbad*term\n<script>\n"))
    assert [p.line for p in info.value.problems] == [2, 3]
    with pytest.raises(DataFileError, match="no terms"):
        WordListFilter.from_file(write_file("empty.txt", "# nothing\n"))


def test_word_filter_drops_regenerates_and_counts(causal_lm, write_file):
    """A crafted list ("the", "a") that most continuations hit: hits are dropped, generated
    again and counted, and no kept story contains a listed word."""
    from storyeval.generate import WordListFilter, generation_summary

    word_filter = WordListFilter.from_file(write_file("words.txt", "the\na\n"))
    prompts = [Story("p1", "The old lighthouse keeper heard a knock at midnight.", "")]
    stories = generate_stories(
        prompts,
        decoding=DecodingConfig(top_k=40, max_new_tokens=20),
        word_filter=word_filter,
        num_stories=2,
        seed=1,
        max_attempts=40,
        progress=False,
    )
    summary = generation_summary(stories)
    assert summary["dropped_offensive"] >= 1
    assert summary["generations"] == 2 + sum(
        v for k, v in summary.items() if k.startswith("dropped")
    )
    for story in stories:
        assert word_filter.find(story.story) == []
    assert Signature.parse(stories[0].extra["signature"]).fields["word_filter"] == (
        word_filter.identity
    )


def test_read_prompts_formats_and_errors(write_file):
    from storyeval.base.errors import DataFileError
    from storyeval.generate import read_prompts

    csv_path = write_file(
        "prompts.csv", "id,prompt,story,genre\np1,It was late.,He slept.,quiet\np2,Dawn came.,,\n"
    )
    prompts = read_prompts(csv_path)
    assert [(p.id, p.prompt, p.reference, p.extra) for p in prompts] == [
        ("p1", "It was late.", "He slept.", {"genre": "quiet"}),
        ("p2", "Dawn came.", None, {"genre": None}),
    ]
    bad = write_file(
        "bad.jsonl",
        '{"id": "p1", "prompt": "A."}\n{"id": "p1", "prompt": "B."}\n{"prompt": "C."}\n[1]\n',
    )
    with pytest.raises(DataFileError) as info:
        read_prompts(bad)
    assert [str(p).split(": ", 1)[0] for p in info.value.problems] == [
        f"{bad}:2",
        f"{bad}:3",
        f"{bad}:4",
    ]
    assert "duplicate id 'p1' (first seen on line 1)" in str(info.value)
    with pytest.raises(DataFileError, match="lacks required column"):
        read_prompts(write_file("nocol.csv", "id,story\na,b\n"))


def test_read_priming_texts(examples_dir):
    from storyeval.base.errors import DataFileError
    from storyeval.corpus import read_stories
    from storyeval.generate import read_priming_texts

    human = read_stories(examples_dir / "human.jsonl")
    texts = read_priming_texts(examples_dir / "human.jsonl")
    assert texts == [f"{s.prompt} {s.story}" for s in human[:3]]
    with pytest.raises(DataFileError, match="holds 60 stories; 61 priming texts"):
        read_priming_texts(examples_dir / "human.jsonl", count=61)


def test_beam_search_is_deterministic_and_signed(causal_lm):
    """Clark (2021, Table 5.4) decoded with 5 beams: ``--beams 5`` runs the model's beam
    search, implies no sampling, and signs the beams (greedy runs sign as before)."""
    prompts = [Story("p1", "The old lighthouse keeper heard a knock at midnight.", "x")]
    beam = DecodingConfig.from_options(beams=3, max_new_tokens=30)
    assert beam.describe() == "beam3" and beam.generate_kwargs()["num_beams"] == 3
    with pytest.raises(ValueError, match="beam search takes no temperature"):
        DecodingConfig.from_options(beams=3, top_p=0.9)
    with pytest.raises(ValueError, match="greedy"):
        DecodingConfig(num_beams=2)  # sampling is the default
    first = generate_stories(prompts, decoding=beam, seed=1, progress=False)
    again = generate_stories(prompts, decoding=beam, seed=2, progress=False)
    greedy = DecodingConfig.from_options(greedy=True, max_new_tokens=30)
    plain = generate_stories(prompts, decoding=greedy, seed=1, progress=False)
    assert first[0].story == again[0].story  # deterministic
    assert Signature.parse(first[0].extra["signature"]).fields["num_beams"] == "3"
    assert "num_beams" not in Signature.parse(plain[0].extra["signature"]).fields
    assert "beam3" in first[0].id
