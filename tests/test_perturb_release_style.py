"""Perturbation on text in UNION's release style (lowercased, tokenized: ``he had fun ! then
...``): sentences split at their end tokens, and a UNION mixture that never stops the corpus
for one story. Before 0.9.0 the splitter merged lowercase sentences, so a four-sentence story
could come out as two; a mixture that drew repetition and reordering then copied one of the two
over the other and reordering failed with "the sentences are identical", aborting all 4,204
stories of the release."""

from __future__ import annotations

import random
from typing import Any

import pytest

from storyeval.corpus import Story, write_stories
from storyeval.perturb import (
    NotApplicableError,
    PerturbationCorpus,
    PerturbOptions,
    apply_mixture,
    apply_techniques,
    perturb_stories,
)
from storyeval.text import looks_lowercased_tokenized, split_sentences

# ROCStories-like stories in the release's style: (text, the sentences its end tokens mark)
RELEASE_STYLE = [
    (
        "[MALE] went to the fair . he spent more than he could afford , but had fun ! then he "
        "rode the ferris wheel twice . he went home happy .",
        4,
    ),
    (
        "[FEMALE] wanted a dog . her mom said no ! she asked again and again ? finally her mom "
        "gave in .",
        4,
    ),
    ("kim did n't like her job . she quit on monday . she found a new one . it paid more .", 4),
    (
        'the coach yelled , " run faster ! " they ran hard . they won the game . everyone '
        "cheered .",
        4,
    ),
    ("[NEUTRAL] waited ... and waited . the bus came late . it was full . they walked .", 4),
]


@pytest.mark.parametrize(("text", "count"), RELEASE_STYLE)
def test_lowercase_tokenized_sentences_split_at_their_end_tokens(text: str, count: int) -> None:
    assert looks_lowercased_tokenized(text)
    sentences = split_sentences(text)
    assert len(sentences) == count, sentences
    assert " ".join(sentences) == text  # cut from the text, nothing rewritten
    assert all(s.split()[-1] in {".", "!", "?", '"'} for s in sentences)


def test_cased_text_keeps_its_splitter() -> None:
    """Cased tokenized text is split as before (pysbd on a detokenized copy), so an
    abbreviation or an ellipsis before a lowercase word stays inside its sentence."""
    text = "Dr. Smith came home . She was tired ... but happy . Then she slept ."
    assert not looks_lowercased_tokenized(text)
    assert split_sentences(text) == [
        "Dr. Smith came home .",
        "She was tired ... but happy .",
        "Then she slept .",
    ]
    assert split_sentences("one two . three four !", method="tokens") == [
        "one two .",
        "three four !",
    ]


@pytest.fixture(scope="module")
def release_corpus(nlp: Any) -> tuple[list[Story], PerturbationCorpus]:
    stories = [Story(f"r{n}", "", text) for n, (text, _) in enumerate(RELEASE_STYLE)]
    stories.append(Story("two", "", "he ran home . she ran home too ."))
    stories.append(Story("tiny", "", "oh ."))
    corpus = PerturbationCorpus(((s.id, s.story) for s in stories), nlp=nlp)
    return stories, corpus


def test_a_technique_that_fails_after_another_says_so(release_corpus: Any) -> None:
    """Reordering two sentences that an earlier repetition made identical: the error names the
    earlier technique, not the story, as the cause."""
    stories, corpus = release_corpus
    options = PerturbOptions(sentence_repetition_probability=1.0)
    two = next(s for s in stories if s.id == "two")
    with pytest.raises(NotApplicableError, match=r"all the same text.*after repetition"):
        apply_techniques(
            two.story, ["repetition", "reordering"], random.Random(0), corpus,
            story_id="two", options=options,
        )  # fmt: skip


def test_a_mixture_redraws_what_cannot_apply_and_counts_it(release_corpus: Any, nlp: Any) -> None:
    """Repetition then reordering on a two-sentence story: reordering cannot apply after the
    repetition, another technique is drawn in its place (or none is left), and the run says so
    in each record, its summary and its signature. Nothing raises."""
    stories, corpus = release_corpus
    options = PerturbOptions(
        sentence_repetition_probability=1.0,
        mix_weights={"repetition": 100.0, "reordering": 100.0},
    )
    two = next(s for s in stories if s.id == "two")
    redrawn = []
    for seed in range(40):
        text, applied, edits, redraws = apply_mixture(
            two.story, ["repetition", "reordering", "negation"], random.Random(seed), corpus,
            story_id="two", options=options,
        )  # fmt: skip
        assert text != two.story and applied and {e.technique for e in edits} == set(applied)
        redrawn += [r for r in redraws if r.technique == "reordering"]
    assert redrawn, "repetition and reordering were never drawn together in 40 seeds"
    assert all("after repetition" in r.reason for r in redrawn)
    assert {r.replacement for r in redrawn} <= {"negation", None}
    run = perturb_stories(
        [two] * 1 + [s for s in stories if s.id != "two"], mode="mix", seed=3,
        samples=8, options=options, nlp=nlp, corpus=corpus,
    )  # fmt: skip
    fields = run.signature.fields
    assert fields["redrawn"] == run.redrawn == sum(bool(s.redraws) for s in run.stories) > 0
    assert fields["left_out"] == len(run.skipped) == 0
    record = next(r for r, s in zip(run.records(), run.stories, strict=True) if s.redraws)
    assert record["redrawn"][0]["technique"] in {"repetition", "reordering", "negation"}
    assert f"{run.redrawn} with a technique redrawn; 0 left out" in run.summary()


def test_a_mixture_leaves_out_a_story_nothing_can_change(release_corpus: Any, nlp: Any) -> None:
    """A one-sentence story under reordering alone: left out and counted, the others kept."""
    stories, corpus = release_corpus
    with pytest.warns(UserWarning, match="1 output"):
        run = perturb_stories(stories, "reordering", mode="mix", seed=1, nlp=nlp, corpus=corpus)
    assert list(run.skipped) == ["tiny-p0"] and "1 sentence" in run.skipped["tiny-p0"]
    assert run.signature.fields["left_out"] == 1
    assert len(run.stories) == len(stories) - 1


def test_perturb_mix_cli_finishes_on_release_style_text(tmp_path: Any, run_cli: Any) -> None:
    stories = [Story(f"ref{n}", "", text) for n, (text, _) in enumerate(RELEASE_STYLE * 4)]
    stories.append(Story("tiny", "", "oh ."))
    source = tmp_path / "train.jsonl"
    write_stories(source, stories)
    code, out, err = run_cli(
        "perturb", str(source), "--mix", "--seed", "1", "--mix-weights",
        "repetition=0.4,substitution=0.3,reordering=0.2,negation=0.1",
        "-o", str(tmp_path / "neg.jsonl"), "-q",
    )  # fmt: skip
    assert code == 0, err
    assert "left out" in out and "|left_out:" in out and "|redrawn:" in out
    assert len((tmp_path / "neg.jsonl").read_text().splitlines()) >= len(stories) - 1
